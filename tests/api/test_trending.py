"""The trending feed and sort_by=trending over the in-process TrendingCounter."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from actors.trending import Event
from serve_app.runtime.trending import LocalTrending
from tests.api.conftest import OPERATOR, Registered, assert_error, register
from tests.api.test_pattern_votes_forks import vote
from tests.api.test_patterns import categories, publish, sql


def ctx_of(client: httpx.AsyncClient) -> Any:
    return client._transport.app.state.ctx  # type: ignore[attr-defined]


async def feed(client: httpx.AsyncClient, query: str = "") -> dict[str, Any]:
    response = await client.get(f"/api/feed/trending{query}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ids(body: dict[str, Any]) -> list[str]:
    return [p["id"] for p in body["data"]]


@pytest.fixture
async def scene(
    client: httpx.AsyncClient, roomy_registration: None
) -> tuple[list[dict[str, Any]], list[Registered]]:
    """Four patterns: hot (3 up), warm (2 up, 1 down → 1), cold (1 down), quiet."""
    author = await register(client, "Author")
    voters = [await register(client, f"Voter {i}") for i in range(3)]
    made = [
        await publish(client, author, title=f"{name} pattern here")
        for name in ("Hot", "Warm", "Cold", "Quiet")
    ]
    hot, warm, cold, _ = made
    for v in voters:
        await vote(client, v, hot["id"], "upvote")
    await vote(client, voters[0], warm["id"], "upvote")
    await vote(client, voters[1], warm["id"], "upvote")
    await vote(client, voters[2], warm["id"], "downvote")
    await vote(client, voters[0], cold["id"], "downvote")
    return made, voters


async def test_feed_ranks_by_recent_net_votes(
    client: httpx.AsyncClient, scene: tuple[list[dict[str, Any]], list[Registered]]
) -> None:
    (hot, warm, _, _), _ = scene
    body = await feed(client)
    assert ids(body) == [hot["id"], warm["id"]]
    assert [p["trending_score"] for p in body["data"]] == [3, 1]
    assert body["pagination"] == {
        "page": 1,
        "limit": 20,
        "total": 2,
        "total_pages": 1,
        "has_more": False,
    }
    assert body["days"] == 7
    item = body["data"][0]
    assert item["author"]["username"] and "category" in item and item["vote_score"] == 3
    page = await feed(client, "?limit=1&page=2")
    assert ids(page) == [warm["id"]] and page["pagination"]["total_pages"] == 2
    beyond = await feed(client, "?page=3")
    assert beyond["data"] == [] and beyond["pagination"]["total"] == 2


async def test_switching_and_withdrawing_update_the_feed(
    client: httpx.AsyncClient, scene: tuple[list[dict[str, Any]], list[Registered]]
) -> None:
    (hot, warm, _, _), voters = scene
    for v in voters:
        await vote(client, v, hot["id"], None)
    assert ids(await feed(client)) == [warm["id"]]
    await vote(client, voters[2], warm["id"], "upvote")  # -1 -> +1
    body = await feed(client)
    assert body["data"][0]["trending_score"] == 3


async def test_days_window(
    client: httpx.AsyncClient,
    database: str,
    scene: tuple[list[dict[str, Any]], list[Registered]],
) -> None:
    (hot, warm, _, _), _ = scene
    # Age the votes on "hot" by ten days, then rebuild the counter from Postgres.
    sql(
        database,
        "UPDATE votes SET updated_at = now() - interval '10 days' WHERE target_id = %s",
        hot["id"],
    )
    ctx_of(client).trending = LocalTrending(database)
    assert ids(await feed(client)) == [warm["id"]]
    assert ids(await feed(client, "?days=30")) == [hot["id"], warm["id"]]
    for bad in ("?days=0", "?days=31", "?days=x", "?limit=51", "?page=0"):
        assert_error(await client.get(f"/api/feed/trending{bad}"), 400)


async def test_hidden_patterns_leave_the_feed(
    client: httpx.AsyncClient,
    database: str,
    scene: tuple[list[dict[str, Any]], list[Registered]],
) -> None:
    (hot, warm, _, _), _ = scene
    sql(database, "UPDATE patterns SET status = 'archived' WHERE id = %s", hot["id"])
    body = await feed(client)
    assert ids(body) == [warm["id"]] and body["pagination"]["total"] == 1


async def test_a_rebuilt_counter_gives_the_same_feed(
    client: httpx.AsyncClient,
    database: str,
    scene: tuple[list[dict[str, Any]], list[Registered]],
) -> None:
    before = await feed(client)
    ctx_of(client).trending = LocalTrending(database)
    assert await feed(client) == before


class Unreachable:
    """A counter that cannot answer, as while the actor restarts."""

    async def record(self, events: list[Event]) -> None:
        return None

    async def top(self, days: int, limit: int = 1000) -> list[tuple[str, int]] | None:
        return None

    async def stats(self) -> dict[str, Any] | None:
        return None


async def test_ranking_falls_back_to_postgres(
    client: httpx.AsyncClient, scene: tuple[list[dict[str, Any]], list[Registered]]
) -> None:
    before = await feed(client)
    listed = (await client.get("/api/patterns?sort_by=trending")).json()
    ctx_of(client).trending = Unreachable()
    assert await feed(client) == before
    assert (await client.get("/api/patterns?sort_by=trending")).json() == listed
    health = await client.get("/api/health", headers=OPERATOR)
    assert health.status_code == 200 and health.json()["trending"] is None


async def test_health_shows_the_counter(
    client: httpx.AsyncClient, scene: tuple[list[dict[str, Any]], list[Registered]]
) -> None:
    trending = (await client.get("/api/health", headers=OPERATOR)).json()["trending"]
    assert trending["where"] == "in-process"
    assert trending["votes"] == 7 and trending["patterns"] == 3  # hot, warm and cold
    assert trending["buckets"] >= 3  # one per pattern, two if an hour turned meanwhile


async def test_sort_by_trending_in_the_list(
    client: httpx.AsyncClient,
    database: str,
    scene: tuple[list[dict[str, Any]], list[Registered]],
) -> None:
    (hot, warm, cold, quiet), _ = scene
    listed = (await client.get("/api/patterns?sort_by=trending")).json()
    # Not-trending patterns follow, by total score, then newest.
    assert ids(listed) == [hot["id"], warm["id"], quiet["id"], cold["id"]]
    assert listed["pagination"]["total"] == 4
    for page in range(1, 6):  # pages that cross from the ranked to the rest
        one = (await client.get(f"/api/patterns?sort_by=trending&limit=1&page={page}")).json()
        assert ids(one) == ids(listed)[page - 1 : page]
    two = (await client.get("/api/patterns?sort_by=trending&limit=3&page=2")).json()
    assert ids(two) == [cold["id"]]
    category = (await categories(client))[0]["id"]
    sql(database, "UPDATE patterns SET category_id = %s WHERE id = %s", category, warm["id"])
    filtered = (await client.get(f"/api/patterns?sort_by=trending&category_id={category}")).json()
    assert ids(filtered) == [warm["id"]]
