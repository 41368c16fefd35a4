"""OAuth sign-in through the real service (`cairn run`: HAProxy, two Api
replicas, Postgres): the MCP SDK's own client, knowing only the server's URL,
discovers how to sign in from a 401, registers, sends the human to the consent
page (driven over HTTP as the signed-in human), gets a token for the chosen
bot, publishes a pattern with it, and loses access when the human revokes the
grant. The service's public name is https://cairn.e2e; the client's transport
carries every request for it to the local port."""

from __future__ import annotations

import secrets
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from tests.e2e.conftest import Service
from tests.e2e.test_service import as_client, register

pytestmark = pytest.mark.e2e

PUBLIC = "https://cairn.e2e"
REDIRECT = "http://127.0.0.1:53682/callback"


class ToService(httpx2.AsyncBaseTransport):
    """Sends requests for the public name to the service on 127.0.0.1."""

    def __init__(self, base_url: str) -> None:
        local = urlsplit(base_url)
        self.host, self.port = local.hostname or "127.0.0.1", local.port
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(scheme="http", host=self.host, port=self.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Memory:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def test_an_mcp_client_signs_in_publishes_and_loses_access(
    service: Service, http: httpx.AsyncClient
) -> None:
    bot = await register(http, "E2E OAuth Bot")
    email = f"oauth-{secrets.token_hex(4)}@example.org"
    signed_up = await http.post(
        "/api/humans/register",
        json={"name": "Olga Owner", "email": email, "password": "correct horse battery"},
        headers=as_client(),
    )
    assert signed_up.status_code == 201, signed_up.text
    session = {"Authorization": f"Bearer {signed_up.json()['data']['session_token']}"}
    post = service.x.post("olgaowner", f"Claiming {bot['username']} on Cairn: {bot['claim_code']}")
    claimed = await http.post(
        f"/api/agents/claim/{bot['agent_id']}", headers=session, json={"tweet_url": post}
    )
    assert claimed.status_code == 200, claimed.text

    answer: dict[str, str] = {}

    async def consent(authorize_url: str) -> None:
        # The human's browser: /authorize redirects to the consent page, where
        # the signed-in human picks the bot and allows.
        parts = urlsplit(authorize_url)
        assert f"{parts.scheme}://{parts.netloc}" == PUBLIC
        sent = await http.get(f"{parts.path}?{parts.query}")
        assert sent.status_code == 302, sent.text
        target = urlsplit(sent.headers["location"])
        page = await http.get(f"{target.path}?{target.query}", headers=session)
        assert page.status_code == 200 and "E2E MCP Client" in page.text
        allowed = await http.post(
            "/api/oauth/consent",
            headers=session,
            json={
                "request": parse_qs(target.query)["request"][0],
                "approve": True,
                "bot_id": bot["agent_id"],
                "scopes": ["cairn:read", "cairn:write"],
            },
        )
        assert allowed.status_code == 200, allowed.text
        back = urlsplit(allowed.json()["data"]["redirect_to"])
        answer.update({k: v[0] for k, v in parse_qs(back.query).items()})

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(
            code=answer["code"], state=answer["state"], iss=answer["iss"]
        )

    storage = Memory()
    auth = OAuthClientProvider(
        server_url=f"{PUBLIC}/mcp",
        client_metadata=OAuthClientMetadata(
            client_name="E2E MCP Client",
            redirect_uris=[REDIRECT],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
        ),
        storage=storage,
        redirect_handler=consent,
        callback_handler=callback,
    )
    async with (
        httpx2.AsyncClient(transport=ToService(service.base_url), auth=auth, timeout=60) as client,
        streamable_http_client(f"{PUBLIC}/mcp", http_client=client) as (read, write),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        published = await mcp.call_tool(
            "publish_pattern",
            {
                "title": "Sign in by URL, publish as your bot",
                "description": "An MCP client with no key signs in through the consent page.",
                "content": "Follow the 401's resource metadata; register; consent; token.",
            },
        )
        assert not published.is_error, published.content
        assert isinstance(published.structured_content, dict)
        assert published.structured_content["data"]["author"]["username"] == bot["username"]
    assert storage.tokens is not None
    access = storage.tokens.access_token

    grants = (await http.get("/api/oauth/grants", headers=session)).json()["data"]
    assert [g["bot"]["username"] for g in grants] == [bot["username"]]
    revoked = await http.delete(f"/api/oauth/grants/{grants[0]['id']}", headers=session)
    assert revoked.status_code == 200
    refused = await http.post(
        "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "my_profile", "arguments": {}},
        },
        headers={
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {access}",
        },
    )
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_token"
    assert "resource_metadata=" in refused.headers["www-authenticate"]
