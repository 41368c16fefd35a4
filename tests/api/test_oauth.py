"""OAuth 2.1 for the MCP server, end to end over the app and real Postgres:
the SDK's own OAuth client provider (mcp.client.auth.OAuthClientProvider)
discovers how to sign in from a 401, registers, sends the human to the
consent page (driven here over HTTP as the signed-in human), gets tokens and
publishes as the chosen bot; then refresh, revocation, scopes, resources,
PKCE and replays (docs/decisions/oauth.md, docs/security.md "OAuth")."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp_types import CallToolResult

from actors.ratelimit import Rule
from serve_app.services.oauth import shown_destination
from tests.api.conftest import CLIENT_IP, Human, Registered, register, scalar, sign_up
from tests.xserver import FakeX

SERVER = "https://cairn.example"
MCP_URL = f"{SERVER}/mcp"
REDIRECT = "http://127.0.0.1:53682/callback"
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
PATTERN = {
    "title": "Sign in once, publish many times",
    "description": "An MCP client that signs in through OAuth instead of a pasted key.",
    "content": "Discover the metadata from the 401, register, consent, exchange the code.",
    "use_case_tags": ["auth"],
    "tech_stack": ["python"],
}


@dataclass
class Memory:
    """The SDK client's token storage, in memory."""

    tokens: OAuthToken | None = None
    client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@dataclass
class Browser:
    """The human at the consent page: follows the authorize URL, answers as
    ``answer`` says, and hands the redirect's parameters to the SDK client."""

    client: httpx.AsyncClient
    human: Human
    bot_id: str
    scopes: list[str] = field(default_factory=lambda: ["cairn:read", "cairn:write"])
    approve: bool = True
    visits: int = 0
    result: dict[str, str] = field(default_factory=dict)

    async def redirect(self, authorize_url: str) -> None:
        self.visits += 1
        target = await consent_target(self.client, authorize_url)
        page = await self.client.get(target, cookies={"cairn_session": self.human.session_token})
        assert page.status_code == 200, page.text
        assert "Test MCP Client" in page.text and "127.0.0.1:53682" in page.text
        request_id = parse_qs(urlsplit(target).query)["request"][0]
        answer = await self.client.post(
            "/api/oauth/consent",
            headers=self.human.auth,
            json={
                "request": request_id,
                "approve": self.approve,
                "bot_id": self.bot_id,
                "scopes": self.scopes,
            },
        )
        assert answer.status_code == 200, answer.text
        back = urlsplit(answer.json()["data"]["redirect_to"])
        assert f"{back.scheme}://{back.netloc}{back.path}" == REDIRECT
        self.result = {k: v[0] for k, v in parse_qs(back.query).items()}

    async def callback(self) -> AuthorizationCodeResult:
        if "error" in self.result:
            raise RuntimeError(f"authorization failed: {self.result['error']}")
        return AuthorizationCodeResult(
            code=self.result["code"], state=self.result.get("state"), iss=self.result.get("iss")
        )


async def consent_target(client: httpx.AsyncClient, authorize_url: str) -> str:
    """Follow /authorize: a 302 to Cairn's consent page (path and query)."""
    parts = urlsplit(authorize_url)
    assert f"{parts.scheme}://{parts.netloc}" == SERVER
    response = await client.get(f"{parts.path}?{parts.query}")
    assert response.status_code == 302, response.text
    location = urlsplit(response.headers["location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{SERVER}/oauth/consent"
    return f"{location.path}?{location.query}"


def provider(browser: Browser, storage: Memory) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=MCP_URL,
        client_metadata=OAuthClientMetadata(
            client_name="Test MCP Client",
            redirect_uris=[REDIRECT],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )


@asynccontextmanager
async def signed_in_mcp(app: FastAPI, auth: OAuthClientProvider) -> AsyncIterator[ClientSession]:
    """An MCP session through the SDK's streamable HTTP client with its OAuth
    provider, knowing only the server's URL."""
    transport = httpx2.ASGITransport(app=app, client=(CLIENT_IP, 40002))
    async with (
        httpx2.AsyncClient(transport=transport, auth=auth) as http,
        streamable_http_client(MCP_URL, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


@pytest.fixture
async def owner(client: httpx.AsyncClient, x: FakeX) -> tuple[Human, Registered]:
    """A human who claimed a bot through the API (X post on the fake X)."""
    bot = await register(client, "Signed In Bot")
    human = await sign_up(client, "Ada Owner")
    url = x.post("adaowner", f"Claiming {bot.username} on Cairn: {bot.claim_code}")
    claimed = await client.post(
        f"/api/agents/claim/{bot.agent_id}", headers=human.auth, json={"tweet_url": url}
    )
    assert claimed.status_code == 200, claimed.text
    client.cookies.clear()
    return human, bot


async def test_discovery_documents(client: httpx.AsyncClient) -> None:
    resource = await client.get("/.well-known/oauth-protected-resource/mcp")
    assert resource.status_code == 200
    assert resource.json()["resource"] == MCP_URL
    assert resource.json()["authorization_servers"] == [SERVER]
    assert resource.json()["scopes_supported"] == ["cairn:read", "cairn:write"]
    server = (await client.get("/.well-known/oauth-authorization-server")).json()
    assert server["issuer"] == SERVER
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["client_id_metadata_document_supported"] is True
    assert server["authorization_response_iss_parameter_supported"] is True
    for endpoint in ("authorization", "token", "registration", "revocation"):
        assert server[f"{endpoint}_endpoint"].startswith(f"{SERVER}/")


async def test_the_sdk_client_signs_in_publishes_refreshes_and_loses_access(
    client: httpx.AsyncClient, app: FastAPI, owner: tuple[Human, Registered], database: str
) -> None:
    human, bot = owner
    browser = Browser(client, human, bot.agent_id)
    storage = Memory()
    auth = provider(browser, storage)
    async with signed_in_mcp(app, auth) as session:
        # Anonymous reads need no sign-in: nothing asked of the human yet.
        assert ok(await session.call_tool("search", {"q": "anything"}))["data"] == []
        assert browser.visits == 0
        # A write tool: 401 with the challenge -> metadata -> registration ->
        # consent -> token -> the call again, as the chosen bot.
        published = ok(await session.call_tool("publish_pattern", PATTERN))
        assert browser.visits == 1
        assert published["data"]["author"]["username"] == bot.username
        assert storage.client is not None and storage.client.client_secret  # DCR gave a secret
        first = storage.tokens
        assert first is not None and first.access_token.startswith("cairn_at_")
        assert first.scope == "cairn:read cairn:write"

        # The token is stored only as a keyed hash, never in clear.
        assert scalar(database, "SELECT count(*) FROM oauth_tokens") == 2
        assert (
            scalar(
                database,
                "SELECT count(*) FROM oauth_tokens WHERE token_hash = %s",
                first.access_token.encode(),
            )
            == 0
        )
        assert scalar(database, "SELECT secret_hash IS NOT NULL FROM oauth_clients") is True

        # Refresh: the client finds its token expired and rotates the pair.
        auth.context.token_expiry_time = 1.0
        me = ok(await session.call_tool("my_profile", {}))
        assert me["data"]["username"] == bot.username
        second = storage.tokens
        assert second is not None and second.refresh_token != first.refresh_token
        assert browser.visits == 1  # no new consent

        # The human sees the grant and revokes it: the next call is refused.
        grants = (await client.get("/api/oauth/grants", headers=human.auth)).json()["data"]
        assert [(g["bot"]["username"], g["client_name"]) for g in grants] == [
            (bot.username, "Test MCP Client")
        ]
        revoked = await client.delete(f"/api/oauth/grants/{grants[0]['id']}", headers=human.auth)
        assert revoked.status_code == 200
    # The revoked token is refused: the SDK client is sent to sign in again,
    # and this time the human says no.
    browser.approve = False
    with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces the denial in a task group
        async with signed_in_mcp(app, auth) as again:
            await again.call_tool("publish_pattern", {**PATTERN, "title": "Not any more"})
    assert browser.visits == 2 and browser.result["error"] == "access_denied"
    refused = await client.post(
        "/mcp",
        json=tool_call("my_profile", {}),
        headers={**MCP_HEADERS, "Authorization": f"Bearer {second.access_token}"},
    )
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_token"
    assert refused.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    assert (await client.get("/api/oauth/grants", headers=human.auth)).json()["data"] == []


def refused_here(response: httpx.Response) -> str:
    """The error of an /authorize refusal Cairn answers itself (no redirect)."""
    assert response.status_code == 400, (response.status_code, response.headers)
    assert "location" not in response.headers
    error: str = response.json()["error"]
    return error


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


# --- the protocol by hand: what the SDK client never sends ---------------------------------


@dataclass
class Registration:
    client_id: str
    client_secret: str


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


def registration(**extra: Any) -> dict[str, Any]:
    """A dynamic registration's body: a test client's, with ``extra`` over it."""
    return {
        "client_name": "Test MCP Client",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        **extra,
    }


async def register_client(client: httpx.AsyncClient, **extra: Any) -> Registration:
    response = await client.post("/register", json=registration(**extra))
    assert response.status_code == 201, response.text
    data = response.json()
    return Registration(data["client_id"], data["client_secret"])


async def authorize(
    client: httpx.AsyncClient, reg: Registration, challenge: str | None, **extra: str
) -> httpx.Response:
    params = {
        "response_type": "code",
        "client_id": reg.client_id,
        "redirect_uri": REDIRECT,
        "state": "st4te",
        "resource": MCP_URL,
        "scope": "cairn:read cairn:write",
        **extra,
    }
    if challenge is not None:
        params["code_challenge"] = challenge
        params.setdefault("code_challenge_method", "S256")
    return await client.get(f"/authorize?{urlencode(params)}")


async def consent(
    client: httpx.AsyncClient, human: Human, response: httpx.Response, **answer: Any
) -> dict[str, str]:
    assert response.status_code == 302, response.text
    target = urlsplit(response.headers["location"])
    request_id = parse_qs(target.query)["request"][0]
    body = {"request": request_id, "approve": True, "scopes": ["cairn:read", "cairn:write"]}
    answered = await client.post("/api/oauth/consent", headers=human.auth, json={**body, **answer})
    assert answered.status_code == 200, answered.text
    query = urlsplit(answered.json()["data"]["redirect_to"]).query
    return {k: v[0] for k, v in parse_qs(query).items()}


async def token(client: httpx.AsyncClient, reg: Registration, **form: str) -> httpx.Response:
    return await client.post(
        "/token",
        data={"client_id": reg.client_id, "client_secret": reg.client_secret, **form},
    )


async def code_for(
    client: httpx.AsyncClient, human: Human, bot: Registered, reg: Registration, **answer: Any
) -> tuple[str, str]:
    verifier, challenge = pkce()
    back = await consent(
        client, human, await authorize(client, reg, challenge), bot_id=bot.agent_id, **answer
    )
    assert back["state"] == "st4te" and back["iss"] == SERVER
    return back["code"], verifier


async def exchange(
    client: httpx.AsyncClient, reg: Registration, code: str, verifier: str, **extra: str
) -> httpx.Response:
    return await token(
        client,
        reg,
        grant_type="authorization_code",
        code=code,
        redirect_uri=REDIRECT,
        code_verifier=verifier,
        **extra,
    )


async def tokens_for(
    client: httpx.AsyncClient, human: Human, bot: Registered, reg: Registration, **answer: Any
) -> dict[str, Any]:
    """A code for ``bot`` consented by ``human``, exchanged: the token reply."""
    code, verifier = await code_for(client, human, bot, reg, **answer)
    response = await exchange(client, reg, code, verifier)
    assert response.status_code == 200, response.text
    tokens: dict[str, Any] = response.json()
    return tokens


async def call(
    client: httpx.AsyncClient, access: str, name: str, arguments: dict[str, Any]
) -> httpx.Response:
    return await client.post(
        "/mcp",
        json=tool_call(name, arguments),
        headers={**MCP_HEADERS, "Authorization": f"Bearer {access}"},
    )


async def test_pkce_is_required_and_checked(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    human, bot = owner
    reg = await register_client(client)
    # No code_challenge: refused at /authorize (shown by Cairn, not redirected).
    missing = await authorize(client, reg, None)
    assert refused_here(missing) == "invalid_request"
    plain = await authorize(client, reg, "x" * 43, code_challenge_method="plain")
    assert refused_here(plain) == "invalid_request"
    # Not an S256 digest (too long, or not base64url): refused before any consent.
    for challenge in ("x" * 200, "!" * 43):
        assert refused_here(await authorize(client, reg, challenge)) == "invalid_request"
    code, verifier = await code_for(client, human, bot, reg)
    wrong = await exchange(client, reg, code, pkce()[0])
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    no_verifier = await token(
        client, reg, grant_type="authorization_code", code=code, redirect_uri=REDIRECT
    )
    assert no_verifier.status_code == 400 and no_verifier.json()["error"] == "invalid_request"
    good = await exchange(client, reg, code, verifier)
    assert good.status_code == 200, good.text


async def test_a_replayed_code_fails_and_revokes_what_it_gave(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    human, bot = owner
    reg = await register_client(client)
    code, verifier = await code_for(client, human, bot, reg)
    first = await exchange(client, reg, code, verifier)
    assert first.status_code == 200
    access = first.json()["access_token"]
    assert (await call(client, access, "my_profile", {})).status_code == 200
    again = await exchange(client, reg, code, verifier)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert (await call(client, access, "my_profile", {})).status_code == 401


async def test_a_reused_refresh_token_revokes_the_family(
    client: httpx.AsyncClient, owner: tuple[Human, Registered], database: str
) -> None:
    human, bot = owner
    reg = await register_client(client)
    tokens = await tokens_for(client, human, bot, reg)
    rotated = await token(
        client, reg, grant_type="refresh_token", refresh_token=tokens["refresh_token"]
    )
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()
    assert new["refresh_token"] != tokens["refresh_token"]
    assert (await call(client, new["access_token"], "my_profile", {})).status_code == 200
    # The old refresh token again, past the grace for a client's own race
    # (stolen, or a replay): refused, and every token of the family stops working.
    scalar(
        database,
        "UPDATE oauth_tokens SET used_at = now() - interval '1 minute' WHERE used_at IS NOT NULL "
        "RETURNING 1",
    )
    reused = await token(
        client, reg, grant_type="refresh_token", refresh_token=tokens["refresh_token"]
    )
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert (await call(client, new["access_token"], "my_profile", {})).status_code == 401
    after = await token(client, reg, grant_type="refresh_token", refresh_token=new["refresh_token"])
    assert after.status_code == 400


async def test_expired_and_denied_codes_answer_in_oauth_shapes(
    client: httpx.AsyncClient, owner: tuple[Human, Registered], database: str
) -> None:
    human, bot = owner
    reg = await register_client(client)
    _, challenge = pkce()
    denied = await consent(client, human, await authorize(client, reg, challenge), approve=False)
    assert denied == {
        "error": "access_denied",
        "error_description": "The request was denied.",
        "state": "st4te",
        "iss": SERVER,
    }
    code, verifier = await code_for(client, human, bot, reg)
    scalar(database, "UPDATE oauth_codes SET expires_at = now() - interval '1 second' RETURNING 1")
    expired = await exchange(client, reg, code, verifier)
    assert expired.status_code == 400 and expired.json()["error"] == "invalid_grant"
    # A consent answered twice, or never issued: 404 in the API's shape.
    _, challenge = pkce()
    response = await authorize(client, reg, challenge)
    await consent(client, human, response, bot_id=bot.agent_id)
    request_id = parse_qs(urlsplit(response.headers["location"]).query)["request"][0]
    twice = await client.post(
        "/api/oauth/consent",
        headers=human.auth,
        json={"request": request_id, "approve": False},
    )
    assert twice.status_code == 404 and twice.json()["error"] == "not_found"


async def test_tokens_are_bound_to_this_mcp_server(
    client: httpx.AsyncClient, owner: tuple[Human, Registered], database: str
) -> None:
    human, bot = owner
    reg = await register_client(client)
    _, challenge = pkce()
    other = await authorize(client, reg, challenge, resource="https://other.example/mcp")
    assert refused_here(other) == "invalid_target"
    code, verifier = await code_for(client, human, bot, reg)
    wrong = await exchange(client, reg, code, verifier, resource="https://other.example/mcp")
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_target"
    tokens = (await exchange(client, reg, code, verifier, resource=MCP_URL)).json()
    access = tokens["access_token"]
    assert (await call(client, access, "my_profile", {})).status_code == 200
    # Not a credential for the REST API (another audience).
    rest = await client.get("/api/agents/me", headers={"Authorization": f"Bearer {access}"})
    assert rest.status_code == 401 and rest.json()["error"] == "invalid_token"
    # A token issued for another resource (say, under another public URL) is refused.
    scalar(
        database,
        "UPDATE oauth_tokens SET resource = 'https://old.example/mcp' WHERE kind = 'access' "
        "RETURNING 1",
    )
    moved = await call(client, access, "my_profile", {})
    assert moved.status_code == 401 and moved.json()["error"] == "invalid_token"


async def test_scopes_limit_the_tools(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    human, bot = owner
    reg = await register_client(client)
    code, verifier = await code_for(client, human, bot, reg, scopes=["cairn:read"])
    tokens = (await exchange(client, reg, code, verifier)).json()
    assert tokens["scope"] == "cairn:read"
    assert (await call(client, tokens["access_token"], "my_profile", {})).status_code == 200
    write = await call(client, tokens["access_token"], "publish_pattern", PATTERN)
    assert write.status_code == 403 and write.json()["error"] == "insufficient_scope"
    assert write.headers["www-authenticate"].startswith(
        'Bearer error="insufficient_scope", scope="cairn:read cairn:write", resource_metadata='
    )


async def test_revocation_endpoint_ends_access(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    human, bot = owner
    reg = await register_client(client)
    tokens = await tokens_for(client, human, bot, reg)
    # A wrong client secret is refused.
    bad = await client.post(
        "/revoke",
        data={"client_id": reg.client_id, "client_secret": "nope", "token": tokens["access_token"]},
    )
    assert bad.status_code == 401
    assert (await call(client, tokens["access_token"], "my_profile", {})).status_code == 200
    revoked = await client.post(
        "/revoke",
        data={
            "client_id": reg.client_id,
            "client_secret": reg.client_secret,
            "token": tokens["refresh_token"],
        },
    )
    assert revoked.status_code == 200
    # Revoking the refresh token revoked its family, the access token too.
    assert (await call(client, tokens["access_token"], "my_profile", {})).status_code == 401


async def test_a_token_counts_as_the_bot_and_stops_with_it(
    client: httpx.AsyncClient, owner: tuple[Human, Registered], database: str
) -> None:
    human, bot = owner
    reg = await register_client(client)
    code, verifier = await code_for(client, human, bot, reg)
    access = (await exchange(client, reg, code, verifier)).json()["access_token"]
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {**saved, "general": Rule("general", 3, 3600)}
    try:
        # Two calls with the API key and one with the token: the bot's budget of 3.
        for _ in range(2):
            me = await client.get("/api/agents/me", headers=bot.auth)
            assert me.status_code == 200
        assert me.headers["x-ratelimit-remaining"] == "1"
        answered = (await call(client, access, "my_profile", {})).json()
        assert answered["result"]["isError"] is False
        over = await client.get("/api/agents/me", headers=bot.auth)
        assert over.status_code == 429
        limited = (await call(client, access, "my_profile", {})).json()
        assert limited["result"]["structuredContent"]["error"] == "rate_limited"
    finally:
        ctx.rules = saved
    scalar(database, "UPDATE agents SET is_active = false WHERE id = %s RETURNING 1", bot.agent_id)
    stopped = await call(client, access, "my_profile", {})
    assert stopped.status_code == 403 and stopped.json()["error"] == "account_inactive"


async def test_consent_needs_the_human_and_their_own_active_bot(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    human, bot = owner
    stranger = await sign_up(client, "Eve Stranger")
    other_bot = await register(client, "Unclaimed Bot")
    reg = await register_client(client)
    _, challenge = pkce()
    response = await authorize(client, reg, challenge)
    request_id = parse_qs(urlsplit(response.headers["location"]).query)["request"][0]
    body = {"request": request_id, "approve": True, "scopes": ["cairn:read"]}
    # An agent's API key is not a human.
    as_bot = await client.post("/api/oauth/consent", headers=bot.auth, json=body)
    assert as_bot.status_code == 403
    for who, bot_id in ((stranger, bot.agent_id), (human, other_bot.agent_id)):
        refused = await client.post(
            "/api/oauth/consent", headers=who.auth, json={**body, "bot_id": bot_id}
        )
        assert refused.status_code == 403 and refused.json()["error"] == "not_your_bot"
        # The refused answer used the request up: start again.
        response = await authorize(client, reg, challenge)
        body["request"] = parse_qs(urlsplit(response.headers["location"]).query)["request"][0]
    # A cookie-signed answer that is not JSON (a cross-site form) is refused.
    form = await client.post(
        "/api/oauth/consent",
        cookies={"cairn_session": human.session_token},
        data={"request": body["request"], "approve": "true"},
    )
    assert form.status_code == 403 and form.json()["error"] == "csrf_refused"


async def test_an_unregistered_redirect_uri_is_never_redirected_to(
    client: httpx.AsyncClient,
) -> None:
    reg = await register_client(client)
    _, challenge = pkce()
    response = await authorize(client, reg, challenge, redirect_uri="https://evil.example/cb")
    assert response.status_code == 400 and "location" not in response.headers
    assert response.json()["error"] == "invalid_request"
    unknown = await authorize(
        client, Registration("no-such-client", ""), challenge, redirect_uri=REDIRECT
    )
    assert unknown.status_code == 400 and "location" not in unknown.headers


async def test_registration_refuses_unsafe_redirect_uris(client: httpx.AsyncClient) -> None:
    for uri in (
        "http://evil.example/cb",
        "javascript:alert(1)",
        "https://ok.example/cb#frag",
        # User info would read as the first host on the consent page.
        "https://claude.ai@evil.example/cb",
        "https://claude.ai:x@evil.example/cb",
    ):
        response = await client.post("/register", json={"client_name": "x", "redirect_uris": [uri]})
        assert response.status_code == 400, uri
        assert response.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata")


def test_the_consent_page_names_where_the_code_really_goes() -> None:
    assert shown_destination("https://app.example/cb") == "app.example"
    assert shown_destination("https://app.example:8443/cb") == "app.example:8443"
    assert shown_destination("http://127.0.0.1:53682/callback") == "127.0.0.1:53682"
    # A private-use scheme names the app; its "host" part is free text.
    assert (
        shown_destination("com.evil.app://claude.ai/cb") == "the app registered for com.evil.app:"
    )


async def test_consent_page_shows_the_client_escaped_and_the_grants(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    human, bot = owner
    reg = await register_client(client, client_name='<script>alert("x")</script>')
    _, challenge = pkce()
    response = await authorize(client, reg, challenge)
    target = urlsplit(response.headers["location"])
    path = f"{target.path}?{target.query}"
    anonymous = await client.get(path)
    assert anonymous.status_code == 200 and 'id="signin-form"' in anonymous.text
    assert "<script>alert" not in anonymous.text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in anonymous.text
    page = await client.get(path, cookies={"cairn_session": human.session_token})
    assert page.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert f'value="{bot.agent_id}"' in page.text and "127.0.0.1:53682" in page.text
    assert re.search(r'id="no-grants"', page.text)
    missing = await client.get("/oauth/consent?request=not-a-request")
    assert missing.status_code == 404 and 'id="consent-missing"' in missing.text


async def test_expired_codes_and_tokens_go_as_new_sign_ins_come(
    client: httpx.AsyncClient, owner: tuple[Human, Registered], database: str
) -> None:
    human, bot = owner
    reg = await register_client(client)
    tokens = await tokens_for(client, human, bot, reg)
    scalar(database, "UPDATE oauth_tokens SET expires_at = now() - interval '1 minute' RETURNING 1")
    # A spent code is kept for the refresh-token lifetime (30 days), then goes.
    scalar(
        database,
        "UPDATE oauth_codes SET expires_at = now() - interval '31 days',"
        " used_at = now() - interval '31 days' RETURNING 1",
    )
    # Expired: the access token is refused at once.
    expired = await call(client, tokens["access_token"], "my_profile", {})
    assert expired.status_code == 401 and expired.json()["error"] == "invalid_token"
    code, verifier = await code_for(client, human, bot, reg)
    assert (await exchange(client, reg, code, verifier)).status_code == 200
    # Only the new pair and the new (spent) code are left.
    assert scalar(database, "SELECT count(*) FROM oauth_tokens") == 2
    assert scalar(database, "SELECT count(*) FROM oauth_codes") == 1


def basic(reg: Registration, secret: str | None = None) -> dict[str, str]:
    pair = f"{quote(reg.client_id)}:{quote(secret if secret is not None else reg.client_secret)}"
    return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}


async def test_client_secret_basic_needs_no_client_id_in_the_form(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    """RFC 6749 §2.3.1: a client authenticating with the header need not repeat
    its id; a failed authentication there is 401 invalid_client with the Basic
    challenge (§5.2), at /token and at /revoke (RFC 7009)."""
    human, bot = owner
    reg = await register_client(client)
    code, verifier = await code_for(client, human, bot, reg)
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "code_verifier": verifier,
    }
    wrong = await client.post("/token", data=form, headers=basic(reg, "nope"))
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    assert wrong.headers["www-authenticate"] == 'Basic realm="Cairn"'
    issued = await client.post("/token", data=form, headers=basic(reg))
    assert issued.status_code == 200, issued.text
    tokens = issued.json()
    refused = await client.post(
        "/revoke", data={"token": tokens["access_token"]}, headers=basic(reg, "nope")
    )
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"
    assert refused.headers["www-authenticate"] == 'Basic realm="Cairn"'
    no_token = await client.post("/revoke", data={}, headers=basic(reg))
    assert no_token.status_code == 400 and no_token.json()["error"] == "invalid_request"
    revoked = await client.post(
        "/revoke", data={"token": tokens["access_token"]}, headers=basic(reg)
    )
    assert revoked.status_code == 200 and revoked.headers["cache-control"] == "no-store"
    assert (await call(client, tokens["access_token"], "my_profile", {})).status_code == 401


async def test_a_public_client_revokes_with_its_id_alone(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    """RFC 7009 §2.1: a public client has no secret to send."""
    human, bot = owner
    registered = await client.post(
        "/register",
        json=registration(client_name="Public MCP Client", token_endpoint_auth_method="none"),
    )
    assert registered.status_code == 201, registered.text
    reg = Registration(registered.json()["client_id"], "")
    code, verifier = await code_for(client, human, bot, reg)
    tokens = await client.post(
        "/token",
        data={
            "client_id": reg.client_id,
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier,
        },
    )
    assert tokens.status_code == 200, tokens.text
    refresh = tokens.json()["refresh_token"]
    revoked = await client.post(
        "/revoke",
        data={"client_id": reg.client_id, "token": refresh, "token_type_hint": "refresh_token"},
    )
    assert revoked.status_code == 200, revoked.text
    access = tokens.json()["access_token"]
    assert (await call(client, access, "my_profile", {})).status_code == 401


async def test_authorize_errors_are_shown_by_cairn_not_redirected(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    """Issue 45, L1: a registration names any redirect URI it likes, so an
    error at /authorize, before anyone saw the consent page, is never a
    redirect there (Cairn's link would bounce the browser straight to the
    registrant's page). Once the human answered on the consent page, the
    answer, a denial too, goes back to the client with ``iss`` (RFC 9207)."""
    human, _ = owner
    reg = await register_client(client, redirect_uris=["https://phish.example/login"])
    for response, error in (
        (
            await authorize(
                client,
                reg,
                pkce()[1],
                redirect_uri="https://phish.example/login",
                resource="https://elsewhere.example/mcp",
            ),
            "invalid_target",
        ),
        (
            await authorize(client, reg, None, redirect_uri="https://phish.example/login"),
            "invalid_request",
        ),
        (
            await authorize(
                client,
                reg,
                pkce()[1],
                redirect_uri="https://phish.example/login",
                scope="cairn:admin",
            ),
            "invalid_scope",
        ),
    ):
        assert refused_here(response) == error
        assert response.headers["cache-control"] == "no-store"
    asked = await authorize(client, reg, pkce()[1], redirect_uri="https://phish.example/login")
    denied = await client.post(
        "/api/oauth/consent",
        headers=human.auth,
        json={
            "request": parse_qs(urlsplit(asked.headers["location"]).query)["request"][0],
            "approve": False,
        },
    )
    back = urlsplit(denied.json()["data"]["redirect_to"])
    assert back.netloc == "phish.example"
    assert parse_qs(back.query)["error"] == ["access_denied"]
    assert parse_qs(back.query)["iss"] == [SERVER]


async def test_write_implies_read_and_a_narrowed_refresh_keeps_the_grant(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    """A grant of cairn:write alone could not even open the session; writing
    implies reading. A refresh asking for less narrows the access token, not
    the refresh token (RFC 6749 §6)."""
    human, bot = owner
    reg = await register_client(client)
    tokens = await tokens_for(client, human, bot, reg, scopes=["cairn:write"])
    assert tokens["scope"] == "cairn:read cairn:write"
    assert (await call(client, tokens["access_token"], "my_profile", {})).status_code == 200
    narrowed = await token(
        client,
        reg,
        grant_type="refresh_token",
        refresh_token=tokens["refresh_token"],
        scope="cairn:read",
    )
    assert narrowed.status_code == 200 and narrowed.json()["scope"] == "cairn:read"
    wide = await token(
        client,
        reg,
        grant_type="refresh_token",
        refresh_token=narrowed.json()["refresh_token"],
        scope="cairn:read cairn:write",
    )
    assert wide.status_code == 200, wide.text
    assert wide.json()["scope"] == "cairn:read cairn:write"


async def test_a_deactivated_human_ends_the_grants_they_gave(
    client: httpx.AsyncClient, owner: tuple[Human, Registered], database: str
) -> None:
    human, bot = owner
    reg = await register_client(client)
    tokens = await tokens_for(client, human, bot, reg)
    assert (await call(client, tokens["access_token"], "my_profile", {})).status_code == 200
    scalar(
        database, "UPDATE agents SET is_active = false WHERE id = %s RETURNING 1", human.agent_id
    )
    stopped = await call(client, tokens["access_token"], "my_profile", {})
    assert stopped.status_code == 401 and stopped.json()["error"] == "invalid_token"
    refreshed = await token(
        client, reg, grant_type="refresh_token", refresh_token=tokens["refresh_token"]
    )
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"


# --- issue 45: bounds on what anonymous callers store, replays and races ---------------------


async def test_registration_is_bounded_and_refuses_client_keys(
    client: httpx.AsyncClient, database: str
) -> None:
    """M3: every field a registration stores is bounded, and the whole of it;
    no jwks (Cairn verifies no private_key_jwt). Nothing refused is stored."""
    long_uri = "https://app.example/" + "p" * 480
    for extra in (
        {"jwks": {"keys": [{"kty": "RSA", "n": "x" * 1000, "e": "AQAB"}]}},
        {"jwks_uri": "https://app.example/jwks.json"},
        {"client_name": "n" * 101},
        {"redirect_uris": [f"{REDIRECT}/{i}" for i in range(6)]},
        {"redirect_uris": ["https://app.example/" + "p" * 600]},
        {"contacts": ["a@example.com"] * 4},
        {"contacts": ["a" * 300]},
        {"software_id": "s" * 101},
        {"logo_uri": "https://app.example/" + "l" * 600},
        # Each field within its bound, the whole over 4 KiB.
        {
            "redirect_uris": [f"{long_uri}{i}" for i in range(5)],
            "client_uri": long_uri,
            "tos_uri": long_uri,
            "policy_uri": long_uri,
        },
    ):
        response = await client.post("/register", json=registration(**extra))
        assert response.status_code == 400, (list(extra), response.text)
        assert response.json()["error"] == "invalid_client_metadata"
    # The 900 kB registration of the finding, and any OAuth body past 64 KiB:
    # refused by its length, before it is read.
    for path in ("/register", "/token", "/authorize", "/revoke"):
        response = await client.post(path, json=registration(client_name="x" * 900_000))
        assert response.status_code == 413, (path, response.text)
        assert response.json()["error"] == "payload_too_large"
    assert scalar(database, "SELECT count(*) FROM oauth_clients") == 0
    # At the bounds: fine.
    await register_client(
        client,
        client_name="n" * 100,
        contacts=["a@example.com"] * 3,
        redirect_uris=[f"{REDIRECT}/{i}" for i in range(5)],
    )


async def test_registration_counts_its_own_rule_per_address(client: httpx.AsyncClient) -> None:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {**saved, "oauth_register": Rule("oauth_register", 2, 3600)}
    try:
        for _ in range(2):
            await register_client(client)
        third = await client.post(
            "/register", json={"client_name": "x", "redirect_uris": [REDIRECT]}
        )
        assert third.status_code == 429 and third.json()["error"] == "rate_limited"
    finally:
        ctx.rules = saved


async def test_authorize_caps_state_and_stores_nothing_over_it(
    client: httpx.AsyncClient, database: str
) -> None:
    """M3: a query parameter is at most 1000 characters (http/querystring.py);
    a POSTed authorization request is held to it too (450 kB were kept)."""
    reg = await register_client(client)

    async def posted(state: str) -> httpx.Response:
        form = {
            "response_type": "code",
            "client_id": reg.client_id,
            "redirect_uri": REDIRECT,
            "state": state,
            "resource": MCP_URL,
            "code_challenge": pkce()[1],
            "code_challenge_method": "S256",
        }
        return await client.post("/authorize", data=form)

    over = await posted("s" * 1001)
    assert refused_here(over) == "invalid_request"
    assert "s" * 1001 not in over.text
    # 450 kB: past the body limit of OAuth's endpoints, refused unread.
    huge = await posted("s" * 450_000)
    assert huge.status_code == 413 and "s" * 1001 not in huge.text
    assert scalar(database, "SELECT count(*) FROM oauth_requests") == 0
    assert (await posted("s" * 1000)).status_code == 302


async def test_registrations_never_used_in_a_code_exchange_expire(
    client: httpx.AsyncClient, owner: tuple[Human, Registered], database: str
) -> None:
    """M3: a client no code exchange used is deleted a day after it was
    stored (as new registrations and sign-ins come); a used one stays."""
    human, bot = owner
    used = await register_client(client)
    await tokens_for(client, human, bot, used)
    unused = await register_client(client)
    _, challenge = pkce()
    await authorize(client, unused, challenge)  # a pending request, never answered
    scalar(
        database,
        "UPDATE oauth_clients SET created_at = now() - interval '25 hours' RETURNING 1",
    )
    fresh = await register_client(client)  # the sweep runs
    kept = {
        row
        for row in [
            scalar(database, "SELECT client_id FROM oauth_clients WHERE client_id = %s", c)
            for c in (used.client_id, unused.client_id, fresh.client_id)
        ]
        if row is not None
    }
    assert kept == {used.client_id, fresh.client_id}
    assert scalar(database, "SELECT count(*) FROM oauth_requests") == 0


async def test_a_code_replayed_after_expiry_still_revokes_its_family(
    client: httpx.AsyncClient, owner: tuple[Human, Registered], database: str
) -> None:
    """L5: a spent code is kept for the refresh-token lifetime, so a replay
    after it expired (and after the sweep ran) still revokes what it gave."""
    human, bot = owner
    reg = await register_client(client)
    code, verifier = await code_for(client, human, bot, reg)
    first = await exchange(client, reg, code, verifier)
    assert first.status_code == 200
    access = first.json()["access_token"]
    scalar(database, "UPDATE oauth_codes SET expires_at = now() - interval '1 minute' RETURNING 1")
    await tokens_for(client, human, bot, reg)  # another sign-in: the sweep runs
    assert (await call(client, access, "my_profile", {})).status_code == 200
    replayed = await exchange(client, reg, code, verifier)
    assert replayed.status_code == 400 and replayed.json()["error"] == "invalid_grant"
    assert (await call(client, access, "my_profile", {})).status_code == 401


async def test_two_refreshes_at_once_keep_the_family(
    client: httpx.AsyncClient, owner: tuple[Human, Registered]
) -> None:
    """L7: a client that refreshes twice at once with one refresh token gets
    two pairs; neither is revoked. Another client presenting it is refused."""
    human, bot = owner
    reg = await register_client(client)
    tokens = await tokens_for(client, human, bot, reg)
    both = await asyncio.gather(
        *(
            token(client, reg, grant_type="refresh_token", refresh_token=tokens["refresh_token"])
            for _ in range(2)
        )
    )
    assert [r.status_code for r in both] == [200, 200], [r.text for r in both]
    for reply in both:
        me = await call(client, reply.json()["access_token"], "my_profile", {})
        assert me.status_code == 200
        assert reply.json()["refresh_token"] != tokens["refresh_token"]
    other = await register_client(client)
    stolen = await token(
        client, other, grant_type="refresh_token", refresh_token=tokens["refresh_token"]
    )
    assert stolen.status_code == 400
    for reply in both:
        gone = await call(client, reply.json()["access_token"], "my_profile", {})
        assert gone.status_code == 401
