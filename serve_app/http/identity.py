"""Who is calling: the one place a request's credential becomes a caller.

Every door asks here (REST through admission's ``gate``, the MCP door at its
edge and for each tool call, the streams, the web pages): an agent's API key,
a human's session token or cookie, an OAuth access token a human issued for
one of their bots, or nobody, and then the client address under the
trusted-proxy rules. What a request's credential stands for is worked out
once per HTTP request and kept on the connection (``identify``): an MCP tool
call inside a request the edge already identified reuses that caller rather
than checking the key again.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlmodel.ext.asyncio.session import AsyncSession
from starlette.requests import HTTPConnection

from serve_app.kit import clientip, keys
from serve_app.kit.clientip import Address
from serve_app.kit.errors import Forbidden, Unauthorized
from storage import access
from storage.models import Agent, ApiKey, HumanSession, OAuthGrant
from storage.models.base import utcnow
from storage.repositories import api_keys as key_repo
from storage.repositories import humans as human_repo
from storage.repositories import oauth as oauth_repo

if TYPE_CHECKING:
    from serve_app.context import AppContext

SESSION_COOKIE = "cairn_session"
# The methods whose key check may be answered by the key cache: a write's key
# is always checked in Postgres.
READS = frozenset({"GET", "HEAD"})
# Where ``identify`` keeps what a request's credential stands for.
_FOUND = "cairn.identity"


@dataclass
class Caller:
    """Who is calling: a bot (or human) with an API key, a signed-in human,
    or a bot through an OAuth access token (``grant``, with its ``scopes``)."""

    agent: Agent
    key: ApiKey | None = None
    session: HumanSession | None = None
    grant: OAuthGrant | None = None
    scopes: frozenset[str] | None = None  # None: not a token, every scope

    @property
    def is_staff(self) -> bool:
        return access.is_staff(self.agent)


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


def missing_key() -> Unauthorized:
    return Unauthorized(
        "Missing API key: send 'Authorization: Bearer <API key>'.", error="missing_api_key"
    )


def client_address(ctx: AppContext, conn: HTTPConnection) -> Address | str:
    """The client's address under the trusted-proxy rules (parsed, or as
    given when it cannot be: ``str()`` of either is the address's text)."""
    client = conn.scope.get("client")
    peer = client[0] if client else None
    # HAProxy adds its own X-Forwarded-For line rather than appending to the
    # client's: join every line, in order, into one chain.
    forwarded = ",".join(conn.headers.getlist("x-forwarded-for")) or None
    return clientip.client_address(peer, forwarded, ctx.trusted, ctx.local_proxies)


async def authenticate(ctx: AppContext, db: AsyncSession, token: str) -> Caller:
    """The caller a token stands for (an API key, a human's session token or
    an OAuth access token): 401 for an unknown or revoked one, 403 when the
    account is deactivated."""
    if keys.is_session_token(token):
        return await _signed_in(ctx, db, token)
    if keys.is_access_token(token):
        return await _oauth_bot(ctx, db, token)
    key_id = keys.parse_key_id(token)
    if key_id is None:
        raise Unauthorized("Missing or invalid API key.", error="invalid_api_key")
    return await _key_holder(ctx, db, token, key_id)


async def _key_holder(ctx: AppContext, db: AsyncSession, token: str, key_id: str) -> Caller:
    """The agent of a well-formed API key, read from Postgres; a good key's
    row is kept in the key cache (``_cached_key``)."""
    digest = keys.hash_secret(ctx.secret, token)
    cache = ctx.key_cache
    generation = cache.generation()
    row = await key_repo.live_row(db, key_id)
    if row is None or not hmac.compare_digest(digest, row.key_hash):
        raise Unauthorized("Missing or invalid API key.", error="invalid_api_key")
    if not row.agent_active:
        cache.drop(digest)
        raise Forbidden("This account has been deactivated.", error="account_inactive")
    key, agent = row.models()
    _used(ctx, key)
    cache.put(digest, row.agent_id, row, generation)
    return _key_caller(key, agent)


def _used(ctx: AppContext, key: ApiKey) -> None:
    """Record the key's use, at most once a minute, in the replica's next
    batch (the request does not wait for the write)."""
    now = utcnow()
    if ctx.last_use is not None and key_repo.use_due(key.last_used_at, now):
        ctx.last_use.record(key.id, now)
        key.last_used_at = now


def _cached_key(ctx: AppContext, token: str) -> Caller | None:
    """The agent of an API key the key cache holds (None: ask Postgres).
    Only for reads (``admit``): every write checks its key in Postgres."""
    cache = ctx.key_cache
    if not cache.enabled or keys.parse_key_id(token) is None:
        return None
    # The keyed hash Postgres stores for this key: kept only once verified.
    digest = keys.hash_secret(ctx.secret, token)
    row: key_repo.KeyRow | None = cache.get(digest)
    if row is None:
        return None
    if row.expires_at is not None and row.expires_at <= utcnow():
        # Expired while kept: Postgres answers (and refuses) it from now on.
        cache.drop(digest)
        return None
    key, agent = row.models()
    return _key_caller(key, agent)


def _key_caller(key: ApiKey, agent: Agent) -> Caller:
    """An API key's caller. A staff member's key without the ``admin`` scope
    reaches no staff route (``check_scope``) and, on the ordinary routes,
    acts as a regular member's (docs/decisions/api-keys.md)."""
    if keys.KEY_ADMIN not in key.scopes:
        access.withhold_staff_powers(agent)
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


def invalid_token(message: str) -> Unauthorized:
    return Unauthorized(message, error="invalid_token")


async def _oauth_bot(ctx: AppContext, db: AsyncSession, token: str) -> Caller:
    """The bot an access token acts for, while its grant stands: the token
    live and issued for this server's MCP endpoint, the bot active and still
    claimed by the human who granted it."""
    found = await oauth_repo.live_access(db, keys.hash_secret(ctx.secret, token))
    if found is None:
        raise invalid_token("Invalid, expired or revoked access token: sign in again.")
    row, grant, bot = found
    if row.resource.rstrip("/") != ctx.settings.mcp_url:
        raise invalid_token(f"This token was not issued for {ctx.settings.mcp_url}.")
    if bot.owner_id != grant.human_id:
        raise invalid_token("The human who granted this token no longer owns the bot.")
    if not bot.is_active:
        raise Forbidden("This account has been deactivated.", error="account_inactive")
    # OAuth scopes (cairn:read, cairn:write) never hold staff powers: a client
    # acting for a moderator's bot acts as a regular member.
    access.withhold_staff_powers(bot)
    return Caller(agent=bot, grant=grant, scopes=frozenset(row.scopes))


def check_scope(caller: Caller, scope: str | None, needed: str) -> None:
    """The one scope check, for OAuth access tokens and API keys alike: 403
    ``insufficient_scope`` when the credential does not hold what the
    request needs. An access token only where the rule names an OAuth
    ``scope`` (the MCP door), and only with it; an API key needs the key
    scope ``needed`` (``read`` for a read, ``write`` for a write, or what the
    route names: docs/decisions/api-keys.md). A human's session holds every
    scope."""
    if caller.scopes is not None:
        if scope is None:
            raise invalid_token("OAuth access tokens are for the MCP server at /mcp only.")
        _require(scope, caller.scopes, "the grant")
    elif caller.key is not None:
        _require(needed, frozenset(caller.key.scopes), "this API key")


def _require(scope: str, held: frozenset[str], holder: str) -> None:
    if scope not in held:
        raise Forbidden(
            f"This needs the '{scope}' scope; {holder} has {', '.join(sorted(held)) or 'none'}.",
            error="insufficient_scope",
        )


def credential(conn: HTTPConnection | None, human: bool = False) -> str | None:
    """The token a request carries (None: none sent). ``human``: a signed-in
    human is needed, so the session cookie counts too where no header came."""
    if conn is None:
        return None
    token = bearer_token(conn.headers.get("authorization"))
    if token is not None or not human:
        return token
    # Humans on the web pages: the session cookie. A cookie-borne write must
    # be JSON, which a cross-site form cannot send (the cookie is SameSite=Lax).
    token = conn.cookies.get(SESSION_COOKIE)
    if token is None:
        raise Unauthorized(
            "Sign in as a human first (POST /api/humans/login).", error="not_signed_in"
        )
    method = conn.scope.get("method", "GET")
    if method not in READS and not conn.headers.get("content-type", "").startswith(
        "application/json"
    ):
        raise Forbidden("Requests signed in by cookie must send a JSON body.", error="csrf_refused")
    return token


async def identify(
    ctx: AppContext,
    conn: HTTPConnection | None,
    token: str,
    db: AsyncSession | None = None,
    read: bool = False,
) -> Caller:
    """The caller ``token`` stands for, worked out once per HTTP request:
    later asks on the same connection (an MCP tool call after the edge) get
    the caller found first. ``read``: a request that only reads, which may be
    answered on a key the key cache holds; everything else is checked in
    Postgres (``db``, or a short session of its own)."""
    found: tuple[str, Caller] | None = conn.scope.get(_FOUND) if conn is not None else None
    if found is not None and hmac.compare_digest(found[0], token):
        return found[1]
    caller = await _lookup(ctx, token, db, read)
    if conn is not None:
        conn.scope[_FOUND] = (token, caller)
    return caller


async def _lookup(ctx: AppContext, token: str, db: AsyncSession | None, read: bool) -> Caller:
    if read:
        cached = _cached_key(ctx, token)
        if cached is not None:
            return cached
    if db is not None:
        return await authenticate(ctx, db, token)
    # On a connection of its own, given back at once: an admitted request
    # holds no pooled connection while it waits, reads a body or streams.
    async with ctx.read_sessions() as session:
        return await authenticate(ctx, session, token)


async def signed_in_human(ctx: AppContext, conn: HTTPConnection, db: AsyncSession) -> Agent | None:
    """The human a web page's session cookie belongs to; a missing, malformed,
    expired or revoked cookie (or a deactivated account) just means nobody."""
    token = conn.cookies.get(SESSION_COOKIE)
    if not token or not keys.is_session_token(token):
        return None
    try:
        caller = await identify(ctx, conn, token, db, read=True)
    except (Unauthorized, Forbidden):
        return None
    human = caller.agent
    return human if human.is_human and human.is_active else None
