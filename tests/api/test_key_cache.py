"""Verified API keys kept in the replica (serve_app/runtime/keycache.py) in the
app over real Postgres: a kept key answers reads without a key read; writes
always read; revocation, rotation and deactivation take effect at once in
this process, through Postgres's notices from any writer, and within the
TTL (CAIRN_KEY_CACHE_TTL_S) should the notices be lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg
import pytest

from serve_app.app import key_cache
from serve_app.kit import keys
from serve_app.runtime.keycache import KeyCache
from storage.db import libpq_url
from storage.repositories import api_keys as key_repo
from tests.api.conftest import assert_error, make_settings, register

DEADLINE_S = 10.0


def sql(database: str, statement: str, *params: Any) -> None:
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute(statement, params)


class KeyReads:
    """Counts the key checks that read Postgres (the real function runs)."""

    def __init__(self) -> None:
        self.count = 0


@pytest.fixture
def key_reads(monkeypatch: pytest.MonkeyPatch) -> KeyReads:
    reads = KeyReads()
    real = key_repo.live_row

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.count += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(key_repo, "live_row", counted)
    return reads


async def installed(client: httpx.AsyncClient, cache: KeyCache) -> AsyncIterator[KeyCache]:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.key_cache
    ctx.key_cache = cache
    cache.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not cache.listening:
            assert time.monotonic() < deadline, "the credential listener did not start"
            await asyncio.sleep(0.01)
        yield cache
    finally:
        ctx.key_cache = saved
        await cache.close()


@pytest.fixture
async def kept(client: httpx.AsyncClient, database: str) -> AsyncIterator[KeyCache]:
    """The app's key cache as the service runs it (settings' defaults, the
    credential listener on this database)."""
    settings = make_settings(key_cache_ttl_s=60)
    async for cache in installed(client, key_cache(settings, database)):
        yield cache


def without_notices(ttl_s: float) -> KeyCache:
    """A key cache that hears no notices from Postgres (as with a listener
    whose connection died without a word): only this process's own changes
    and the TTL end its entries."""
    settings = make_settings(key_cache_ttl_s=ttl_s)
    return KeyCache(settings.key_cache_ttl_s, settings.key_cache_size)


@pytest.fixture
async def deaf(client: httpx.AsyncClient) -> AsyncIterator[KeyCache]:
    """No notices, and the TTL set small."""
    async for made in installed(client, without_notices(1.5)):
        yield made


@pytest.fixture
async def local_only(client: httpx.AsyncClient) -> AsyncIterator[KeyCache]:
    """No notices, and the default TTL: what this process changes itself
    must reach its cache without them."""
    async for made in installed(client, without_notices(60)):
        yield made


async def until_status(
    client: httpx.AsyncClient, headers: dict[str, str], status: int, deadline_s: float
) -> float:
    """Seconds until GET /api/agents/me/api-key answers ``status``."""
    started = time.monotonic()
    while True:
        response = await client.get("/api/agents/me/api-key", headers=headers)
        if response.status_code == status:
            return time.monotonic() - started
        assert time.monotonic() - started < deadline_s, (response.status_code, response.text)
        await asyncio.sleep(0.02)


async def test_a_kept_key_answers_reads_without_a_key_read(
    client: httpx.AsyncClient, kept: KeyCache, key_reads: KeyReads
) -> None:
    agent = await register(client)
    for _ in range(5):
        response = await client.get("/api/agents/me/api-key", headers=agent.auth)
        assert response.status_code == 200
    assert key_reads.count == 1  # the first read only
    assert len(kept) == 1 and kept.hits == 4
    # What the cache holds is the keyed hash Postgres stores, never the key.
    (digest,) = list(kept._entries)
    assert digest == keys.hash_secret(client._transport.app.state.ctx.secret, agent.api_key)  # type: ignore[attr-defined]
    assert agent.api_key.encode() not in repr(kept._entries).encode()
    profile = await client.get(f"/api/agents/{agent.username}", headers=agent.auth)
    assert profile.status_code == 200
    assert key_reads.count == 1


async def test_writes_always_check_the_key_in_postgres(
    client: httpx.AsyncClient, kept: KeyCache, key_reads: KeyReads
) -> None:
    agent = await register(client)
    assert (await client.get("/api/agents/me", headers=agent.auth)).status_code == 200
    assert key_reads.count == 1
    patched = await client.patch(
        f"/api/agents/{agent.username}", headers=agent.auth, json={"bio": "kept keys"}
    )
    assert patched.status_code == 200
    assert key_reads.count == 2
    # GET /me reads the caller's row itself: a profile change shows at once
    # (whether or not the change's notice has reached the cache yet).
    me = await client.get("/api/agents/me", headers=agent.auth)
    assert me.json()["data"]["bio"] == "kept keys"


async def test_revoke_and_regenerate_take_effect_at_once(
    client: httpx.AsyncClient, local_only: KeyCache
) -> None:
    agent = await register(client)
    assert (await client.get("/api/agents/me", headers=agent.auth)).status_code == 200
    assert len(local_only) == 1
    new_key = (await client.post("/api/agents/me/api-key", headers=agent.auth)).json()["data"][
        "api_key"
    ]
    assert_error(await client.get("/api/agents/me", headers=agent.auth), 401, "invalid_api_key")
    fresh = {"Authorization": f"Bearer {new_key}"}
    assert (await client.get("/api/agents/me", headers=fresh)).status_code == 200
    assert (await client.get("/api/agents/me", headers=fresh)).status_code == 200
    assert (await client.delete("/api/agents/me/api-key", headers=fresh)).status_code == 200
    assert_error(await client.get("/api/agents/me", headers=fresh), 401, "invalid_api_key")


async def test_an_admin_deactivation_takes_effect_at_once(
    client: httpx.AsyncClient, local_only: KeyCache, database: str
) -> None:
    admin, user = await register(client, "Kept Admin"), await register(client, "Kept User")
    sql(database, "UPDATE agents SET role = 'admin' WHERE id = %s", admin.agent_id)
    assert (await client.get("/api/agents/me", headers=user.auth)).status_code == 200
    assert len(local_only) == 1
    off = await client.patch(
        "/api/admin",
        headers=admin.auth,
        json={"type": "user", "id": user.agent_id, "is_active": False},
    )
    assert off.status_code == 200, off.text
    assert_error(await client.get("/api/agents/me", headers=user.auth), 403, "account_inactive")


async def test_a_deleted_account_is_refused_at_once(
    client: httpx.AsyncClient, local_only: KeyCache
) -> None:
    agent = await register(client)
    assert (await client.get("/api/agents/me", headers=agent.auth)).status_code == 200
    gone = await client.delete(f"/api/agents/{agent.username}", headers=agent.auth)
    assert gone.status_code == 200, gone.text
    assert_error(await client.get("/api/agents/me", headers=agent.auth), 401, "invalid_api_key")
    assert len(local_only) == 0


async def test_a_deleted_named_key_is_refused_at_once(
    client: httpx.AsyncClient, local_only: KeyCache
) -> None:
    """Deleting one named key (issue 48) reaches this process's cache before
    the answer goes out; the agent's other keys keep working."""
    agent = await register(client)
    made = await client.post(
        "/api/agents/me/keys", json={"name": "bot", "scopes": ["read"]}, headers=agent.auth
    )
    named = made.json()["data"]
    auth = {"Authorization": f"Bearer {named['api_key']}"}
    assert (await client.get("/api/agents/me", headers=auth)).status_code == 200
    assert len(local_only) == 2  # the agent's default key (the POST) and the named one
    gone = await client.delete(f"/api/agents/me/keys/{named['key_id']}", headers=agent.auth)
    assert gone.status_code == 200
    assert_error(await client.get("/api/agents/me", headers=auth), 401, "invalid_api_key")
    assert (await client.get("/api/agents/me", headers=agent.auth)).status_code == 200


async def test_a_kept_key_is_refused_once_it_expires(
    client: httpx.AsyncClient, kept: KeyCache, database: str
) -> None:
    """An expiry sends no notice (nothing changes in the row when the time
    passes): a kept key is checked against its own expiry on every use."""
    agent = await register(client)
    made = await client.post(
        "/api/agents/me/keys",
        json={"name": "brief", "scopes": ["read"], "expires_in_days": 1},
        headers=agent.auth,
    )
    named = made.json()["data"]
    auth = {"Authorization": f"Bearer {named['api_key']}"}
    # Its end brought near (as if a day had passed; the expiry column sends
    # no notice), before its first use: the kept row carries this expiry.
    sql(
        database,
        "UPDATE api_keys SET expires_at = now() + interval '1 second' WHERE key_id = %s",
        named["key_id"],
    )
    assert (await client.get("/api/agents/me", headers=auth)).status_code == 200
    assert (await client.get("/api/agents/me", headers=auth)).status_code == 200
    assert kept.hits >= 1
    started = time.monotonic()
    while (await client.get("/api/agents/me", headers=auth)).status_code == 200:
        assert time.monotonic() - started < DEADLINE_S, "an expired key was still answered"
        await asyncio.sleep(0.05)
    # Refused at its expiry, long before the cache's TTL (60 s) would end it.
    assert time.monotonic() - started < 2.0
    assert_error(await client.get("/api/agents/me", headers=auth), 401, "invalid_api_key")


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE agents SET is_active = false WHERE id = %s",
        "UPDATE api_keys SET revoked_at = now() WHERE agent_id = %s",
    ],
)
async def test_a_change_by_another_writer_arrives_through_postgres(
    client: httpx.AsyncClient, kept: KeyCache, database: str, change: str
) -> None:
    """Another replica, the CLI or an operator's SQL: this process hears of
    it from Postgres, within milliseconds, long before the TTL (60 s)."""
    agent = await register(client)
    assert (await client.get("/api/agents/me/api-key", headers=agent.auth)).status_code == 200
    assert len(kept) == 1
    sql(database, change, agent.agent_id)
    took = await until_status(client, agent.auth, 401 if "api_keys" in change else 403, 5.0)
    assert took < 5.0


async def test_without_notices_a_revocation_takes_effect_within_the_ttl(
    client: httpx.AsyncClient, deaf: KeyCache, database: str
) -> None:
    """The bound when no notice arrives: the key stops working no later than
    CAIRN_KEY_CACHE_TTL_S after it was read (here 1.5 s)."""
    agent = await register(client)
    read_at = time.monotonic()
    assert (await client.get("/api/agents/me/api-key", headers=agent.auth)).status_code == 200
    sql(database, "UPDATE api_keys SET revoked_at = now() WHERE agent_id = %s", agent.agent_id)
    # Still answered from the cache (that is the bound, not a leak)...
    assert (await client.get("/api/agents/me/api-key", headers=agent.auth)).status_code == 200
    # ...until the TTL has run out, and never after.
    await until_status(client, agent.auth, 401, DEADLINE_S)
    assert time.monotonic() - read_at < deaf.ttl_s + 0.5
    assert time.monotonic() - read_at >= deaf.ttl_s * 0.9
    # A write never used the kept key: it is refused at once.
    assert_error(await client.post("/api/agents/me/api-key", headers=agent.auth), 401)


async def test_failed_keys_fill_nothing(
    client: httpx.AsyncClient, kept: KeyCache, key_reads: KeyReads, database: str
) -> None:
    agent = await register(client)
    # Well-formed keys nobody holds, and a real key's id with a wrong secret.
    forged = [keys.generate_key().key for _ in range(200)]
    forged.append(agent.api_key[:-4] + ("AAAA" if not agent.api_key.endswith("AAAA") else "BBBB"))
    for key in forged:
        response = await client.get("/api/agents/me", headers={"Authorization": f"Bearer {key}"})
        assert_error(response, 401, "invalid_api_key")
    assert len(kept) == 0 and key_reads.count == len(forged)
    # A deactivated agent's good key is not kept either: reactivation is at once.
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", agent.agent_id)
    assert_error(await client.get("/api/agents/me", headers=agent.auth), 403, "account_inactive")
    assert len(kept) == 0
    sql(database, "UPDATE agents SET is_active = true WHERE id = %s", agent.agent_id)
    assert (await client.get("/api/agents/me", headers=agent.auth)).status_code == 200


async def test_the_cache_is_bounded(
    client: httpx.AsyncClient, roomy_registration: None, database: str
) -> None:
    settings = make_settings(key_cache_ttl_s=60, key_cache_size=3)
    async for cache in installed(client, key_cache(settings, database)):
        agents = [await register(client, f"Bounded {i}") for i in range(5)]
        for agent in agents:
            assert (await client.get("/api/agents/me", headers=agent.auth)).status_code == 200
        assert len(cache) == 3


MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


async def mcp_call(
    client: httpx.AsyncClient, headers: dict[str, str], name: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    """One ``tools/call`` as one HTTP request to /mcp (the server is stateless)."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    response = await client.post("/mcp", json=call, headers={**MCP_HEADERS, **headers})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    assert not result.get("isError"), result
    return result


async def test_a_keyed_mcp_call_checks_its_key_once(
    client: httpx.AsyncClient, key_reads: KeyReads
) -> None:
    """The edge identifies the caller of a /mcp request; the tool call inside
    reuses it (identity.identify) rather than reading the key again."""
    agent = await register(client)
    for n, name in enumerate(("my_profile", "list_notifications", "my_profile"), start=1):
        await mcp_call(client, agent.auth, name, {})
        assert key_reads.count == n, name  # one key read per call, without a cache
    await mcp_call(
        client,
        agent.auth,
        "ask_question",
        {"title": "How do agents page a large table?", "body": "Offsets are slow; what else?"},
    )
    assert key_reads.count == 4  # a write's key is read in Postgres, once


async def test_a_keyed_mcp_read_is_answered_by_the_key_cache(
    client: httpx.AsyncClient, kept: KeyCache, key_reads: KeyReads
) -> None:
    agent = await register(client)
    await mcp_call(client, agent.auth, "my_profile", {})
    assert key_reads.count == 1  # the first read fills the cache
    for _ in range(3):
        await mcp_call(client, agent.auth, "my_profile", {})
        await mcp_call(client, agent.auth, "search", {"q": "paging"})
    assert key_reads.count == 1  # read tool calls: cache hits, no key read
    await mcp_call(
        client,
        agent.auth,
        "ask_question",
        {"title": "How do agents page a large table?", "body": "Offsets are slow; what else?"},
    )
    assert key_reads.count == 2  # a write tool call reads its key in Postgres
