"""What an Api replica tells its operators (``telemetry.metrics``): every request
counted and timed by door, route template and status class; its long-lived
answers counted by kind while they stay open; and, every few seconds, its
database pool, stream slots and index copies sampled.

The door of a request is read off the route that answered it (the router
puts it in the scope): a page (``serve_app.web``), a stream
(``serve_app.streams``), the MCP transport (``/mcp``; each tool call is
counted by the MCP door under its tool name), the API docs, or REST. A path
no route matched is counted as route ``unmatched``: raw paths never become
labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve_app.context import AppContext
from serve_app.http import admission
from telemetry import metrics

log = logging.getLogger("cairn.metrics")

# The route templates FastAPI adds itself (served by address, no door of ours).
_DOCS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
_MCP_PATH = "/mcp"
UNMATCHED = "unmatched"

_CLASSES = {1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}


def door_of(route: Any) -> tuple[str, str]:
    """(door, route template) of the route that answered a request."""
    if route is None:
        return "none", UNMATCHED
    path = getattr(route, "path", None) or UNMATCHED
    if path == _MCP_PATH:
        return "mcp_transport", path
    if path in _DOCS:
        return "docs", path
    module = getattr(getattr(route, "endpoint", None), "__module__", "") or ""
    if module.startswith("serve_app.web"):
        return "page", path
    if module.startswith("serve_app.streams"):
        return "stream", path
    return "rest", path


def status_class(status: int) -> str:
    return _CLASSES.get(status // 100, "5xx")


# The kind of a long-lived answer, by door.
_STREAM_KINDS = {"stream": "notifications", "mcp_transport": "mcp"}


class Observe:
    """The outermost middleware: one count and one latency per HTTP request,
    and the open long-lived answers by kind. A route's labels are worked out
    once (cached by route object)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # Routes live as long as the app: their labels are worked out once.
        self._labels: dict[int, tuple[str, str, Any]] = {}
        self._open: dict[str, int] = {}
        # The app's routes that are not FastAPI's (the MCP transport, the
        # docs, mounts), which leave no route in the scope: by exact path.
        self._plain: dict[str, Any] | None = None

    def _route(self, scope: Scope) -> Any:
        """The route that answered: the router's (FastAPI routes), else the
        plain route at exactly this path, else None (unmatched)."""
        route = scope.get("route")
        if route is not None:
            return route
        if self._plain is None:
            app = scope.get("app")
            routes = getattr(getattr(app, "router", None), "routes", None) or []
            self._plain = {
                r.path: r for r in routes if getattr(r, "path", None) and "{" not in r.path
            }
        return self._plain.get(scope.get("path", ""))

    def _series(self, route: Any) -> tuple[str, str, Any]:
        found = self._labels.get(id(route))
        if found is None:
            door, template = door_of(route)
            found = (door, template, metrics.REQUEST_SECONDS.labels(door, template))
            self._labels[id(route)] = found
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500
        stream_kind: str | None = None

        async def observed_send(message: Message) -> None:
            nonlocal status, stream_kind
            if message["type"] == "http.response.start":
                status = message["status"]
                # A long-lived answer (it took a connection slot at admission).
                if scope.get(admission._SLOTS):
                    door = self._series(self._route(scope))[0]
                    stream_kind = _STREAM_KINDS.get(door, door)
                    self._stream_moved(stream_kind, 1)
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            if stream_kind is not None:
                self._stream_moved(stream_kind, -1)
            door, template, seconds = self._series(self._route(scope))
            seconds.observe(time.perf_counter() - t0)
            metrics.REQUESTS.labels(door, template, status_class(status)).inc()

    def _stream_moved(self, kind: str, by: int) -> None:
        n = self._open[kind] = self._open.get(kind, 0) + by
        metrics.STREAMS_OPEN.labels(kind).set(n)


def pool_waiters(engine: Any) -> int:
    """Requests waiting for one of the engine's pooled connections (the
    asyncio queue's getters; 0 where the pool does not queue)."""
    # SQLAlchemy makes the asyncio queue on first use (memoized): read it
    # without making it.
    inner = getattr(engine.sync_engine.pool, "_pool", None)
    queue = vars(inner).get("_queue") if inner is not None else None
    getters = getattr(queue, "_getters", None)
    return len(getters) if getters is not None else 0


def copy_lag_s(copy: Any) -> float | None:
    """Seconds since an index copy last read the change log (-1 while it is
    built), or None for something that is no copy."""
    lag = getattr(copy, "lag_s", None)
    return lag() if callable(lag) else None


def sample(ctx: AppContext) -> None:
    """Set this replica's gauges: pool, stream slots, index copies."""
    pool = ctx.engine.sync_engine.pool
    checked_out = getattr(pool, "checkedout", None)
    if callable(checked_out):
        metrics.DB_POOL_IN_USE.set(checked_out())
        metrics.DB_POOL_SIZE.set(ctx.settings.db_pool_size + max(ctx.settings.db_max_overflow, 0))
    metrics.DB_POOL_WAITERS.set(pool_waiters(ctx.engine))
    metrics.STREAM_SLOTS_CAP.set(ctx.connections.per_replica)
    for name, copy in (("vectors", ctx.search), ("bm25", ctx.lexical)):
        lag = copy_lag_s(copy)
        if lag is not None:
            metrics.INDEX_COPY_LAG_SECONDS.labels(name).set(lag)


async def sampling(ctx: AppContext, every_s: float) -> None:
    """``sample`` every ``every_s`` seconds until cancelled."""
    while True:
        try:
            sample(ctx)
        except Exception:
            log.exception("sampling metrics failed")
        await asyncio.sleep(every_s)


@contextlib.asynccontextmanager
async def sampler(ctx: AppContext) -> Any:
    """Run ``sampling`` for the app's lifetime (when this process records)."""
    if not metrics.enabled():
        yield
        return
    task = asyncio.create_task(sampling(ctx, ctx.settings.metrics_sample_s), name="cairn-metrics")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
