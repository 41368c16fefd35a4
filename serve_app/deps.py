"""FastAPI dependencies: the request transaction, the caller, rate limits."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, Request, Response
from fastapi.dependencies.models import Dependant
from sqlmodel.ext.asyncio.session import AsyncSession

from actors.ratelimit import Decision
from serve_app import hooks, keys
from serve_app.clientip import client_ip, limit_subject
from serve_app.context import AppContext
from serve_app.errors import BadRequest, Forbidden, RateLimited, Unauthorized
from storage.models import Agent, ApiKey, HumanSession
from storage.models.base import utcnow
from storage.repositories import api_keys as key_repo
from storage.repositories import humans as human_repo


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
        try:
            yield session
            await session.commit()
        except BaseException:
            hooks.discard(session)
            await session.rollback()
            raise
        await hooks.run_after_commit(session)


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
    peer = request.client.host if request.client else None
    # HAProxy adds its own X-Forwarded-For line rather than appending to the
    # client's: join every line, in order, into one chain.
    forwarded = ",".join(request.headers.getlist("x-forwarded-for")) or None
    return client_ip(peer, forwarded, ctx.trusted, ctx.local_proxies)


ClientIp = Annotated[str, Depends(request_ip)]


def _limit_headers(decision: Decision) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(decision.limit),
        "X-RateLimit-Remaining": str(decision.remaining),
        "X-RateLimit-Reset": str(int(decision.reset_at)),
    }


async def check_limit(ctx: AppContext, rule_name: str, subject: str) -> dict[str, str]:
    """Count one hit of ``rule_name`` for ``subject``: the ``X-RateLimit-*``
    headers of the answer, or 429 when over the limit."""
    rule = ctx.rules[rule_name]
    decision = await ctx.limiter.hit(rule, subject)
    headers = _limit_headers(decision)
    if not decision.allowed:
        headers["Retry-After"] = str(decision.retry_after(time.time()))
        raise RateLimited(
            f"Rate limit exceeded for {rule_name.replace('_', ' ')}: {rule.limit} requests "
            f"per {rule.window_s} seconds. Retry after {headers['Retry-After']} seconds.",
            headers=headers,
        )
    return headers


async def enforce(ctx: AppContext, response: Response, rule_name: str, subject: str) -> None:
    """Count one hit of ``rule_name`` for ``subject``; 429 when over the limit."""
    response.headers.update(await check_limit(ctx, rule_name, subject))


SESSION_COOKIE = "cairn_session"


@dataclass
class Caller:
    """Who is calling: a bot (or human) with an API key, or a signed-in human."""

    agent: Agent
    key: ApiKey | None = None
    session: HumanSession | None = None


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header (None without one)."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "Authorization header must be 'Bearer <API key>'.", error="invalid_api_key"
        )
    return token.strip()


async def _bearer(request: Request) -> str | None:
    return bearer_token(request.headers.get("authorization"))


def missing_key() -> Unauthorized:
    return Unauthorized(
        "Missing API key: send 'Authorization: Bearer <API key>'.", error="missing_api_key"
    )


async def authenticate(ctx: AppContext, db: AsyncSession, token: str) -> Caller:
    """The caller a token stands for (an API key, or a human's session token),
    for every door: 401 for an unknown or revoked key, 403 when deactivated."""
    if keys.is_session_token(token):
        return await _signed_in(ctx, db, token)
    key_id = keys.parse_key_id(token)
    found = await key_repo.live_by_key_id(db, key_id) if key_id else None
    if found is None or not keys.verify(ctx.secret, token, found[0].key_hash):
        raise Unauthorized("Missing or invalid API key.", error="invalid_api_key")
    key, agent = found
    if not agent.is_active:
        raise Forbidden("This account has been deactivated.", error="account_inactive")
    await key_repo.touch(db, key, utcnow())
    return Caller(agent=agent, key=key)


async def _signed_in(ctx: AppContext, db: AsyncSession, token: str) -> Caller:
    found = await human_repo.live_session(db, keys.hash_secret(ctx.secret, token))
    if found is None:
        raise Unauthorized(
            "Invalid or expired session: sign in again at /api/humans/login.",
            error="invalid_session",
        )
    session, agent = found
    if not agent.is_active:
        raise Forbidden("This account has been deactivated.", error="account_inactive")
    return Caller(agent=agent, session=session)


async def require_caller(request: Request, response: Response, ctx: Ctx, db: Db) -> Caller:
    """The authenticated agent; also counts the general per-agent limit."""
    token = await _bearer(request)
    if token is None:
        raise missing_key()
    caller = await authenticate(ctx, db, token)
    await enforce(ctx, response, "general", str(caller.agent.id))
    return caller


async def authenticate_briefly(request: Request, response: Response, ctx: AppContext) -> Caller:
    """``require_caller`` on a short transaction of its own, committed and its
    connection returned before this returns: for routes that read a large body
    only once the key is known to be good (POST /api/upload), without holding
    a pooled connection while it streams in."""
    token = await _bearer(request)
    if token is None:
        raise missing_key()
    async with ctx.sessions() as db:
        caller = await authenticate(ctx, db, token)
        await db.commit()
    await enforce(ctx, response, "general", str(caller.agent.id))
    return caller


ANON_READ = "anon_read"


async def optional_caller(
    request: Request, response: Response, ctx: Ctx, db: Db, ip: ClientIp
) -> Caller | None:
    """The caller of a public read when a key is sent (a bad key is still a
    401; the per-agent general limit counts it), else None, counted against
    the per-IP limit on anonymous reads."""
    if request.headers.get("authorization") is None:
        await enforce(ctx, response, ANON_READ, limit_subject(ip))
        return None
    return await require_caller(request, response, ctx, db)


async def read_limit(
    request: Request, response: Response, ctx: Ctx, db: ReadDb, ip: ClientIp
) -> None:
    """The rate limit of a public read that does not otherwise look at the
    caller: a sent key is checked (so a made-up header does not dodge the
    limit) and counts the agent's general limit; no key counts the per-IP
    limit on anonymous reads (docs/decisions.md, "Security: read costs")."""
    token = await _bearer(request)
    if token is None:
        await enforce(ctx, response, ANON_READ, limit_subject(ip))
        return
    caller = await authenticate(ctx, db, token)
    await enforce(ctx, response, "general", str(caller.agent.id))


# On routes that read with ReadDb and take no caller.
PublicRead = Depends(read_limit)


async def require_human(request: Request, response: Response, ctx: Ctx) -> Caller:
    """A signed-in human: a session token as Bearer, or the session cookie the
    web pages use. A cookie-borne write must be JSON, which a cross-site form
    cannot send (the cookie is SameSite=Lax as well).

    The session is looked up on a connection given back at once, not in the
    request's transaction: a claim then holds no connection while it asks X."""
    token = await _bearer(request)
    if token is None:
        token = request.cookies.get(SESSION_COOKIE)
        if token is None:
            raise Unauthorized(
                "Sign in as a human first (POST /api/humans/login).", error="not_signed_in"
            )
        if request.method not in ("GET", "HEAD") and not request.headers.get(
            "content-type", ""
        ).startswith("application/json"):
            raise Forbidden(
                "Requests signed in by cookie must send a JSON body.", error="csrf_refused"
            )
    async with ctx.read_sessions() as session:
        caller = await authenticate(ctx, session, token)
    if not caller.agent.is_human or caller.session is None:
        raise Forbidden(
            "A human must do this, signed in with a session (not an agent's API key).",
            error="human_required",
        )
    await enforce(ctx, response, "general", str(caller.agent.id))
    return caller


CurrentCaller = Annotated[Caller, Depends(require_caller, scope="function")]
HumanCaller = Annotated[Caller, Depends(require_human, scope="function")]
MaybeCaller = Annotated[Caller | None, Depends(optional_caller, scope="function")]


@dataclass(frozen=True)
class LimitTag:
    """What a limit dependency counts: ``rule`` for the authenticated agent,
    the signed-in human or the client address. Other doors (MCP tools) read it
    off the dependencies of the route they stand for, so a rule is listed once."""

    subject: Literal["agent", "human", "ip"]
    rule: str


_LIMIT_TAG = "cairn_limit"


def _tagged(dep: Callable[..., Awaitable[None]], tag: LimitTag) -> Callable[..., Awaitable[None]]:
    setattr(dep, _LIMIT_TAG, tag)
    return dep


def limit_tag(call: object) -> LimitTag | None:
    """The rule a dependency made by ``agent_limit``/``human_limit``/``ip_limit`` counts."""
    tag = getattr(call, _LIMIT_TAG, None)
    return tag if isinstance(tag, LimitTag) else None


def agent_limit(rule_name: str) -> Callable[..., Awaitable[None]]:
    """A dependency counting ``rule_name`` for the authenticated caller."""

    async def _dep(response: Response, ctx: Ctx, caller: CurrentCaller) -> None:
        await enforce(ctx, response, rule_name, str(caller.agent.id))

    return _tagged(_dep, LimitTag("agent", rule_name))


def human_limit(rule_name: str) -> Callable[..., Awaitable[None]]:
    """A dependency counting ``rule_name`` for the signed-in human."""

    async def _dep(response: Response, ctx: Ctx, caller: HumanCaller) -> None:
        await enforce(ctx, response, rule_name, str(caller.agent.id))

    return _tagged(_dep, LimitTag("human", rule_name))


def ip_limit(rule_name: str) -> Callable[..., Awaitable[None]]:
    """A dependency counting ``rule_name`` for the client address."""

    async def _dep(response: Response, ctx: Ctx, ip: ClientIp) -> None:
        await enforce(ctx, response, rule_name, limit_subject(ip))

    return _tagged(_dep, LimitTag("ip", rule_name))


# --- the deepest page ---------------------------------------------------------


def _query_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def dependants(root: Dependant) -> Iterator[Dependant]:
    """A route's dependency tree, the route itself included."""
    stack = [root]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.dependencies)


# By route dependant (an unhashable dataclass, so keyed by id; the entry keeps
# the dependant alive, so its id cannot be reused by another).
_QUERY_DEFAULTS: dict[int, tuple[Dependant, dict[str, Any]]] = {}


def _query_defaults(dependant: Dependant) -> dict[str, Any]:
    """A route's query parameters and their defaults, its dependencies'
    included (worked out once per route, not per request)."""
    cached = _QUERY_DEFAULTS.get(id(dependant))
    if cached is not None:
        return cached[1]
    found = {
        field.name: field.field_info.default
        for current in dependants(dependant)
        for field in current.query_params
    }
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
    """The page-depth cap itself, for every door (REST: ``page_window``)."""
    deepest = ctx.settings.max_page_offset
    if page * limit > deepest:
        raise BadRequest(
            f"Pages reach {deepest} rows deep at most: page * limit must not exceed "
            f"{deepest} (here {page} * {limit}). Narrow the list with its filters instead.",
            error="page_too_deep",
        )
