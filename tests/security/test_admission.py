"""The one admission layer (serve_app/http/admission.py): every route states
a rule, and the doors that opened holes — the MCP transport's streams, the
notification stream, /api/health, /uploads, the MCP protocol calls and tool
arguments — are admitted like every REST call (docs/security.md, "The
admission layer")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import Mount, Route

from actors.ratelimit import Rule
from serve_app.app import create_app
from serve_app.http import admission
from serve_app.runtime.connections import Connections, TooManyStreams
from serve_app.runtime.snapshot import Snapshot
from tests.api.conftest import (
    OPERATOR,
    SECRET,
    Registered,
    assert_error,
    make_settings,
    register,
    scalar,
)

MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
# A request that should be refused at once: a timeout here means the door
# opened a stream instead.
REFUSED_WITHIN_S = 10.0


def rpc(method: str, params: dict[str, Any] | None = None, id_: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}


@contextlib.contextmanager
def rules(app: FastAPI, **changed: Rule) -> Iterator[None]:
    ctx = app.state.ctx
    saved = ctx.rules
    ctx.rules = {**saved, **changed}
    try:
        yield
    finally:
        ctx.rules = saved


# --- deny by default ------------------------------------------------------------


def every_route(routes: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every route the ASGI app answers, included routers' and mounted apps' too."""
    for route in routes:
        original = getattr(route, "original_router", None)
        if original is not None:
            yield from every_route(original.routes, prefix)
        elif isinstance(route, Mount):
            yield f"{prefix}{route.path}", route
            yield from every_route(getattr(route.app, "routes", []), prefix + route.path)
        else:
            yield f"{prefix}{getattr(route, 'path', '?')}", route


def test_every_route_states_an_admission_rule(app: FastAPI) -> None:
    routes = dict(every_route(app.routes))
    # The enumeration reaches the doors that are no FastAPI routes.
    assert {"/mcp", "/openapi.json", "/docs", "/api/health", "/uploads/{agent_id}/{name}"} <= set(
        routes
    )
    missing = [path for path, route in routes.items() if admission.unruled([route])]
    assert missing == [], f"routes without an admission rule: {missing}"


def test_a_door_without_a_rule_is_found_and_refused() -> None:
    async def endpoint(_: Any) -> None:
        return None

    bare = [Route("/raw", endpoint), Mount("/mounted", routes=[Route("/x", endpoint)])]
    assert admission.unruled(bare) == ["GET,HEAD /raw", "* /mounted"]
    with pytest.raises(RuntimeError, match="/raw"):
        admission.check(bare)
    guarded = [admission.guard(route, admission.OPEN) for route in bare]
    assert admission.unruled(guarded) == []


async def test_a_route_added_later_without_a_rule_is_not_admitted(database: str) -> None:
    app = create_app(make_settings(), database_url=database, secret=SECRET, pool_size=1)

    async def sneaky() -> dict[str, str]:
        return {"secret": "nothing checked me"}

    app.add_api_route("/api/sneaky", sneaky)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            assert_error(await client.get("/api/sneaky"), 403, "not_admitted")


# --- MCP: no anonymous long-lived connection, protocol calls metered ---------------


async def test_keyless_get_mcp_is_refused_not_streamed(client: httpx.AsyncClient) -> None:
    response = await asyncio.wait_for(
        client.get("/mcp", headers={"Accept": "text/event-stream"}), REFUSED_WITHIN_S
    )
    assert_error(response, 401, "missing_api_key")


async def test_keyless_subscriptions_listen_is_refused(client: httpx.AsyncClient) -> None:
    response = await asyncio.wait_for(
        client.post("/mcp", json=rpc("subscriptions/listen"), headers=MCP_ACCEPT),
        REFUSED_WITHIN_S,
    )
    assert_error(response, 401, "missing_api_key")


async def test_mcp_protocol_calls_count_the_read_budget(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    with rules(app, anon_read=Rule("anon_read", 3, 60)):
        answers = [
            await client.post("/mcp", json=rpc(method), headers=MCP_ACCEPT)
            for method in ("tools/list", "resources/list", "ping", "tools/list")
        ]
    assert [a.status_code for a in answers[:3]] == [200, 200, 200]
    body = assert_error(answers[3], 429, "rate_limited")
    assert "anon read" in body["message"] and answers[3].headers["Retry-After"]
    # Counted per address: the REST reads of the same address are refused too.
    with rules(app, anon_read=Rule("anon_read", 3, 60)):
        assert (await client.get("/api/categories")).status_code == 429


async def test_a_keyed_protocol_call_counts_the_agents_budget(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    agent = await register(client, "Listing Agent")
    with rules(app, general=Rule("general", 1, 3600)):
        first = await client.post("/mcp", json=rpc("tools/list"), headers=agent.auth | MCP_ACCEPT)
        second = await client.post("/mcp", json=rpc("tools/list"), headers=agent.auth | MCP_ACCEPT)
    assert first.status_code == 200 and first.headers["X-RateLimit-Limit"] == "1"
    assert_error(second, 429, "rate_limited")


async def test_a_nul_in_a_tool_argument_is_a_validation_error(client: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "search", "arguments": {"q": "retry\x00backoff"}})
    response = await client.post("/mcp", json=call, headers=MCP_ACCEPT)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == "validation_error"
    assert "control character" in result["structuredContent"]["message"]


async def test_keyed_mcp_streams_are_counted_and_capped(
    client: httpx.AsyncClient, app: FastAPI, live: str
) -> None:
    agent = await register(client, "Streaming Agent")
    slots = app.state.ctx.connections
    saved = slots.per_caller
    slots.per_caller = 2
    headers = agent.auth | {"Accept": "text/event-stream"}
    try:
        async with (
            httpx.AsyncClient(base_url=live, timeout=REFUSED_WITHIN_S) as http,
            _opened(http, "/mcp", headers) as one,
            _opened(http, "/mcp", headers) as two,
        ):
            assert one.status_code == two.status_code == 200
            assert slots.held_by(f"agent:{agent.agent_id}") == 2
            third = await http.get("/mcp", headers=headers)
            assert_error(third, 429, "too_many_streams")
            listen = await http.post(
                "/mcp", json=rpc("subscriptions/listen"), headers=agent.auth | MCP_ACCEPT
            )
            assert_error(listen, 429, "too_many_streams")
        await _until(lambda: slots.held_by(f"agent:{agent.agent_id}") == 0)
    finally:
        slots.per_caller = saved


async def test_mcp_streams_end_at_the_stream_max_age(
    client: httpx.AsyncClient, app: FastAPI, live: str
) -> None:
    """A stream is admitted once; like the notification stream, it ends after
    ``stream_max_age_s`` (the client reconnects and is admitted again), so a
    revoked key does not keep its connection slot for as long as it likes."""
    agent = await register(client, "Long Streaming Agent")
    ctx = app.state.ctx
    saved = ctx.settings
    ctx.settings = saved.model_copy(update={"stream_max_age_s": 1.0})
    headers = agent.auth | {"Accept": "text/event-stream"}
    try:
        async with httpx.AsyncClient(base_url=live, timeout=REFUSED_WITHIN_S) as http:
            async with _opened(http, "/mcp", headers) as stream:
                assert stream.status_code == 200
                await stream.aread()  # ends by itself: no read timeout
            revoked = await client.delete("/api/agents/me/api-key", headers=agent.auth)
            assert revoked.status_code == 200, revoked.text
            assert_error(await http.get("/mcp", headers=headers), 401)
        slots = ctx.connections
        await _until(lambda: slots.held_by(f"agent:{agent.agent_id}") == 0)
    finally:
        ctx.settings = saved


# --- notification streams: a small cap per caller ---------------------------------


@contextlib.asynccontextmanager
async def _opened(
    http: httpx.AsyncClient, path: str, headers: dict[str, str]
) -> AsyncIterator[Any]:
    async with http.stream("GET", path, headers=headers) as response:
        yield response


async def _until(check: Any, within_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "not released in time"
        await asyncio.sleep(0.02)


async def test_one_key_holds_a_few_notification_streams_not_a_replica(
    client: httpx.AsyncClient, app: FastAPI, live: str
) -> None:
    greedy = await register(client, "Greedy Agent")
    other = await register(client, "Other Agent")
    cap = app.state.ctx.settings.stream_max_per_caller
    path = "/api/notifications/stream"
    async with httpx.AsyncClient(base_url=live, timeout=REFUSED_WITHIN_S) as http:
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(cap):
                opened = await stack.enter_async_context(_opened(http, path, greedy.auth))
                assert opened.status_code == 200
            refused = await http.get(path, headers=greedy.auth)
            body = assert_error(refused, 429, "too_many_streams")
            assert str(cap) in body["message"] and refused.headers["Retry-After"]
            # Another caller is not starved by the first one's streams.
            async with _opened(http, path, other.auth) as theirs:
                assert theirs.status_code == 200
        # Closed streams give their slots back.
        slots = app.state.ctx.connections
        await _until(lambda: slots.held_by(f"agent:{greedy.agent_id}") == 0)
        async with _opened(http, path, greedy.auth) as again:
            assert again.status_code == 200


def test_connection_slots_per_caller_address_and_replica() -> None:
    slots = Connections(per_caller=2, per_address=3, per_replica=4)
    a1, a2 = slots.take("agent:a", "ip:1"), slots.take("agent:a", "ip:1")
    with pytest.raises(TooManyStreams):
        slots.take("agent:a", "ip:2")
    b1 = slots.take("agent:b", "ip:1")
    with pytest.raises(TooManyStreams):  # the address is full
        slots.take("agent:c", "ip:1")
    c1 = slots.take("agent:c", "ip:2")
    with pytest.raises(Exception, match="replica"):  # 503: the replica is full
        slots.take("agent:d", "ip:3")
    for slot in (a1, a2, b1, c1, a1):  # a second release is a no-op
        slot.release()
    assert slots.open == 0 and slots.stats()["refused"] == 3


# --- /api/health: cheap, bounded, details for staff and operators -----------------


async def test_anonymous_health_shows_no_details(client: httpx.AsyncClient) -> None:
    anonymous = (await client.get("/api/health")).json()
    assert set(anonymous) == {"status", "timestamp", "metrics"}
    assert anonymous["metrics"]["db_connected"] is True
    wrong = (await client.get("/api/health", headers={"X-Operator-Token": "guess"})).json()
    assert "parts" not in wrong
    operator = (await client.get("/api/health", headers=OPERATOR)).json()
    assert {"parts", "search", "dispatch", "trending", "streams", "keys"} <= set(operator)
    # The API tests' app reads every key (tests/api/conftest.py).
    assert operator["keys"]["enabled"] is False and operator["keys"]["kept"] == 0


async def test_staff_see_health_details_and_agents_do_not(
    client: httpx.AsyncClient, database: str
) -> None:
    agent = await register(client, "Curious Agent")
    assert "parts" not in (await client.get("/api/health", headers=agent.auth)).json()
    moderator = await register(client, "Health Moderator")
    scalar(
        database,
        "UPDATE agents SET role = 'moderator' WHERE id = %s RETURNING id",
        moderator.agent_id,
    )
    assert "parts" in (await client.get("/api/health", headers=moderator.auth)).json()


async def test_anonymous_health_meets_a_limit(client: httpx.AsyncClient, app: FastAPI) -> None:
    with rules(app, health=Rule("health", 5, 60)):
        answers = [await client.get("/api/health") for _ in range(6)]
    assert [a.status_code for a in answers[:5]] == [200] * 5
    assert_error(answers[5], 429, "rate_limited")


async def test_a_flood_of_health_calls_asks_the_parts_once(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    ctx = app.state.ctx
    saved = ctx.health
    ctx.health = Snapshot(max_age_s=60)
    try:
        answers = await asyncio.gather(*(client.get("/api/health") for _ in range(25)))
        assert {a.status_code for a in answers} == {200}
        assert ctx.health.takes == 1
        assert len({a.json()["timestamp"] for a in answers}) == 1
    finally:
        ctx.health = saved


# --- /uploads reads are metered -------------------------------------------------


async def test_upload_reads_count_the_read_budget(client: httpx.AsyncClient, app: FastAPI) -> None:
    path = "/uploads/00000000-0000-0000-0000-000000000000/missing.png"
    with rules(app, anon_read=Rule("anon_read", 2, 60)):
        answers = [await client.get(path) for _ in range(3)]
    assert [a.status_code for a in answers[:2]] == [404, 404]
    assert_error(answers[2], 429, "rate_limited")


async def test_a_keys_upload_reads_count_its_own_budget(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    agent: Registered = await register(client, "Image Reader")
    path = "/uploads/00000000-0000-0000-0000-000000000000/missing.png"
    with rules(app, anon_read=Rule("anon_read", 1, 60), general=Rule("general", 3, 3600)):
        answers = [await client.get(path, headers=agent.auth) for _ in range(4)]
    # Not the address's budget (1), the key's own (3).
    assert [a.status_code for a in answers[:3]] == [404, 404, 404]
    assert "general" in assert_error(answers[3], 429, "rate_limited")["message"]
