"""FastAPI dependencies: the request transaction, the caller (as admitted by
serve_app/http/admission.py), the page-depth cap."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, cast

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from pydantic import BaseModel
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.http import admission
from serve_app.http.admission import dependants
from serve_app.http.identity import (  # noqa: F401 - the names routes and doors import
    SESSION_COOKIE,
    Caller,
    client_address,
    missing_key,
)
from serve_app.kit import hooks, keys
from serve_app.services import views

log = logging.getLogger("cairn.transactions")


async def get_ctx(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


Ctx = Annotated[AppContext, Depends(get_ctx)]


@asynccontextmanager
async def transaction(ctx: AppContext) -> AsyncIterator[AsyncSession]:
    """One unit of work (a request, an MCP tool call): committed when the block
    ends, rolled back if it raises; after-commit hooks run once it committed."""
    async with ctx.sessions() as session:
        hooks.set_notify(session, ctx.notify)
        hooks.set_key_cache(session, ctx.key_cache.forget)
        hooks.set_key_check(session, functools.partial(keys.verify, ctx.secret))
        try:
            yield session
            await session.commit()
        except BaseException:
            hooks.discard(session)
            pending = hooks.take_after_rollback(session)
            await session.rollback()
            for work in pending:
                await _apart(ctx, work)
            raise
        await hooks.run_after_commit(session)


async def _apart(ctx: AppContext, work: hooks.Work) -> None:
    """One piece of after-rollback work in its own transaction; a failure is
    logged, and the request's own error still goes out."""
    try:
        async with transaction(ctx) as session:
            await work(session)
    except Exception:
        log.exception("after-rollback work failed")


async def _transaction(ctx: Ctx) -> AsyncIterator[AsyncSession]:
    """One transaction per request: committed before the response is sent."""
    async with transaction(ctx) as session:
        yield session


# scope="function": the commit runs when the handler returns, before the
# response goes out, so a client never sees a 2xx for a write that failed.
Db = Annotated[AsyncSession, Depends(_transaction, scope="function")]


async def _read_only(ctx: Ctx) -> AsyncIterator[AsyncSession]:
    """A session for reads that need no transaction (no BEGIN/COMMIT round trips)."""
    async with ctx.read_sessions() as session:
        yield session


ReadDb = Annotated[AsyncSession, Depends(_read_only, scope="function")]


async def request_ip(request: Request, ctx: Ctx) -> str:
    return str(client_address(ctx, request))


ClientIp = Annotated[str, Depends(request_ip)]


# Who is calling, and the limits: the admission layer (serve_app/http/admission.py)
# admits every request before a route's own dependencies run. These name, on
# a route, what it asks of the caller; admission reads its rule off them.
CurrentCaller = Annotated[Caller, Depends(admission.require_caller, scope="function")]
HumanCaller = Annotated[Caller, Depends(admission.require_human, scope="function")]
MaybeCaller = Annotated[Caller | None, Depends(admission.optional_caller, scope="function")]
# On routes that read with ReadDb and take no caller.
PublicRead = Depends(admission.read_limit)
# On routes whose answer is a stream (a long-lived connection).
LongLived = Depends(admission.long_lived)


def agent_limit(rule_name: str) -> Callable[..., Awaitable[None]]:
    """Marks ``rule_name`` as a rule the route counts for the authenticated caller."""
    return cast(Callable[..., Awaitable[None]], admission.limit("agent", rule_name))


def human_limit(rule_name: str) -> Callable[..., Awaitable[None]]:
    """Marks ``rule_name`` as a rule the route counts for the signed-in human."""
    return cast(Callable[..., Awaitable[None]], admission.limit("human", rule_name))


def ip_limit(rule_name: str) -> Callable[..., Awaitable[None]]:
    """Marks ``rule_name`` as a rule the route counts for the client address."""
    return cast(Callable[..., Awaitable[None]], admission.limit("ip", rule_name))


def write_flag(name: str) -> Callable[..., Awaitable[None]]:
    """Marks the query parameter ``name`` as making the route's GET a write
    when it is true (admitted as a write: ``admission.writes``)."""
    return cast(Callable[..., Awaitable[None]], admission.write_flag(name))


def needs_scope(scope: str) -> Any:
    """Marks the API-key scope a route (or, on a router, each of its routes)
    needs whatever its method (docs/decisions/api-keys.md)."""
    return admission.key_scope(scope)


# --- the deepest page ---------------------------------------------------------


def _query_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# By route dependant (an unhashable dataclass, so keyed by id; the entry keeps
# the dependant alive, so its id cannot be reused by another).
_QUERY_DEFAULTS: dict[int, tuple[Dependant, dict[str, Any]]] = {}


def _query_defaults(dependant: Dependant) -> dict[str, Any]:
    """A route's query parameters and their defaults, its dependencies'
    included (worked out once per route, not per request)."""
    cached = _QUERY_DEFAULTS.get(id(dependant))
    if cached is not None:
        return cached[1]
    found: dict[str, Any] = {}
    for current in dependants(dependant):
        for field in current.query_params:
            model = field.field_info.annotation
            if isinstance(model, type) and issubclass(model, BaseModel):
                # A query-parameter model (one model per listing, shared with MCP).
                found.update({name: f.default for name, f in model.model_fields.items()})
            else:
                found[field.name] = field.field_info.default
    _QUERY_DEFAULTS[id(dependant)] = (dependant, found)
    return found


def _route_defaults(request: Request) -> dict[str, Any] | None:
    """The matched route's query parameters and their defaults (None: no route)."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    return _query_defaults(dependant) if dependant is not None else None


async def page_window(request: Request, ctx: Ctx) -> None:
    """Every paged listing, in one place (installed on the whole app): a page
    may reach at most CAIRN_MAX_PAGE_OFFSET rows deep (``page * limit``), so no
    request makes Postgres walk past millions of rows to skip them. Values that
    are not numbers are left to the route's own validation (a 400 as well)."""
    page = _query_int(request.query_params.get("page"))
    if page is None or page <= 1:
        return
    params = _route_defaults(request)
    if params is None or "page" not in params or "limit" not in params:
        return
    raw = request.query_params.get("limit")
    limit = _query_int(raw) if raw is not None else _query_int(str(params["limit"]))
    if limit is None or limit < 1:
        return
    check_page_depth(ctx, page, limit)


def check_page_depth(ctx: AppContext, page: int, limit: int) -> None:
    """A listing's page-depth cap, for every door (REST: ``page_window``)."""
    views.check_depth(
        page, limit, ctx.settings.max_page_offset, "Narrow the list with its filters instead."
    )
