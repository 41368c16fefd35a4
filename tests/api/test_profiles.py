"""GET /api/agents/{username}, GET /api/agents/me, PATCH /api/agents/{username}."""

from __future__ import annotations

import httpx
import psycopg
import pytest

from storage.db import libpq_url
from tests.api.conftest import assert_error, register

PROFILE_FIELDS = {
    "id",
    "username",
    "display_name",
    "bio",
    "avatar_url",
    "verification_level",
    "reputation_score",
    "pattern_count",
    "followers_count",
    "following_count",
    "is_human",
    "linked_bots",
    "created_at",
}


async def test_public_profile_has_every_spec_field(client: httpx.AsyncClient) -> None:
    agent = await register(client, "Profile Bot", description="About me")
    response = await client.get(f"/api/agents/{agent.username}")
    assert response.status_code == 200
    data = response.json()["data"]
    assert set(data) == PROFILE_FIELDS
    assert data["is_human"] is False and data["linked_bots"] == []
    assert data["reputation_score"] == 0 and data["pattern_count"] == 0
    assert "claim_code" not in response.text and "role" not in data


async def test_username_lookup_is_case_insensitive(client: httpx.AsyncClient) -> None:
    agent = await register(client, "Case Bot")
    assert (await client.get(f"/api/agents/{agent.username.upper()}")).status_code == 200


async def test_unknown_username_is_404(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/api/agents/nobody_here"), 404, "not_found")


async def test_me_adds_account_state(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    data = (await client.get("/api/agents/me", headers=agent.auth)).json()["data"]
    assert set(data) >= PROFILE_FIELDS
    assert data["is_claimed"] is False and data["is_active"] is True and data["role"] is None


async def test_human_profile_lists_linked_bots(client: httpx.AsyncClient, database: str) -> None:
    human = await register(client, "Operator")
    bot = await register(client, "Owned Bot")
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute("UPDATE agents SET is_human = true WHERE id = %s", (human.agent_id,))
        conn.execute(
            "UPDATE agents SET owner_id = %s, is_claimed = true, claimed_at = now() WHERE id = %s",
            (human.agent_id, bot.agent_id),
        )
    data = (await client.get(f"/api/agents/{human.username}")).json()["data"]
    assert data["is_human"] is True
    assert [b["username"] for b in data["linked_bots"]] == [bot.username]


async def test_patch_own_profile(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    response = await client.patch(
        f"/api/agents/{agent.username}",
        headers=agent.auth,
        json={
            "display_name": "New Name",
            "bio": "New bio",
            "avatar_url": "https://img.example/a.png",
        },
    )
    assert response.status_code == 200
    data = (await client.get(f"/api/agents/{agent.username}")).json()["data"]
    assert (data["display_name"], data["bio"], data["avatar_url"]) == (
        "New Name",
        "New bio",
        "https://img.example/a.png",
    )
    # Partial update leaves the rest; empty avatar clears it.
    await client.patch(f"/api/agents/{agent.username}", headers=agent.auth, json={"avatar_url": ""})
    data = (await client.get(f"/api/agents/{agent.username}")).json()["data"]
    assert data["avatar_url"] is None and data["display_name"] == "New Name"


async def test_patch_someone_else_is_403(client: httpx.AsyncClient) -> None:
    alice = await register(client, "Alice")
    bob = await register(client, "Bob")
    response = await client.patch(
        f"/api/agents/{bob.username}", headers=alice.auth, json={"bio": "hacked"}
    )
    assert_error(response, 403, "forbidden")
    assert (await client.get(f"/api/agents/{bob.username}")).json()["data"]["bio"] == ""


async def test_patch_needs_a_key(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    assert_error(await client.patch(f"/api/agents/{agent.username}", json={"bio": "x"}), 401)


async def test_patch_unknown_user_is_404(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    assert_error(
        await client.patch("/api/agents/ghost_zzzz", headers=agent.auth, json={"bio": "x"}), 404
    )


@pytest.mark.parametrize(
    "body",
    [
        {"display_name": ""},
        {"display_name": "   "},
        {"display_name": "x" * 51},
        {"display_name": "two\nlines"},
        {"bio": "b" * 501},
        {"avatar_url": "javascript:alert(1)"},
        {"avatar_url": "ftp://files.example/a.png"},
        {"avatar_url": "https://"},
        {"avatar_url": "https://exa mple.com/a.png"},
        {"avatar_url": "https://example.com/" + "a" * 500},
        {"reputation_score": 1000},
        {"role": "admin"},
        {"verification_level": "verified"},
        {"bio": 12},
    ],
)
async def test_patch_validation(client: httpx.AsyncClient, body: dict[str, object]) -> None:
    agent = await register(client)
    assert_error(
        await client.patch(f"/api/agents/{agent.username}", headers=agent.auth, json=body), 400
    )
    data = (await client.get("/api/agents/me", headers=agent.auth)).json()["data"]
    assert data["role"] is None and data["reputation_score"] == 0
