"""Client ID Metadata Documents: a client id that is a URL is fetched by the
server, so it is an SSRF door. Fetched only through the outbound guard: https,
public addresses only (checked at resolution, the connection made to a
checked address), no redirects, a size cap and a time limit. In tests the
document is served on 127.0.0.1, which only CAIRN_OAUTH_CLIENT_METADATA_ALLOW_LOOPBACK
(off by default) lets through (docs/security.md, "OAuth")."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from actors.ratelimit import Rule
from serve_app.kit.outbound import address_allowed
from tests.api.conftest import register, sign_up
from tests.api.test_oauth import REDIRECT, pkce
from tests.xserver import FakeX

MCP_URL = "https://cairn.example/mcp"


@dataclass
class Documents:
    """What the local document server answers, and what it was asked."""

    base: str = ""
    # normal | wrong_id | huge | slow | redirect | confidential | held
    mode: str = "normal"
    requests: list[str] = field(default_factory=list)
    # "held": each answer waits for this (10 s at most).
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str = "/client.json") -> str:
        return f"{self.base}{path}"

    def document(self, path: str = "/client.json") -> dict[str, Any]:
        doc: dict[str, Any] = {
            "client_id": self.url(path),
            "client_name": "Document Client",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
        }
        if self.mode == "wrong_id":
            doc["client_id"] = "https://someone-else.example/client.json"
        if self.mode == "confidential":
            doc["token_endpoint_auth_method"] = "client_secret_basic"
        if self.mode == "huge":
            doc["padding"] = "x" * 40_000
        return doc


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *_: object) -> None:
        pass

    def do_GET(self) -> None:
        docs = self.server.docs
        docs.requests.append(self.path)
        if docs.mode == "slow":
            time.sleep(3)
        if docs.mode == "held":
            docs.release.wait(10)
        if docs.mode == "redirect":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:1/elsewhere.json")
            self.end_headers()
            return
        body = json.dumps(docs.document(self.path)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    docs: Documents


@contextmanager
def serving() -> Iterator[Documents]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.docs = Documents(base=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.docs
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def docs(client: httpx.AsyncClient) -> Iterator[Documents]:
    with serving() as running:
        yield running
        running.release.set()  # no held answer outlives the test


@contextmanager
def loopback_allowed(
    client: httpx.AsyncClient, allowed: bool = True, **settings: Any
) -> Iterator[None]:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.settings
    ctx.settings = saved.model_copy(
        update={
            "oauth_client_metadata_allow_loopback": allowed,
            "outbound_timeout_s": 1.0,
            **settings,
        }
    )
    try:
        yield
    finally:
        ctx.settings = saved


async def authorize(client: httpx.AsyncClient, client_id: str) -> httpx.Response:
    _, challenge = pkce()
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "state": "s",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": MCP_URL,
    }
    return await client.get(f"/authorize?{urlencode(params)}")


async def until(condition: Callable[[], bool], deadline_s: float = 10.0) -> None:
    """Poll ``condition`` until it holds (fails the test past the deadline)."""
    ends = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < ends, "gave up waiting"
        await asyncio.sleep(0.02)


def not_found(response: httpx.Response) -> bool:
    return response.status_code == 400 and response.json()["error"] == "invalid_request"


async def test_a_metadata_document_client_signs_in(
    client: httpx.AsyncClient, docs: Documents, x: FakeX
) -> None:
    bot = await register(client, "Document Bot")
    human = await sign_up(client, "Doc Owner")
    url = x.post("docowner", f"Claiming {bot.username} on Cairn: {bot.claim_code}")
    claimed = await client.post(
        f"/api/agents/claim/{bot.agent_id}", headers=human.auth, json={"tweet_url": url}
    )
    assert claimed.status_code == 200
    client.cookies.clear()
    with loopback_allowed(client):
        verifier, challenge = pkce()
        params = {
            "response_type": "code",
            "client_id": docs.url(),
            "redirect_uri": REDIRECT,
            "state": "s",
            "code_challenge": challenge,
            "resource": MCP_URL,
        }
        response = await client.get(f"/authorize?{urlencode(params)}")
        assert response.status_code == 302, response.text
        target = urlsplit(response.headers["location"])
        page = await client.get(
            f"{target.path}?{target.query}", cookies={"cairn_session": human.session_token}
        )
        assert "Document Client" in page.text
        answered = await client.post(
            "/api/oauth/consent",
            headers=human.auth,
            json={
                "request": parse_qs(target.query)["request"][0],
                "approve": True,
                "bot_id": bot.agent_id,
                "scopes": ["cairn:read"],
            },
        )
        code = parse_qs(urlsplit(answered.json()["data"]["redirect_to"]).query)["code"][0]
        # A public client: no secret, PKCE alone binds the code to it.
        tokens = await client.post(
            "/token",
            data={
                "grant_type": "authorization_code",
                "client_id": docs.url(),
                "code": code,
                "redirect_uri": REDIRECT,
                "code_verifier": verifier,
            },
        )
        assert tokens.status_code == 200, tokens.text
        # Fetched once, then kept (CAIRN_OAUTH_CLIENT_METADATA_TTL_S).
        assert docs.requests == ["/client.json"]


async def test_loopback_documents_are_refused_by_default(
    client: httpx.AsyncClient, docs: Documents
) -> None:
    with loopback_allowed(client, False):
        assert not_found(await authorize(client, docs.url()))
        https_loopback = docs.url().replace("http://", "https://")
        assert not_found(await authorize(client, https_loopback))
        assert not_found(await authorize(client, "https://localhost/client.json"))
    assert docs.requests == []  # never asked


@pytest.mark.parametrize(
    "client_id",
    [
        "https://10.0.0.7/client.json",  # private
        "https://169.254.169.254/latest/meta-data",  # cloud metadata (link-local)
        "https://[::1]/client.json",  # loopback over IPv6
        "https://[::ffff:10.0.0.7]/client.json",  # private, IPv4-mapped
        "https://0.0.0.0/client.json",
        "https://user:pw@cairn-client.example/client.json",  # credentials in the URL
        "https://cairn-client.example/",  # no path
        "ftp://cairn-client.example/client.json",
    ],
)
async def test_private_addresses_and_odd_urls_are_never_fetched(
    client: httpx.AsyncClient, client_id: str
) -> None:
    with loopback_allowed(client):  # even with loopback allowed for tests
        started = time.monotonic()
        assert not_found(await authorize(client, client_id))
        assert time.monotonic() - started < 1.0  # refused before any connection


@pytest.mark.parametrize("mode", ["wrong_id", "huge", "slow", "redirect", "confidential"])
async def test_unusable_documents_are_refused(
    client: httpx.AsyncClient, docs: Documents, mode: str
) -> None:
    docs.mode = mode
    with loopback_allowed(client):
        started = time.monotonic()
        assert not_found(await authorize(client, docs.url()))
        assert time.monotonic() - started < 2.5  # the 1 s limit, not the server's 3 s
    assert docs.requests == ["/client.json"]  # the redirect was not followed


def test_only_public_addresses_are_allowed() -> None:
    for address in ("10.1.2.3", "192.168.0.1", "172.16.0.1", "127.0.0.1", "169.254.169.254"):
        assert not address_allowed(address), address
    for address in ("::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1", "224.0.0.1", "0.0.0.0"):
        assert not address_allowed(address), address
    assert address_allowed("93.184.215.14") and address_allowed("2606:4700::1111")
    assert address_allowed("127.0.0.1", allow_loopback=True)
    assert not address_allowed("10.1.2.3", allow_loopback=True)


# --- issue 45, M2: a fetch holds no database connection, and fetches are bounded ----------


async def test_a_slow_document_holds_no_database_connection(
    client: httpx.AsyncClient, docs: Documents
) -> None:
    """More slow document fetches at once than the pool has connections
    (pool_size=5 in the tests' app): meanwhile an ordinary request that needs
    the database is answered at once, not after the fetches' time limit."""
    bot = await register(client, "Pool Bot")
    docs.mode = "held"
    with loopback_allowed(client, outbound_timeout_s=5.0):
        asked = [
            asyncio.create_task(authorize(client, docs.url(f"/client-{i}.json"))) for i in range(8)
        ]
        try:
            await until(lambda: len(docs.requests) >= 5)
            started = time.monotonic()
            me = await client.get("/api/agents/me", headers=bot.auth)
            waited = time.monotonic() - started
        finally:
            docs.release.set()
            answers = await asyncio.gather(*asked)
    assert me.status_code == 200, me.text
    assert waited < 2.5  # the fetches' own limit is 5 s
    assert [a.status_code for a in answers] == [302] * 8
    assert sorted(docs.requests) == sorted(f"/client-{i}.json" for i in range(8))


async def test_document_fetches_are_capped_per_replica(
    client: httpx.AsyncClient, docs: Documents
) -> None:
    docs.mode = "held"
    with loopback_allowed(client, outbound_timeout_s=5.0, oauth_client_metadata_fetches=2):
        held = [
            asyncio.create_task(authorize(client, docs.url(f"/held-{i}.json"))) for i in range(2)
        ]
        try:
            await until(lambda: len(docs.requests) == 2)
            started = time.monotonic()
            third = await authorize(client, docs.url("/third.json"))
            assert time.monotonic() - started < 2.5  # refused at once, not queued
        finally:
            docs.release.set()
            answers = await asyncio.gather(*held)
        assert not_found(third)
        assert [a.status_code for a in answers] == [302, 302]
        # A slot is free again: the third is fetched now.
        assert (await authorize(client, docs.url("/third.json"))).status_code == 302
    assert docs.requests.count("/third.json") == 1


async def test_document_fetches_count_per_address_and_failures_are_kept(
    client: httpx.AsyncClient, docs: Documents
) -> None:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {**saved, "oauth_client_fetch": Rule("oauth_client_fetch", 3, 3600)}
    try:
        with loopback_allowed(client):
            for i in range(2):
                assert (await authorize(client, docs.url(f"/c{i}.json"))).status_code == 302
            # A document kept is answered without a fetch: it counts nothing.
            assert (await authorize(client, docs.url("/c0.json"))).status_code == 302
            # A failed fetch is not asked again for a while.
            docs.mode = "wrong_id"
            assert not_found(await authorize(client, docs.url("/bad.json")))
            assert not_found(await authorize(client, docs.url("/bad.json")))
            assert docs.requests.count("/bad.json") == 1
            # The address's budget (3) is spent: another URL is not fetched.
            docs.mode = "normal"
            assert not_found(await authorize(client, docs.url("/c3.json")))
            assert "/c3.json" not in docs.requests
            assert (await authorize(client, docs.url("/c1.json"))).status_code == 302
    finally:
        ctx.rules = saved
