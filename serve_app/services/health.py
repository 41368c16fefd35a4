"""GET /api/health: what works now. Every part is asked at once, each with a
deadline, so the answer comes within about PROBE_TIMEOUT_S whatever is down;
at most once per CAIRN_HEALTH_SNAPSHOT_S per replica (``ctx.health``), since
the parts are shared by every replica and the route takes no key.

``healthy``: every part works. ``degraded`` (200): the API answers, but a
part it can do without is down (semantic search, the dispatcher, the shared
rate limits, the trending counter) and the reason says what the service does
meanwhile. ``unhealthy`` (503): the database cannot be reached. Reasons are
fixed sentences: no exception text reaches a client (docs/decisions/deployment-and-operations.md,
"Health states").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import psutil

from serve_app.context import AppContext
from serve_app.runtime.semantic import NoSemanticSearch
from storage.repositories import health as health_repo

log = logging.getLogger("cairn.health")

# How long each part may take to answer (the database ping included: a
# request would wait up to CAIRN_DB_CONNECT_WAIT_S for a connection, a probe
# does not).
PROBE_TIMEOUT_S = 2.0

_PROCESS = psutil.Process()
T = TypeVar("T")

UP: dict[str, Any] = {"state": "up", "reason": None}


def down(reason: str) -> dict[str, Any]:
    return {"state": "down", "reason": reason}


async def _probe(name: str, call: Awaitable[T]) -> T | None:
    """The part's answer, or None when it fails or misses the deadline."""
    try:
        return await asyncio.wait_for(call, PROBE_TIMEOUT_S)
    except Exception as exc:
        log.warning("health: %s did not answer (%s)", name, type(exc).__name__)
        return None


async def _ping(ctx: AppContext) -> float | None:
    """The database round trip in milliseconds, None when unreachable."""
    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(health_repo.ping(ctx.engine), PROBE_TIMEOUT_S)
    except Exception as exc:
        log.warning("health: database unreachable (%s)", type(exc).__name__)
        return None
    return (time.perf_counter() - t0) * 1000


def search_part(ctx: AppContext, stats: dict[str, Any] | None) -> dict[str, Any]:
    if isinstance(ctx.search, NoSemanticSearch):
        return {"state": "off", "reason": "Semantic search is switched off; search uses full text."}
    if stats is None:
        return down("The vector index does not answer; search uses full text.")
    if stats.get("embedder") not in (None, "ok"):
        return down(
            "The embedder does not answer (no replica running); search uses full text "
            "and new content waits to be embedded."
        )
    if not stats.get("ready"):
        return down("The search indexes are loading; search uses full text meanwhile.")
    if stats.get("state") == "failing":
        return down("Embedding new content fails; it is retried, and search uses what is indexed.")
    return UP


@dataclass(frozen=True)
class Reading:
    """One look at every part: what GET /api/health answers from."""

    status: str
    taken_at: datetime
    db_ms: float | None
    details: dict[str, Any]

    @property
    def status_code(self) -> int:
        """503 while the database cannot be reached, else 200."""
        return 503 if self.db_ms is None else 200


async def _look(ctx: AppContext) -> Reading:
    """Ask every part at once, each with a deadline."""
    db_ms, trending, dispatch, search, limiter_ok = await asyncio.gather(
        _ping(ctx),
        _probe("trending", ctx.trending.stats()),
        _probe("dispatcher", ctx.dispatch.stats()),
        _probe("search", ctx.search.stats()),
        _probe("rate limiter", ctx.limiter.available()),
    )
    db_ok = db_ms is not None
    parts = {
        "database": UP if db_ok else down("The database cannot be reached."),
        "search": search_part(ctx, search),
        "dispatcher": UP
        if dispatch is not None
        else down("The dispatcher does not answer; notifications and e-mail wait in the database."),
        "rate_limiter": UP
        if limiter_ok
        else down(
            "The shared rate-limit windows do not answer; each replica counts alone meanwhile."
        ),
        "trending": UP
        if trending is not None
        else down("The trending counter does not answer; trending ranks from the database."),
    }
    if not db_ok:
        status = "unhealthy"
    elif any(part["state"] == "down" for part in parts.values()):
        status = "degraded"
    else:
        status = "healthy"
    details: dict[str, Any] = {
        "parts": parts,
        # The trending counter's state; null while it cannot answer (the feed
        # then ranks from Postgres).
        "trending": trending,
        # The notification queues (fan-out jobs, e-mail) and the dispatcher's
        # counters; null while it cannot answer.
        "dispatch": dispatch,
        # The vector index and its worker (model, sizes, pending jobs); null
        # while semantic search cannot answer (search then runs on full text).
        "search": search,
    }
    return Reading(status, datetime.now(UTC), db_ms, details)


async def report(ctx: AppContext, started: float, *, detailed: bool) -> tuple[int, dict[str, Any]]:
    """(status code, body) of GET /api/health; ``started``: the request's
    perf_counter start, for response_time_ms. ``detailed``: with each part's
    state and the parts' own figures (staff and the operator only).

    The parts are looked at through the replica's snapshot (``ctx.health``):
    however many callers ask, the parts (the database, the VectorIndex, the
    dispatcher, trending, every rate-limit shard: single instances shared by
    all replicas) are asked at most once per CAIRN_HEALTH_SNAPSHOT_S per
    replica, and callers arriving meanwhile share the look in progress."""
    reading: Reading = await ctx.health.get(lambda: _look(ctx))
    body: dict[str, Any] = {
        "status": reading.status,
        "timestamp": reading.taken_at.isoformat(),
        "metrics": {
            "response_time_ms": 0.0,
            "db_latency_ms": round(reading.db_ms, 3) if reading.db_ms is not None else None,
            "db_connected": reading.db_ms is not None,
            "cache_entries": ctx.cache_entries(),
            "memory_usage_mb": round(_PROCESS.memory_info().rss / 1_048_576, 1),
            "uptime_s": round(time.time() - ctx.started_at, 1),
        },
    }
    if detailed:
        body.update(reading.details)
        # This replica's BM25 index (serve_app/runtime/index_copies/lexical.py): built yet, sizes,
        # changes followed; null with CAIRN_SEARCH_LEXICAL=false.
        body["lexical"] = ctx.lexical.stats() if ctx.lexical is not None else None
        # Image checks on this replica: slots, running now, refused as busy.
        body["uploads"] = ctx.decodes.stats()
        # Long-lived connections on this replica (serve_app/http/admission.py).
        body["streams"] = ctx.connections.stats()
        # The API keys this replica keeps (serve_app/runtime/keycache.py).
        body["keys"] = ctx.key_cache.stats()
    body["metrics"]["response_time_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return reading.status_code, body
