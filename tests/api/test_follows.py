"""Follows, follower lists and the personal feed (real Postgres, in process)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.api.conftest import Registered, assert_error, register, scalar
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import ask


async def follow(client: httpx.AsyncClient, who: Registered, whom: Registered) -> httpx.Response:
    return await client.post(f"/api/agents/{whom.username}/follow", headers=who.auth)


async def counts(client: httpx.AsyncClient, agent: Registered) -> tuple[int, int]:
    data = (await client.get(f"/api/agents/{agent.username}")).json()["data"]
    return data["followers_count"], data["following_count"]


async def names(client: httpx.AsyncClient, path: str) -> list[str]:
    body = (await client.get(path)).json()
    return [a["username"] for a in body["data"]]


async def test_follow_and_unfollow(client: httpx.AsyncClient) -> None:
    alice = await register(client, "Alice")
    bob = await register(client, "Bob")
    r = await follow(client, alice, bob)
    assert r.status_code == 201, r.text
    assert r.json()["data"] == {"username": bob.username, "following": True, "followers_count": 1}
    again = await follow(client, alice, bob)
    assert again.status_code == 200 and again.json()["data"]["followers_count"] == 1
    assert await counts(client, bob) == (1, 0)
    assert await counts(client, alice) == (0, 1)

    r = await client.delete(f"/api/agents/{bob.username}/follow", headers=alice.auth)
    assert r.status_code == 200 and r.json()["data"]["followers_count"] == 0
    r = await client.delete(f"/api/agents/{bob.username}/follow", headers=alice.auth)
    assert r.status_code == 200 and r.json()["data"]["following"] is False
    assert await counts(client, bob) == (0, 0) and await counts(client, alice) == (0, 0)

    assert_error(await follow(client, alice, alice), 400, "self_follow")
    assert_error(await client.post(f"/api/agents/{bob.username}/follow"), 401)
    assert_error(await client.post("/api/agents/nobody_here/follow", headers=alice.auth), 404)
    assert_error(await client.delete("/api/agents/nobody_here/follow", headers=alice.auth), 404)


async def test_follower_lists(client: httpx.AsyncClient, database: str) -> None:
    star = await register(client, "Star")
    fans = [await register(client, f"Fan {i}") for i in range(3)]
    for fan in fans:
        assert (await follow(client, fan, star)).status_code == 201
    assert (await follow(client, star, fans[0])).status_code == 201

    body = (await client.get(f"/api/agents/{star.username}/followers")).json()
    assert [a["username"] for a in body["data"]] == [f.username for f in reversed(fans)]
    item = body["data"][0]
    for field in ("id", "display_name", "bio", "avatar_url", "verification_level"):
        assert field in item
    assert item["reputation_score"] == 0 and item["following_count"] == 1
    assert item["followed_at"] is not None
    assert body["pagination"] == {
        "page": 1,
        "limit": 20,
        "total": 3,
        "total_pages": 1,
        "has_more": False,
    }
    page = (await client.get(f"/api/agents/{star.username}/followers?limit=2&page=2")).json()
    assert [a["username"] for a in page["data"]] == [fans[0].username]
    assert page["pagination"]["total_pages"] == 2
    assert await names(client, f"/api/agents/{star.username}/following") == [fans[0].username]
    assert await names(client, f"/api/agents/{fans[1].username}/following") == [star.username]

    # A deactivated follower drops out of the lists.
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", fans[2].agent_id)
    followers = await names(client, f"/api/agents/{star.username}/followers")
    assert followers == [fans[1].username, fans[0].username]
    assert_error(await client.get("/api/agents/nobody_here/followers"), 404)
    assert_error(await client.get(f"/api/agents/{star.username}/following?limit=51"), 400)


async def test_counts_stay_true_under_concurrent_follows(
    client: httpx.AsyncClient, database: str, roomy_registration: None
) -> None:
    agents = [await register(client, f"Agent {i}") for i in range(8)]
    # Everyone follows everyone at once (pairs in both directions), twice.
    pairs = [(a, b) for a in agents for b in agents if a is not b]
    responses = await asyncio.gather(*(follow(client, a, b) for a, b in pairs + pairs[::3]))
    assert all(r.status_code in (200, 201) for r in responses)
    for agent in agents:
        assert await counts(client, agent) == (7, 7)
    unfollows = [
        client.delete(f"/api/agents/{b.username}/follow", headers=a.auth)
        for a in agents[:4]
        for b in agents
        if a is not b
    ]
    assert all(r.status_code == 200 for r in await asyncio.gather(*unfollows))
    mismatched = scalar(
        database,
        "SELECT count(*) FROM agents a WHERE "
        "a.followers_count <> (SELECT count(*) FROM follows WHERE followee_id = a.id) OR "
        "a.following_count <> (SELECT count(*) FROM follows WHERE follower_id = a.id)",
    )
    assert mismatched == 0
    assert await counts(client, agents[0]) == (4, 0)  # agents 4-7 still follow


async def test_personal_feed(client: httpx.AsyncClient, database: str) -> None:
    reader = await register(client, "Reader")
    a = await register(client, "Author A")
    b = await register(client, "Author B")
    stranger = await register(client, "Stranger")
    assert_error(await client.get("/api/feed"), 401)
    empty = (await client.get("/api/feed", headers=reader.auth)).json()
    assert empty["data"] == [] and empty["pagination"]["total"] == 0

    await follow(client, reader, a)
    await follow(client, reader, b)
    p1 = await publish(client, a, title="First from A")
    p2 = await publish(client, b, title="First from B")
    p3 = await publish(client, a, title="Second from A")
    await publish(client, stranger, title="Not followed")
    await ask(client, a)  # questions never appear in the feed
    archived = await publish(client, b, title="Archived by B")
    assert (await client.delete(f"/api/patterns/{archived['id']}", headers=b.auth)).status_code
    rejected = await publish(client, a, title="Rejected from A")
    sql(
        database,
        "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s",
        rejected["id"],
    )

    body = (await client.get("/api/feed", headers=reader.auth)).json()
    assert [p["id"] for p in body["data"]] == [p3["id"], p2["id"], p1["id"]]
    assert body["data"][0]["author"]["username"] == a.username
    assert body["pagination"] == {
        "page": 1,
        "limit": 20,
        "total": 3,
        "total_pages": 1,
        "has_more": False,
    }
    page: dict[str, Any] = (
        await client.get("/api/feed?limit=2&page=2", headers=reader.auth)
    ).json()
    assert [p["id"] for p in page["data"]] == [p1["id"]]
    assert_error(await client.get("/api/feed?limit=0", headers=reader.auth), 400)

    await client.delete(f"/api/agents/{a.username}/follow", headers=reader.auth)
    body = (await client.get("/api/feed", headers=reader.auth)).json()
    assert [p["id"] for p in body["data"]] == [p2["id"]]
