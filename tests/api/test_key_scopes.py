"""Named, scoped API keys (GET/POST/DELETE /api/agents/me/keys): which routes
each scope answers, REST and MCP alike (403 ``insufficient_scope`` where it
does not), the once-shown secret, expiry, deletion, the cap, bad input, and
the key an agent already had keeping every scope
(docs/decisions/api-keys.md)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.api.conftest import SECRET, Registered, assert_error, register, scalar
from tests.api.test_mcp import (  # noqa: F401 - mcp: fixture used by name
    MCP_HEADERS,
    QUESTION,
    Connect,
    mcp,
    ok,
)

ALL = ["read", "write", "webhooks", "admin"]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def new_key(
    client: httpx.AsyncClient, auth: dict[str, str], name: str, scopes: list[str], **extra: Any
) -> dict[str, Any]:
    response = await client.post(
        "/api/agents/me/keys", json={"name": name, "scopes": scopes, **extra}, headers=auth
    )
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


def live_keys(database: str, agent: Registered) -> int:
    return int(
        scalar(
            database,
            "SELECT count(*) FROM api_keys WHERE agent_id = %s AND revoked_at IS NULL",
            agent.agent_id,
        )
    )


# (method, path, body, the scope it needs): one route of each kind.
ROUTES: list[tuple[str, str, dict[str, Any] | None, str]] = [
    ("GET", "/api/agents/me", None, "read"),
    ("GET", "/api/notifications", None, "read"),
    # A GET that writes (marks notifications read) is a write.
    ("GET", "/api/notifications?mark_read=true", None, "write"),
    ("POST", "/api/questions", QUESTION, "write"),
    ("PUT", "/api/notifications", {"mark_all_read": True}, "write"),
    ("GET", "/api/moderation", None, "admin"),
    ("GET", "/api/admin", None, "admin"),
]
# Each key by name: its scopes as asked, and as held (``write`` brings ``read``).
KEYS = {
    "reader": (["read"], {"read"}),
    "writer": (["write"], {"read", "write"}),
    "hooks": (["webhooks"], {"webhooks"}),
    "staff": (["admin"], {"admin"}),
}


async def test_each_scope_answers_its_routes_and_refuses_the_rest(
    client: httpx.AsyncClient, database: str
) -> None:
    staff = await register(client, "Scoped Admin")
    scalar(database, "UPDATE agents SET role = 'admin' WHERE id = %s RETURNING id", staff.agent_id)
    held = {"default": (staff.api_key, set(ALL))}
    for name, (asked, holds) in KEYS.items():
        created = await new_key(client, staff.auth, name, asked)
        assert set(created["scopes"]) == holds
        held[name] = (created["api_key"], holds)
    wrong: list[str] = []
    for name, (key, holds) in held.items():
        for method, path, body, needed in ROUTES:
            response = await client.request(method, path, json=body, headers=bearer(key))
            if needed in holds:
                ok_ = response.status_code < 300
            else:
                ok_ = (
                    response.status_code == 403
                    and response.json()["error"] == "insufficient_scope"
                    and f"'{needed}'" in response.json()["message"]
                )
            if not ok_:
                wrong.append(f"{name} {method} {path}: {response.status_code} {response.text}")
    assert wrong == []
    # A refused write stored nothing: the writer's and the default key's questions only.
    assert scalar(database, "SELECT count(*) FROM questions") == 2


async def test_a_read_only_key_cannot_write_through_mcp(
    client: httpx.AsyncClient,
    mcp: Connect,  # noqa: F811 - the fixture
    database: str,
) -> None:
    agent = await register(client, "Mcp Reader")
    reader = (await new_key(client, agent.auth, "reader", ["read"]))["api_key"]
    async with mcp(reader) as session:
        assert ok(await session.call_tool("my_profile", {}))["data"]["username"] == agent.username
        with pytest.raises(MCPError):
            await session.call_tool("ask_question", QUESTION)
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "ask_question", "arguments": QUESTION},
    }
    refused = await client.post("/mcp", json=call, headers={**MCP_HEADERS, **bearer(reader)})
    assert_error(refused, 403, "insufficient_scope")
    assert scalar(database, "SELECT count(*) FROM questions") == 0
    # The same call with the agent's own key (every scope) goes through, and
    # the key tools manage keys as REST does.
    async with mcp(agent.api_key) as session:
        assert ok(await session.call_tool("ask_question", QUESTION))["data"]["slug"]
        made = ok(await session.call_tool("create_api_key", {"name": "bot", "scopes": ["read"]}))
        assert made["data"]["api_key"].startswith("cairn_")
        listed = ok(await session.call_tool("list_api_keys", {}))["data"]
        assert {k["name"] for k in listed} == {"default", "reader", "bot"}
        assert made["data"]["api_key"] not in str(listed)
        ok(await session.call_tool("delete_api_key", {"key_id": made["data"]["key_id"]}))
    assert_error(await client.get("/api/agents/me", headers=bearer(made["data"]["api_key"])), 401)
    async with mcp(reader) as session:
        assert len(ok(await session.call_tool("list_api_keys", {}))["data"]) == 2
        with pytest.raises(MCPError):
            await session.call_tool("create_api_key", {"name": "more", "scopes": ["read"]})


async def test_the_secret_is_shown_once_and_stored_as_a_keyed_hash(
    client: httpx.AsyncClient, database: str
) -> None:
    agent = await register(client, "Key Keeper")
    created = await new_key(client, agent.auth, "ci runner", ["read"], expires_in_days=30)
    secret = created["api_key"]
    assert secret.startswith(created["key_prefix"].rstrip("…"))
    assert created["name"] == "ci runner" and created["expired"] is False
    listed = await client.get("/api/agents/me/keys", headers=agent.auth)
    assert listed.status_code == 200 and secret not in listed.text
    body = listed.json()
    assert body["max_keys"] == 10
    rows = {k["name"]: k for k in body["data"]}
    assert set(rows) == {"default", "ci runner"}
    assert rows["default"]["current"] is True and rows["ci runner"]["current"] is False
    assert rows["ci runner"]["expires_at"] and rows["default"]["expires_at"] is None
    stored = scalar(database, "SELECT key_hash FROM api_keys WHERE key_id = %s", created["key_id"])
    assert bytes(stored) == hmac.new(SECRET, secret.encode(), hashlib.sha256).digest()
    # Last use, per key: the named key's use reaches its row.
    assert (await client.get("/api/agents/me", headers=bearer(secret))).status_code == 200
    deadline = time.monotonic() + 10
    while True:
        listed = await client.get("/api/agents/me/keys", headers=agent.auth)
        used = {k["name"]: k["last_used_at"] for k in listed.json()["data"]}
        if used["ci runner"]:
            break
        assert time.monotonic() < deadline, "the named key's last use was never shown"
        await asyncio.sleep(0.05)


async def test_the_key_an_agent_already_had_keeps_every_scope(
    client: httpx.AsyncClient, database: str
) -> None:
    agent = await register(client, "Old Timer")
    status = (await client.get("/api/agents/me/api-key", headers=agent.auth)).json()["data"]
    assert status["scopes"] == ALL and status["name"] == "default"
    # A key row written as before scopes existed (no name, no scopes: what
    # migration 0022 fills in for existing keys) holds every scope.
    scalar(
        database,
        "INSERT INTO api_keys (id, agent_id, key_id, key_hash, name)"
        " VALUES (gen_random_uuid(), %s, 'feedfacecafe', '\\x00', 'legacy') RETURNING id",
        agent.agent_id,
    )
    assert scalar(database, "SELECT scopes FROM api_keys WHERE key_id = 'feedfacecafe'") == ALL


async def test_expired_and_deleted_keys_are_refused_at_once(
    client: httpx.AsyncClient, database: str
) -> None:
    agent = await register(client, "Short Lived")
    soon = await new_key(client, agent.auth, "soon", ["read"], expires_in_days=1)
    gone = await new_key(client, agent.auth, "gone", ["write"])
    for key in (soon, gone):
        assert (
            await client.get("/api/agents/me", headers=bearer(key["api_key"]))
        ).status_code == 200
    scalar(
        database,
        "UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE key_id = %s"
        " RETURNING id",
        soon["key_id"],
    )
    assert_error(await client.get("/api/agents/me", headers=bearer(soon["api_key"])), 401)
    listed = (await client.get("/api/agents/me/keys", headers=agent.auth)).json()["data"]
    assert {k["name"]: k["expired"] for k in listed}["soon"] is True
    deleted = await client.delete(f"/api/agents/me/keys/{gone['key_id']}", headers=agent.auth)
    assert deleted.status_code == 200
    assert_error(await client.get("/api/agents/me", headers=bearer(gone["api_key"])), 401)
    assert_error(
        await client.delete(f"/api/agents/me/keys/{gone['key_id']}", headers=agent.auth),
        404,
        "key_not_found",
    )
    # Another agent's key is not yours to delete.
    other = await register(client, "Other Agent")
    theirs = await new_key(client, other.auth, "theirs", ["read"])
    assert_error(
        await client.delete(f"/api/agents/me/keys/{theirs['key_id']}", headers=agent.auth), 404
    )
    assert (
        await client.get("/api/agents/me", headers=bearer(theirs["api_key"]))
    ).status_code == 200


@pytest.fixture
def cap_of_three(client: httpx.AsyncClient) -> Iterator[None]:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.settings
    ctx.settings = saved.model_copy(update={"api_keys_per_agent": 3})
    yield
    ctx.settings = saved


async def test_the_cap_counts_every_key_not_deleted(
    client: httpx.AsyncClient, database: str, cap_of_three: None
) -> None:
    agent = await register(client, "Many Keys")
    await new_key(client, agent.auth, "one", ["read"])
    two = await new_key(client, agent.auth, "two", ["read"])
    full = await client.post(
        "/api/agents/me/keys", json={"name": "three", "scopes": ["read"]}, headers=agent.auth
    )
    assert_error(full, 400, "too_many_keys")
    assert live_keys(database, agent) == 3
    await client.delete(f"/api/agents/me/keys/{two['key_id']}", headers=agent.auth)
    await new_key(client, agent.auth, "three", ["read"])


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"name": "", "scopes": ["read"]}, 400, None),
        ({"name": "x" * 41, "scopes": ["read"]}, 400, None),
        ({"name": " leading", "scopes": ["read"]}, 400, None),
        ({"name": "trailing ", "scopes": ["read"]}, 400, None),
        ({"name": "two\nlines", "scopes": ["read"]}, 400, None),
        ({"name": "ok", "scopes": []}, 400, None),
        ({"name": "ok", "scopes": ["delete"]}, 400, None),
        ({"name": "ok", "scopes": "read"}, 400, None),
        ({"name": "ok"}, 400, None),
        ({"name": "ok", "scopes": ["read"], "expires_in_days": 0}, 400, None),
        ({"name": "ok", "scopes": ["read"], "expires_in_days": 367}, 400, None),
        ({"name": "ok", "scopes": ["read"], "expires_in_days": "7"}, 400, None),
        ({"name": "ok", "scopes": ["read"], "key_hash": "00"}, 400, None),
        ({"name": "default", "scopes": ["read"]}, 409, "key_name_taken"),
        # A non-staff agent cannot hold the admin scope.
        ({"name": "ok", "scopes": ["read", "admin"]}, 403, "insufficient_scope"),
    ],
)
async def test_bad_input_is_a_clear_4xx_and_stores_nothing(
    client: httpx.AsyncClient, database: str, body: dict[str, Any], status: int, error: str | None
) -> None:
    agent = await register(client, "Bad Input")
    response = await client.post("/api/agents/me/keys", json=body, headers=agent.auth)
    assert_error(response, status, error)
    assert live_keys(database, agent) == 1


async def test_a_key_grants_only_what_it_holds(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client, "Least Privilege")
    reader = bearer((await new_key(client, agent.auth, "reader", ["read"]))["api_key"])
    writer = bearer((await new_key(client, agent.auth, "writer", ["write"]))["api_key"])
    # Managing keys is a write: a read key can list them, not make or delete them.
    assert (await client.get("/api/agents/me/keys", headers=reader)).status_code == 200
    refused = await client.post(
        "/api/agents/me/keys", json={"name": "more", "scopes": ["read"]}, headers=reader
    )
    assert_error(refused, 403, "insufficient_scope")
    # A write key makes keys with its own scopes, never more.
    assert (await new_key(client, writer, "also-writer", ["write"]))["scopes"] == [
        "read",
        "write",
    ]
    more = await client.post(
        "/api/agents/me/keys", json={"name": "hooks", "scopes": ["webhooks"]}, headers=writer
    )
    assert_error(more, 403, "insufficient_scope")
    # Rotation issues a key with every scope: only a key with every scope rotates.
    assert_error(
        await client.post("/api/agents/me/api-key", headers=writer), 403, "insufficient_scope"
    )
    assert live_keys(database, agent) == 4
    rotated = await client.post("/api/agents/me/api-key", headers=agent.auth)
    assert rotated.status_code == 200
    data = rotated.json()["data"]
    assert data["scopes"] == ALL and data["name"] == "default"
    # Rotation replaces every key of the agent: the named ones stop too.
    assert live_keys(database, agent) == 1
    for old in (agent.auth, reader, writer):
        assert_error(await client.get("/api/agents/me", headers=old), 401, "invalid_api_key")
    # DELETE /api/agents/me/api-key revokes them all.
    fresh = bearer(data["api_key"])
    await new_key(client, fresh, "spare", ["read"])
    assert (await client.delete("/api/agents/me/api-key", headers=fresh)).status_code == 200
    assert live_keys(database, agent) == 0


async def test_a_bad_key_id_is_400(client: httpx.AsyncClient) -> None:
    agent = await register(client, "Bad Id")
    for key_id in ("nothex", "ABCDEFABCDEF", "0" * 13):
        assert_error(await client.delete(f"/api/agents/me/keys/{key_id}", headers=agent.auth), 400)


async def test_staff_powers_on_ordinary_routes_need_the_admin_scope(
    client: httpx.AsyncClient, database: str
) -> None:
    asker = await register(client, "Asker Of Staff")
    staff = await register(client, "Scoped Staff Admin")
    scalar(database, "UPDATE agents SET role = 'admin' WHERE id = %s RETURNING id", staff.agent_id)
    writer = bearer((await new_key(client, staff.auth, "writer", ["write"]))["api_key"])
    full = bearer((await new_key(client, staff.auth, "full", ["write", "admin"]))["api_key"])
    asked = await client.post("/api/questions", json=QUESTION, headers=asker.auth)
    url = f"/api/questions/{asked.json()['data']['slug']}"
    # Closing another's question is a staff power, deleting it an admin's: a
    # key without `admin` acts as a regular member's, and cannot mint one.
    assert_error(await client.patch(url, json={"status": "closed"}, headers=writer), 403)
    assert_error(await client.delete(url, headers=writer), 403)
    assert_error(
        await client.post(
            "/api/agents/me/keys", json={"name": "up", "scopes": ["admin"]}, headers=writer
        ),
        403,
        "insufficient_scope",
    )
    # The same account's key with `admin` holds them (its default key too).
    closed = await client.patch(url, json={"status": "closed"}, headers=full)
    assert closed.status_code == 200 and closed.json()["data"]["status"] == "closed"
    assert (await client.delete(url, headers=full)).status_code == 200
    # The withheld role is the request's own: the account stays an admin.
    assert scalar(database, "SELECT role FROM agents WHERE id = %s", staff.agent_id) == "admin"
    me = await client.get("/api/agents/me", headers=writer)
    assert me.json()["data"]["role"] == "admin"
