"""FastAPI dependencies: the request transaction, the caller, rate limits."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request, Response
from sqlmodel.ext.asyncio.session import AsyncSession

from actors.ratelimit import Decision
from serve_app import hooks, keys
from serve_app.clientip import client_ip
from serve_app.context import AppContext
from serve_app.errors import Forbidden, RateLimited, Unauthorized
from storage.models import Agent, ApiKey
from storage.models.base import utcnow
from storage.repositories import api_keys as key_repo


async def get_ctx(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


Ctx = Annotated[AppContext, Depends(get_ctx)]


async def _transaction(ctx: Ctx) -> AsyncIterator[AsyncSession]:
    """One transaction per request: committed before the response is sent."""
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
    return client_ip(peer, forwarded, ctx.trusted, ctx.implicit_proxy_hops)


ClientIp = Annotated[str, Depends(request_ip)]


def _limit_headers(decision: Decision) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(decision.limit),
        "X-RateLimit-Remaining": str(decision.remaining),
        "X-RateLimit-Reset": str(int(decision.reset_at)),
    }


async def enforce(ctx: AppContext, response: Response, rule_name: str, subject: str) -> None:
    """Count one hit of ``rule_name`` for ``subject``; 429 when over the limit."""
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
    response.headers.update(headers)


@dataclass
class Caller:
    agent: Agent
    key: ApiKey


async def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "Authorization header must be 'Bearer <API key>'.", error="invalid_api_key"
        )
    return token.strip()


async def _authenticate(ctx: AppContext, db: AsyncSession, token: str) -> Caller:
    key_id = keys.parse_key_id(token)
    found = await key_repo.live_by_key_id(db, key_id) if key_id else None
    if found is None or not keys.verify(ctx.secret, token, found[0].key_hash):
        raise Unauthorized("Missing or invalid API key.", error="invalid_api_key")
    key, agent = found
    if not agent.is_active:
        raise Forbidden("This account has been deactivated.", error="account_inactive")
    await key_repo.touch(db, key, utcnow())
    return Caller(agent=agent, key=key)


async def require_caller(request: Request, response: Response, ctx: Ctx, db: Db) -> Caller:
    """The authenticated agent; also counts the general per-agent limit."""
    token = await _bearer(request)
    if token is None:
        raise Unauthorized(
            "Missing API key: send 'Authorization: Bearer <API key>'.", error="missing_api_key"
        )
    caller = await _authenticate(ctx, db, token)
    await enforce(ctx, response, "general", str(caller.agent.id))
    return caller


async def optional_caller(request: Request, response: Response, ctx: Ctx, db: Db) -> Caller | None:
    """The caller when a key is sent (a bad key is still a 401), else None."""
    if request.headers.get("authorization") is None:
        return None
    return await require_caller(request, response, ctx, db)


CurrentCaller = Annotated[Caller, Depends(require_caller, scope="function")]
MaybeCaller = Annotated[Caller | None, Depends(optional_caller, scope="function")]


def agent_limit(rule_name: str) -> Callable[..., Awaitable[None]]:
    """A dependency counting ``rule_name`` for the authenticated caller."""

    async def _dep(response: Response, ctx: Ctx, caller: CurrentCaller) -> None:
        await enforce(ctx, response, rule_name, str(caller.agent.id))

    return _dep


def ip_limit(rule_name: str) -> Callable[..., Awaitable[None]]:
    """A dependency counting ``rule_name`` for the client address."""

    async def _dep(response: Response, ctx: Ctx, ip: ClientIp) -> None:
        await enforce(ctx, response, rule_name, f"ip:{ip}")

    return _dep
