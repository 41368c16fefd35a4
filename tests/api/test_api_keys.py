"""GET/POST/DELETE /api/agents/me/api-key and authentication failures."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import httpx
import psycopg
import pytest

from storage.db import libpq_url
from storage.repositories import api_keys as key_repo
from tests.api.conftest import assert_error, register, scalar


async def test_status_shows_prefix_never_the_key(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    response = await client.get("/api/agents/me/api-key", headers=agent.auth)
    assert response.status_code == 200
    data = response.json()["data"]
    assert data["has_key"] is True
    assert agent.api_key not in response.text
    assert agent.api_key.startswith(data["key_prefix"].rstrip("…"))
    assert data["created_at"] and data["last_used_at"]


async def test_regenerate_replaces_old_key_at_once(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    response = await client.post("/api/agents/me/api-key", headers=agent.auth)
    assert response.status_code == 200
    new_key = response.json()["data"]["api_key"]
    assert new_key != agent.api_key
    assert_error(await client.get("/api/agents/me", headers=agent.auth), 401)
    me = await client.get("/api/agents/me", headers={"Authorization": f"Bearer {new_key}"})
    assert me.status_code == 200 and me.json()["data"]["username"] == agent.username


async def test_revoke_makes_key_401(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client)
    response = await client.delete("/api/agents/me/api-key", headers=agent.auth)
    assert response.status_code == 200 and response.json()["message"]
    assert_error(await client.get("/api/agents/me", headers=agent.auth), 401, "invalid_api_key")
    with psycopg.connect(libpq_url(database)) as conn:
        live = conn.execute("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL").fetchone()
    assert live == (0,)


async def test_concurrent_regenerations_leave_one_live_key(
    client: httpx.AsyncClient, database: str
) -> None:
    agent = await register(client)
    results = await asyncio.gather(
        *[client.post("/api/agents/me/api-key", headers=agent.auth) for _ in range(5)]
    )
    assert all(r.status_code in (200, 401) for r in results), [r.text for r in results]
    with psycopg.connect(libpq_url(database)) as conn:
        live = conn.execute("SELECT count(*) FROM api_keys WHERE revoked_at IS NULL").fetchone()
    assert live == (1,)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Bearer ",
        "Basic abc",
        "Bearer cairn_000000000000_" + "A" * 43,
        "Bearer not-a-key",
        "Bearer " + "x" * 5000,
        "bearer cairn_zz",
    ],
)
async def test_missing_or_invalid_key_is_401(client: httpx.AsyncClient, header: str | None) -> None:
    headers = {"Authorization": header} if header is not None else {}
    assert_error(await client.get("/api/agents/me", headers=headers), 401)


async def test_key_with_wrong_secret_part_is_401(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    tampered = agent.api_key[:-1] + ("A" if agent.api_key[-1] != "A" else "B")
    assert_error(
        await client.get("/api/agents/me", headers={"Authorization": f"Bearer {tampered}"}), 401
    )


async def test_inactive_account_is_403(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client)
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute("UPDATE agents SET is_active = false WHERE id = %s", (agent.agent_id,))
    assert_error(await client.get("/api/agents/me", headers=agent.auth), 403, "account_inactive")


async def test_general_limit_counts_authenticated_calls(
    client: httpx.AsyncClient, app: object
) -> None:
    from actors.ratelimit import Rule

    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    ctx.rules = {**ctx.rules, "general": Rule("general", 3, 3600)}
    try:
        agent = await register(client)
        codes = [
            (await client.get("/api/agents/me", headers=agent.auth)).status_code for _ in range(4)
        ]
        assert codes == [200, 200, 200, 429]
        # Unauthenticated reads are not counted against the agent.
        assert (await client.get(f"/api/agents/{agent.username}")).status_code == 200
    finally:
        from serve_app.settings import Settings

        ctx.rules = Settings().rules()


async def test_last_use_reaches_postgres_in_the_next_batch(
    client: httpx.AsyncClient, database: str
) -> None:
    """A key's use is recorded without the request waiting for the write
    (serve_app/runtime/lastuse.py), and reaches Postgres within a period."""
    agent = await register(client)
    query = "SELECT last_used_at FROM api_keys WHERE agent_id = %s AND revoked_at IS NULL"
    response = await client.get("/api/agents/me/api-key", headers=agent.auth)
    shown = response.json()["data"]["last_used_at"]
    assert shown
    deadline = time.monotonic() + 10
    while (stored := scalar(database, query, agent.agent_id)) is None:
        assert time.monotonic() < deadline, "the last use never reached Postgres"
        await asyncio.sleep(0.05)
    # A batch that arrives late never moves the time back.
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    key_pk = scalar(database, "SELECT id FROM api_keys WHERE agent_id = %s", agent.agent_id)
    async with ctx.read_sessions() as session:
        changed = await key_repo.record_use(session, [(key_pk, stored - timedelta(minutes=5))])
    assert changed == 0
    assert scalar(database, query, agent.agent_id) == stored
