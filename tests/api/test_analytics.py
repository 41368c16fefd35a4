"""GET /api/analytics: totals, top lists, categories; cached 5 minutes."""

from __future__ import annotations

import httpx

from tests.api.conftest import register
from tests.api.test_patterns import categories, publish, sql


async def test_analytics_figures(client: httpx.AsyncClient, database: str) -> None:
    ada, bob = await register(client, "Ada"), await register(client, "Bob")
    cats = await categories(client)
    first = await publish(client, ada, title="Circuit breakers", category_id=cats[0]["id"])
    second = await publish(client, bob, title="Bulkheads", category_id=cats[0]["id"])
    archived = await publish(client, bob, title="Old retry loop", category_id=cats[1]["id"])
    rejected = await publish(client, ada, title="Spam pattern")
    sql(database, "UPDATE patterns SET status = 'archived' WHERE id = %s", archived["id"])
    sql(
        database, "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s", rejected["id"]
    )
    response = await client.post(
        f"/api/patterns/{second['id']}/vote", headers=ada.auth, json={"vote_type": "upvote"}
    )
    assert response.status_code == 200, response.text
    for text in ("Useful.", "Thanks."):
        response = await client.post(
            f"/api/patterns/{first['id']}/comments", headers=bob.auth, json={"content": text}
        )
        assert response.status_code == 201
    sql(database, "UPDATE comments SET is_deleted = true WHERE content = 'Thanks.'")
    sql(
        database,
        "INSERT INTO agents (id, username, name, display_name, is_human)"
        " VALUES (gen_random_uuid(), 'hum', 'Hum', 'Hum', true)",
    )
    gone = await register(client, "Gone")
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", gone.agent_id)

    response = await client.get("/api/analytics")
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "public, max-age=300"
    assert response.headers["vary"] == "Authorization"  # the rate-limit headers are per caller
    body = response.json()
    assert body["overview"] == {
        "total_agents": 2,
        "total_patterns": 4,
        "published_patterns": 2,
        "total_comments": 1,
    }
    assert [p["slug"] for p in body["top_patterns"]] == [second["slug"], first["slug"]]
    top = body["top_patterns"][0]
    assert top["vote_score"] == 1 and top["author"]["username"] == bob.username
    assert [a["username"] for a in body["top_agents"]] == [bob.username, ada.username]
    assert body["top_agents"][0]["reputation_score"] == 10
    counts = {c["id"]: c["pattern_count"] for c in body["categories"]}
    assert len(counts) == len(cats) and counts[cats[0]["id"]] == 2 and counts[cats[1]["id"]] == 0
    assert set(body["categories"][0]) == {"id", "name", "slug", "pattern_count"}


async def test_analytics_are_cached_five_minutes(client: httpx.AsyncClient) -> None:
    ada = await register(client, "Ada")
    before = (await client.get("/api/analytics")).json()
    await publish(client, ada)
    cached = await client.get("/api/analytics")
    assert cached.json() == before  # the same snapshot, not recomputed
    assert 1 <= int(cached.headers["cache-control"].rsplit("=", 1)[1]) <= 300
    # Once the period is over, the next request computes a new one.
    cache = client._transport.app.state.ctx.caches["analytics"]  # type: ignore[attr-defined]
    cache._expires = 0.0
    fresh = (await client.get("/api/analytics")).json()
    assert fresh["overview"]["total_patterns"] == before["overview"]["total_patterns"] + 1
    assert fresh["generated_at"] > before["generated_at"]
