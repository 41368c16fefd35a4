"""OAuth 2.1 for the MCP server: Cairn is the authorization server for its
own bots (docs/decisions/oauth.md). A signed-in human lets a client act as
one of the bots they claimed, with the scopes they pick; the client gets a
code (PKCE S256), then short-lived access tokens bound to ``/mcp`` and
single-use refresh tokens. The protocol (requests, responses, PKCE check) is
the MCP SDK's (mcp.server.auth); this module holds the rules and the state.

Every code and token is 256 random bits from ``secrets`` and stored only as a
keyed hash (kit/keys.py), like API keys. A replayed code (kept, once spent,
for the refresh-token lifetime), or a refresh token used again after a short
grace, revokes every token of its family.

Anonymous callers store things here (registrations, metadata documents,
pending requests): every field and the whole client are bounded, and a
client no code exchange ever used goes after ``UNUSED_CLIENT_TTL``
(docs/decisions/oauth.md, "Bounds on what anonymous callers store").
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull
from mcp.shared.auth import OAuthToken as TokenReply
from pydantic import ValidationError
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.kit import keys, outbound
from serve_app.kit.errors import BadRequest, Forbidden, NotFound
from storage.models import Agent, OAuthClient, OAuthCode, OAuthGrant, OAuthToken
from storage.models.base import utcnow
from storage.repositories import agents as agent_repo
from storage.repositories import oauth as repo

log = logging.getLogger("cairn.oauth")

REGISTERED = "registered"
METADATA_DOCUMENT = "metadata_document"
# A client metadata document is a few hundred bytes; this is ample.
DOCUMENT_MAX_BYTES = 16_384
CONSENT_PATH = "/oauth/consent"
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
# An S256 code challenge: BASE64URL(SHA-256(verifier)), 32 bytes, no padding.
S256_CHALLENGE = re.compile(r"^[A-Za-z0-9_-]{43}$")

# What an anonymous caller may make Cairn store (issue 45, M3). A real MCP
# client's registration is a few hundred bytes.
CLIENT_INFO_MAX_BYTES = 4096
CLIENT_NAME_MAX = 100
REDIRECT_URIS_MAX = 5
URI_MAX = 512
CONTACTS_MAX = 3
CONTACT_MAX = 254
SHORT_TEXT_MAX = 100  # software_id, software_version
# As any query parameter (http/querystring.py); a POSTed form is held to it too.
STATE_MAX = 1000
# A client that no code exchange used within this long after it was stored
# is deleted (with its pending requests).
UNUSED_CLIENT_TTL = timedelta(hours=24)
# How long a client id URL whose document could not be used is not asked again.
DOCUMENT_FAILURE_TTL_S = 60.0
_FAILURES_MAX = 10_000
_FETCHES_KEY = "oauth_document_fetches"


@dataclass(frozen=True)
class Refused:
    """A protocol refusal, returned rather than raised so that what was done
    before it (revoking a replayed family) commits; the door raises the SDK's
    error for it once the transaction ended."""

    error: str
    description: str


class CairnCode(AuthorizationCode):
    family_id: str


class CairnRefresh(RefreshToken):
    family_id: str


class CairnAccess(AccessToken):
    family_id: str


def is_document_client(client_id: str) -> bool:
    """A client id that names its metadata document (a URL), not a registration."""
    return client_id.startswith(("https://", "http://"))


def _same_resource(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


# --- clients ---------------------------------------------------------------------------


def redirect_uri_problem(uri: str) -> str | None:
    """Why a redirect URI may not be registered (None: fine). https, http on
    the loopback interface (native apps), or a private-use scheme with a dot
    (RFC 8252); never a fragment, never user info (``https://a.example@b.example``
    would read as a.example on the consent page and go to b.example),
    never javascript:/data:."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if parts.fragment:
        return f"redirect URI {uri!r} has a fragment"
    if "@" in parts.netloc:
        return f"redirect URI {uri!r} has user info"
    if scheme == "https" and parts.hostname:
        return None
    if scheme == "http" and parts.hostname in _LOOPBACK_HOSTS:
        return None
    if "." in scheme and scheme not in ("http", "https"):
        return None
    return f"redirect URI {uri!r} must be https, loopback http or a private-use scheme"


def shown_destination(uri: str) -> str:
    """Where the consent page says the code goes: the host (and the port, if
    one is written) of an http(s) URI; for a private-use scheme, the
    scheme itself, which names the app (its "host" part is whatever the
    client wrote: ``com.evil.app://claude.ai/cb`` goes to com.evil.app)."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme in ("http", "https") and parts.hostname:
        port = f":{parts.port}" if parts.port else ""
        # (http is only ever the loopback interface: a native app.)
        return f"{parts.hostname}{port}"
    return f"the app registered for {scheme}:"


def _client_info(row: OAuthClient) -> OAuthClientInformationFull:
    return OAuthClientInformationFull.model_validate(row.info)


@dataclass
class DocumentFetches:
    """This replica's metadata-document fetches: how many are in flight
    (at most CAIRN_OAUTH_CLIENT_METADATA_FETCHES at once), and the client id
    URLs that failed lately (not asked again for ``DOCUMENT_FAILURE_TTL_S``)."""

    in_flight: int = 0
    failed: dict[str, float] = field(default_factory=dict)

    def failed_lately(self, url: str) -> bool:
        until = self.failed.get(url)
        if until is None:
            return False
        if until > time.monotonic():
            return True
        del self.failed[url]
        return False

    def note_failure(self, url: str) -> None:
        now = time.monotonic()
        if len(self.failed) >= _FAILURES_MAX:
            self.failed = {u: t for u, t in self.failed.items() if t > now}
            while len(self.failed) >= _FAILURES_MAX:  # all live: drop the oldest
                del self.failed[next(iter(self.failed))]
        self.failed[url] = now + DOCUMENT_FAILURE_TTL_S

    def take(self, limit: int) -> bool:
        if self.in_flight >= limit:
            return False
        self.in_flight += 1
        return True

    def give_back(self) -> None:
        self.in_flight -= 1


def _fetches(ctx: AppContext) -> DocumentFetches:
    found = ctx.caches.get(_FETCHES_KEY)
    if not isinstance(found, DocumentFetches):
        found = ctx.caches[_FETCHES_KEY] = DocumentFetches()
    return found


async def get_client(
    ctx: AppContext, db: AsyncSession, client_id: str, address: str
) -> OAuthClientInformationFull | None:
    """A client by id: a registered one, or the metadata document its URL
    names (fetched through the outbound guard, kept for a while). The secret
    is never part of what comes back (see ``client_secret_ok``).

    Read, release, fetch, write: the stored copy is read on a connection
    given back at once, the document is fetched holding none (up to
    CAIRN_OUTBOUND_TIMEOUT_S), and ``db`` (not used before) stores it. An
    uncached fetch counts the caller's ``address`` (the oauth_client_fetch
    rule) and needs one of this replica's fetch slots; a URL that failed is
    not asked again for a minute. Refused either way: no such client."""
    async with ctx.read_sessions() as read:
        row = await repo.client(read, client_id)
    if not is_document_client(client_id):
        return _client_info(row) if row is not None and row.kind == REGISTERED else None
    ttl = timedelta(seconds=ctx.settings.oauth_client_metadata_ttl_s)
    if row is not None and row.kind == METADATA_DOCUMENT and row.fetched_at + ttl > utcnow():
        return _client_info(row)
    fetches = _fetches(ctx)
    if fetches.failed_lately(client_id):
        return None
    rule = ctx.rules["oauth_client_fetch"]
    if not (await ctx.limiter.hit(rule, address)).allowed:
        log.info("client metadata document not fetched: %s is over its fetch budget", address)
        return None
    if not fetches.take(ctx.settings.oauth_client_metadata_fetches):
        log.info("client metadata document not fetched: every fetch slot is taken")
        return None
    try:
        info = await _fetch_document(ctx, client_id)
    finally:
        fetches.give_back()
    if info is None:
        fetches.note_failure(client_id)
        return None
    await repo.save_client(db, client_id, METADATA_DOCUMENT, info.model_dump(mode="json"), None)
    return info


def document_url_problem(ctx: AppContext, url: str) -> str | None:
    """Why a client id URL is not fetched (None: it may be)."""
    parts = urlsplit(url)
    loopback_ok = (
        ctx.settings.oauth_client_metadata_allow_loopback
        and parts.scheme == "http"
        and parts.hostname in _LOOPBACK_HOSTS
    )
    if parts.scheme != "https" and not loopback_ok:
        return "a client id URL must be https"
    if not parts.hostname or parts.username or parts.password:
        return "a client id URL needs a host and no credentials"
    if parts.path in ("", "/") or parts.fragment:
        return "a client id URL needs a path and no fragment"
    if len(url) > 2048:
        return "a client id URL is at most 2048 characters"
    return None


async def _fetch_document(ctx: AppContext, url: str) -> OAuthClientInformationFull | None:
    problem = document_url_problem(ctx, url)
    if problem is not None:
        log.info("client metadata document refused: %s", problem)
        return None
    try:
        reply = await outbound.call_json(
            "GET",
            url,
            timeout_s=ctx.settings.outbound_timeout_s,
            max_bytes=min(ctx.settings.outbound_max_bytes, DOCUMENT_MAX_BYTES),
            public_only=True,
            allow_loopback=ctx.settings.oauth_client_metadata_allow_loopback,
        )
    except outbound.OutboundError as exc:
        log.info("client metadata document not fetched: %s", exc)
        return None
    doc = reply.body
    if reply.status != 200 or not isinstance(doc, dict) or doc.get("client_id") != url:
        log.info("client metadata document unusable (status %s)", reply.status)
        return None
    if doc.get("token_endpoint_auth_method", "none") != "none":
        return None  # only public clients: nothing to verify a secret or key with
    uris = doc.get("redirect_uris")
    if (
        not isinstance(uris, list)
        or not uris
        or any(not isinstance(u, str) or redirect_uri_problem(u) for u in uris)
    ):
        return None
    values: dict[str, Any] = {**doc, "client_id": url, "token_endpoint_auth_method": "none"}
    # No secret, and no keys: a public client has nothing to sign with.
    for unused in ("client_secret", "jwks", "jwks_uri"):
        values.pop(unused, None)
    values["scope"] = _allowed_scope(doc.get("scope"))
    try:
        info = OAuthClientInformationFull.model_validate(values)
    except ValidationError:
        return None
    problem = client_metadata_problem(info)
    if problem is not None:
        log.info("client metadata document refused: %s", problem)
        return None
    return info


def client_metadata_problem(info: OAuthClientInformationFull) -> str | None:
    """Why a client's metadata is not stored (None: it may be). Every field
    an anonymous caller writes is bounded, and the whole of it; no client
    keys (``jwks``, ``jwks_uri``): Cairn verifies no ``private_key_jwt``."""
    if info.jwks is not None or info.jwks_uri is not None:
        return "jwks and jwks_uri are not accepted: Cairn supports no private_key_jwt"
    uris = info.redirect_uris or []
    if len(uris) > REDIRECT_URIS_MAX:
        return f"at most {REDIRECT_URIS_MAX} redirect_uris"
    for name in ("client_uri", "logo_uri", "tos_uri", "policy_uri"):
        value = getattr(info, name)
        if value is not None:
            uris = [*uris, value]
    if any(len(str(uri)) > URI_MAX for uri in uris):
        return f"a URI is at most {URI_MAX} characters"
    if info.client_name is not None and len(info.client_name) > CLIENT_NAME_MAX:
        return f"client_name is at most {CLIENT_NAME_MAX} characters"
    contacts = info.contacts or []
    if len(contacts) > CONTACTS_MAX or any(len(c) > CONTACT_MAX for c in contacts):
        return f"at most {CONTACTS_MAX} contacts of at most {CONTACT_MAX} characters"
    for name in ("software_id", "software_version"):
        value = getattr(info, name)
        if value is not None and len(value) > SHORT_TEXT_MAX:
            return f"{name} is at most {SHORT_TEXT_MAX} characters"
    size = len(json.dumps(info.model_dump(mode="json")).encode())
    if size > CLIENT_INFO_MAX_BYTES:
        return f"the client metadata is at most {CLIENT_INFO_MAX_BYTES} bytes"
    return None


def _allowed_scope(scope: object) -> str:
    """The client's scope clamped to Cairn's (all of them when it names none)."""
    if not isinstance(scope, str) or not scope.split():
        return " ".join(keys.SCOPES)
    chosen = [s for s in keys.SCOPES if s in scope.split()]
    return " ".join(chosen or keys.SCOPES)


async def register_client(
    ctx: AppContext, db: AsyncSession, info: OAuthClientInformationFull
) -> Refused | None:
    """Store a dynamically registered client (RFC 7591): its metadata, and
    its secret only as a keyed hash. Registrations no code exchange used go
    as new ones come (``sweep``)."""
    for uri in info.redirect_uris or []:
        problem = redirect_uri_problem(str(uri))
        if problem is not None:
            return Refused("invalid_redirect_uri", problem)
    secret = info.client_secret
    stored = info.model_copy(update={"client_secret": None, "scope": _allowed_scope(info.scope)})
    problem = client_metadata_problem(stored)
    if problem is not None:
        return Refused("invalid_client_metadata", problem)
    await sweep(ctx, db)
    await repo.save_client(
        db,
        info.client_id,
        REGISTERED,
        stored.model_dump(mode="json"),
        keys.hash_secret(ctx.secret, secret) if secret else None,
    )
    return None


async def client_secret_ok(
    ctx: AppContext, db: AsyncSession, client_id: str, presented: str | None
) -> bool:
    """True when the client needs no secret, or ``presented`` is its secret
    (compared as keyed hashes, in constant time)."""
    row = await repo.client(db, client_id)
    if row is None or row.secret_hash is None:
        return row is not None or is_document_client(client_id)
    return presented is not None and keys.verify(ctx.secret, presented, row.secret_hash)


# --- authorize and consent ------------------------------------------------------------------


async def begin(
    ctx: AppContext,
    db: AsyncSession,
    client: OAuthClientInformationFull,
    params: AuthorizationParams,
) -> str | Refused:
    """Keep an authorization request for the human's consent; the URL of the
    consent page. A resource other than this MCP server is refused (RFC 8707)."""
    if params.state is not None and len(params.state) > STATE_MAX:
        return Refused("invalid_request", f"state is at most {STATE_MAX} characters.")
    if not S256_CHALLENGE.match(params.code_challenge):
        return Refused(
            "invalid_request", "code_challenge must be a base64url SHA-256 digest (PKCE S256)."
        )
    if params.resource is not None and not _same_resource(params.resource, ctx.settings.mcp_url):
        return Refused(
            "invalid_target", f"This server issues tokens only for {ctx.settings.mcp_url}."
        )
    scopes = keys.granted_scopes(params.scopes or keys.SCOPES)
    if not scopes:
        return Refused("invalid_scope", f"Ask for {' or '.join(keys.SCOPES)}.")
    stored = params.model_dump(mode="json") | {"scopes": scopes}
    expires = utcnow() + timedelta(seconds=ctx.settings.oauth_consent_ttl_s)
    request_id = await repo.add_request(db, client.client_id, stored, expires)
    return f"{ctx.settings.base_url}{CONSENT_PATH}?request={request_id}"


@dataclass(frozen=True)
class Consent:
    """What the consent page shows."""

    request_id: uuid.UUID
    client_id: str
    client_name: str
    redirect_host: str
    scopes: list[str]
    bots: list[Agent]


def _request_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise NotFound("No such sign-in request: it expired or was answered.") from None


async def consent(
    ctx: AppContext, db: AsyncSession, request_id: str, human: Agent | None
) -> Consent:
    """The pending request and the signed-in human's bots that may be chosen
    (none while nobody is signed in)."""
    found = await repo.live_request(db, _request_id(request_id))
    client = await repo.client(db, found.client_id) if found is not None else None
    if found is None or client is None:
        raise NotFound("No such sign-in request: it expired or was answered.")
    info = _client_info(client)
    redirect = str(found.params["redirect_uri"])
    bots = (
        [b for b in await agent_repo.linked_bots(db, human.id) if b.is_active]
        if human is not None
        else []
    )
    return Consent(
        request_id=found.id,
        client_id=info.client_id,
        client_name=info.client_name or info.client_id,
        redirect_host=shown_destination(redirect),
        scopes=list(found.params["scopes"]),
        bots=bots,
    )


async def answer(
    ctx: AppContext,
    db: AsyncSession,
    human: Agent,
    request_id: str,
    *,
    approve: bool,
    bot_id: uuid.UUID | None = None,
    scopes: list[str] | None = None,
) -> str:
    """The human's answer to a pending request: where to send the browser
    (the client's redirect URI with a code, or with ``access_denied``)."""
    found = await repo.take_request(db, _request_id(request_id))
    if found is None:
        raise NotFound("No such sign-in request: it expired or was answered.")
    params = found.params
    redirect = str(params["redirect_uri"])
    iss = ctx.settings.base_url
    if not approve:
        return construct_redirect_uri(
            redirect,
            error="access_denied",
            error_description="The request was denied.",
            state=params.get("state"),
            iss=iss,
        )
    chosen = keys.granted_scopes(scopes or [])
    if not chosen or not set(chosen) <= set(params["scopes"]):
        raise BadRequest(
            f"Pick one or more of the scopes asked for: {', '.join(params['scopes'])}.",
            error="validation_error",
        )
    bots = {b.id: b for b in await agent_repo.linked_bots(db, human.id) if b.is_active}
    if bot_id is None or bot_id not in bots:
        raise Forbidden("Pick one of your claimed, active bots.", error="not_your_bot")
    grant = await repo.add_grant(db, human.id, bot_id, found.client_id, chosen)
    code = keys.oauth_secret(keys.CODE_PREFIX)
    await repo.add_code(
        db,
        OAuthCode(
            code_hash=keys.hash_secret(ctx.secret, code),
            grant_id=grant.id,
            code_challenge=params["code_challenge"],
            redirect_uri=redirect,
            redirect_explicit=bool(params["redirect_uri_provided_explicitly"]),
            resource=params.get("resource"),
            scopes=chosen,
            expires_at=utcnow() + timedelta(seconds=ctx.settings.oauth_code_ttl_s),
        ),
    )
    return construct_redirect_uri(redirect, code=code, state=params.get("state"), iss=iss)


# --- token endpoint --------------------------------------------------------------------------


_GRANT_GONE = "the grant was revoked, or its bot or the human who gave it is inactive"


async def _grant_usable(db: AsyncSession, grant: OAuthGrant) -> bool:
    """A grant still stands: not revoked, its bot active and still the
    human's, and the human who gave it active."""
    if grant.revoked_at is not None:
        return False
    bot = await agent_repo.by_id(db, grant.bot_id)
    human = await agent_repo.by_id(db, grant.human_id)
    return (
        bot is not None
        and bot.is_active
        and bot.owner_id == grant.human_id
        and human is not None
        and human.is_active
    )


async def load_code(
    ctx: AppContext, db: AsyncSession, client: OAuthClientInformationFull, code: str
) -> CairnCode | None:
    """An unspent code of this client. A spent one is a replay: the tokens it
    gave are revoked (RFC 6749 §4.1.2), and it is not found."""
    found = await repo.code(db, keys.hash_secret(ctx.secret, code))
    if found is None:
        return None
    row, grant = found
    if row.used_at is not None:
        revoked = await repo.revoke_family(db, row.family_id)
        log.warning("authorization code replayed: %d tokens of its family revoked", revoked)
        return None
    if grant.client_id != client.client_id:
        return None
    return CairnCode(
        code=code,
        scopes=list(row.scopes),
        expires_at=row.expires_at.timestamp(),
        client_id=grant.client_id,
        code_challenge=row.code_challenge,
        redirect_uri=row.redirect_uri,  # type: ignore[arg-type]
        redirect_uri_provided_explicitly=row.redirect_explicit,
        resource=row.resource,
        subject=str(grant.bot_id),
        family_id=str(row.family_id),
    )


async def exchange_code(ctx: AppContext, db: AsyncSession, code: CairnCode) -> TokenReply | Refused:
    """Spend the code (once: a second exchange loses the race) for tokens."""
    code_hash = keys.hash_secret(ctx.secret, code.code)
    if not await repo.spend_code(db, code_hash):
        await repo.revoke_family(db, uuid.UUID(code.family_id))
        return Refused("invalid_grant", "authorization code was already used or has expired")
    found = await repo.code(db, code_hash)
    if found is None or not await _grant_usable(db, found[1]):
        return Refused("invalid_grant", _GRANT_GONE)
    await repo.mark_exchanged(db, found[1].client_id)
    # What can no longer be used goes as new sign-ins come.
    await sweep(ctx, db)
    return await _issue(ctx, db, found[1].id, uuid.UUID(code.family_id), list(code.scopes))


async def sweep(ctx: AppContext, db: AsyncSession) -> None:
    """Delete what can no longer be used: expired tokens, codes never spent
    that expired, spent codes older than the refresh-token lifetime (till
    then a replay still revokes what the code gave), and clients that no code
    exchange used within ``UNUSED_CLIENT_TTL`` of being stored. Runs as new
    registrations and sign-ins come."""
    await repo.drop_expired(db, timedelta(seconds=ctx.settings.oauth_refresh_token_ttl_s))
    dropped = await repo.drop_unused_clients(db, utcnow() - UNUSED_CLIENT_TTL)
    if dropped:
        log.info("%d OAuth clients never used in a code exchange deleted", dropped)


async def _issue(
    ctx: AppContext,
    db: AsyncSession,
    grant_id: uuid.UUID,
    family: uuid.UUID,
    scopes: list[str],
    refresh_scopes: list[str] | None = None,
) -> TokenReply:
    """A new pair: the access token with ``scopes``, the refresh token with
    ``refresh_scopes`` (default the same). A refresh that narrows the scope
    narrows the access token only: the new refresh token keeps the old one's
    scope (RFC 6749 §6)."""
    settings = ctx.settings
    now = utcnow()
    access = keys.oauth_secret(keys.ACCESS_PREFIX)
    refresh = keys.oauth_secret(keys.REFRESH_PREFIX)
    for kind, value, ttl, granted in (
        ("access", access, settings.oauth_access_token_ttl_s, scopes),
        ("refresh", refresh, settings.oauth_refresh_token_ttl_s, refresh_scopes or scopes),
    ):
        await repo.add_token(
            db,
            OAuthToken(
                token_hash=keys.hash_secret(ctx.secret, value),
                kind=kind,
                grant_id=grant_id,
                family_id=family,
                scopes=granted,
                # Bound to this server's MCP endpoint whatever the client asked
                # (anything else was refused at /authorize and /token).
                resource=settings.mcp_url,
                expires_at=now + timedelta(seconds=ttl),
            ),
        )
    return TokenReply(
        access_token=access,
        token_type="Bearer",
        expires_in=settings.oauth_access_token_ttl_s,
        scope=" ".join(scopes),
        refresh_token=refresh,
    )


def _in_grace(ctx: AppContext, row: OAuthToken) -> bool:
    """A refresh token spent within CAIRN_OAUTH_REFRESH_REUSE_GRACE_S, and
    neither revoked nor expired: presenting it again is a client's own race
    (two refreshes at once), not a stolen token's replay."""
    grace = timedelta(seconds=ctx.settings.oauth_refresh_reuse_grace_s)
    now = utcnow()
    return (
        row.used_at is not None
        and row.used_at + grace > now
        and row.revoked_at is None
        and row.expires_at > now
    )


async def load_refresh(
    ctx: AppContext, db: AsyncSession, client: OAuthClientInformationFull, token: str
) -> CairnRefresh | None:
    """A live refresh token of this client. One used before is a reuse: its
    whole family is revoked, and it is not found."""
    found = await repo.token(db, keys.hash_secret(ctx.secret, token))
    if found is None or found[0].kind != "refresh":
        return None
    row, grant = found
    if row.used_at is not None and not (
        _in_grace(ctx, row) and grant.client_id == client.client_id
    ):
        revoked = await repo.revoke_family(db, row.family_id)
        log.warning("refresh token reused: %d tokens of its family revoked", revoked)
        return None
    if row.revoked_at is not None or grant.client_id != client.client_id:
        return None
    return CairnRefresh(
        token=token,
        client_id=grant.client_id,
        scopes=list(row.scopes),
        expires_at=int(row.expires_at.timestamp()),
        resource=row.resource,
        subject=str(grant.bot_id),
        family_id=str(row.family_id),
    )


async def exchange_refresh(
    ctx: AppContext, db: AsyncSession, refresh: CairnRefresh, scopes: list[str]
) -> TokenReply | Refused:
    """Rotate: the refresh token is spent, a new pair of the same family
    issued. Spent moments ago (``_in_grace``: two refreshes of one client at
    once), it gives a pair all the same, and the family stands."""
    token_hash = keys.hash_secret(ctx.secret, refresh.token)
    family = uuid.UUID(refresh.family_id)
    spent = await repo.spend_refresh(db, token_hash)
    found = await repo.token(db, token_hash)
    if not spent and (found is None or not _in_grace(ctx, found[0])):
        await repo.revoke_family(db, family)
        return Refused("invalid_grant", "refresh token was already used, revoked or expired")
    if found is None or not await _grant_usable(db, found[1]):
        return Refused("invalid_grant", _GRANT_GONE)
    # Writing implies reading here too (a refresh narrowed to cairn:write alone).
    asked = keys.granted_scopes(scopes) if scopes else list(refresh.scopes)
    return await _issue(ctx, db, found[1].id, family, asked, refresh_scopes=list(refresh.scopes))


async def load_access(ctx: AppContext, db: AsyncSession, token: str) -> CairnAccess | None:
    """A live access token (for revocation; calls are identified by admission)."""
    if not keys.is_access_token(token):
        return None
    found = await repo.live_access(db, keys.hash_secret(ctx.secret, token))
    if found is None:
        return None
    row, grant, _ = found
    return CairnAccess(
        token=token,
        client_id=grant.client_id,
        scopes=list(row.scopes),
        expires_at=int(row.expires_at.timestamp()),
        resource=row.resource,
        subject=str(grant.bot_id),
        family_id=str(row.family_id),
    )


async def revoke(db: AsyncSession, token: CairnAccess | CairnRefresh) -> None:
    """RFC 7009: revoking either token revokes its whole family."""
    await repo.revoke_family(db, uuid.UUID(token.family_id))


# --- the human's grants ----------------------------------------------------------------------


async def grants(db: AsyncSession, human: Agent) -> list[dict[str, Any]]:
    """The live grants a human gave, with bot and client, newest first."""
    found = await repo.grants_of(db, human.id)
    return [
        {
            "id": str(grant.id),
            "bot": {"id": str(bot.id), "username": bot.username, "display_name": bot.display_name},
            "client_id": client.client_id,
            "client_name": str(client.info.get("client_name") or client.client_id),
            "scopes": list(grant.scopes),
            "created_at": grant.created_at.isoformat(),
        }
        for grant, bot, client in found
    ]


async def revoke_grant(db: AsyncSession, human: Agent, grant_id: uuid.UUID) -> None:
    """End a grant: every token under it stops working on its next call."""
    if not await repo.revoke_grant(db, grant_id, human.id):
        raise NotFound(f"No live grant with id {grant_id}.")
