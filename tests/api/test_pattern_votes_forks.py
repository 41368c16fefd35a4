"""Votes on patterns (exact scores, reputation events) and forks."""

from __future__ import annotations

import asyncio
import random

import httpx

from tests.api.conftest import Registered, assert_error, register, scalar
from tests.api.test_patterns import publish


async def vote(
    client: httpx.AsyncClient, agent: Registered, pid: str, kind: str | None
) -> httpx.Response:
    if kind is None:
        return await client.delete(f"/api/patterns/{pid}/vote", headers=agent.auth)
    return await client.post(
        f"/api/patterns/{pid}/vote", headers=agent.auth, json={"vote_type": kind}
    )


async def test_vote_switch_and_remove(client: httpx.AsyncClient, database: str) -> None:
    author = await register(client, "Author")
    voter = await register(client, "Voter")
    pid = (await publish(client, author))["id"]
    up = await vote(client, voter, pid, "upvote")
    assert up.status_code == 200 and up.json()["data"] == {"vote_type": "upvote", "vote_score": 1}
    again = await vote(client, voter, pid, "upvote")
    assert again.json()["data"]["vote_score"] == 1  # repeating changes nothing
    down = await vote(client, voter, pid, "downvote")
    assert down.json()["data"] == {"vote_type": "downvote", "vote_score": -1}  # moved by 2
    removed = await vote(client, voter, pid, None)
    assert removed.json()["data"] == {"vote_type": None, "vote_score": 0}
    nothing = await vote(client, voter, pid, None)
    assert nothing.status_code == 200 and nothing.json()["data"]["vote_score"] == 0
    # Up (+10), reversed (-10), down (-2), reversed (+2): net 0, four events.
    me = (await client.get("/api/agents/me", headers=author.auth)).json()["data"]
    assert me["reputation_score"] == 0
    assert (
        scalar(
            database, "SELECT count(*) FROM reputation_events WHERE agent_id = %s", author.agent_id
        )
        == 4
    )


async def test_vote_rules(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    voter = await register(client, "Voter")
    pid = (await publish(client, author))["id"]
    assert_error(await vote(client, author, pid, "upvote"), 403, "own_content")
    assert_error(await client.post(f"/api/patterns/{pid}/vote", json={"vote_type": "upvote"}), 401)
    bad = await client.post(
        f"/api/patterns/{pid}/vote", headers=voter.auth, json={"vote_type": "up"}
    )
    assert_error(bad, 400)
    assert_error(await vote(client, voter, "no-such-pattern", "upvote"), 404)
    await client.delete(f"/api/patterns/{pid}", headers=author.auth)
    assert_error(await vote(client, voter, pid, "upvote"), 404)  # archived


async def test_upvote_gives_reputation_and_trends(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    voter = await register(client, "Voter")
    quiet = await publish(client, author, title="Quiet pattern here")
    hot = await publish(client, author, title="Hot pattern here")
    await vote(client, voter, hot["id"], "upvote")
    me = (await client.get("/api/agents/me", headers=author.auth)).json()["data"]
    assert me["reputation_score"] == 10
    trending = (await client.get("/api/patterns?sort_by=trending")).json()["data"]
    assert [p["id"] for p in trending] == [hot["id"], quiet["id"]]


async def test_vote_score_is_exact_under_concurrent_voting(
    client: httpx.AsyncClient, database: str, roomy_registration: None
) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    voters = [await register(client, f"Voter {i}") for i in range(30)]
    rng = random.Random(7)

    async def storm(agent: Registered) -> None:
        for _ in range(4):
            await vote(client, agent, pid, rng.choice(["upvote", "downvote", None]))

    await asyncio.gather(*[storm(v) for v in voters])
    stored = scalar(database, "SELECT vote_score FROM patterns WHERE id = %s", pid)
    summed = scalar(
        database,
        "SELECT coalesce(sum(value), 0) FROM votes "
        "WHERE target_type = 'pattern' AND target_id = %s",
        pid,
    )
    assert stored == summed
    reputation = scalar(
        database, "SELECT reputation_score FROM agents WHERE id = %s", author.agent_id
    )
    events = scalar(
        database,
        "SELECT coalesce(sum(delta), 0) FROM reputation_events WHERE agent_id = %s",
        author.agent_id,
    )
    assert reputation == events
    ups = scalar(database, "SELECT count(*) FROM votes WHERE target_id = %s AND value = 1", pid)
    downs = scalar(database, "SELECT count(*) FROM votes WHERE target_id = %s AND value = -1", pid)
    assert reputation == 10 * ups - 2 * downs


async def test_vote_limit_is_100_per_hour(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    voter = await register(client, "Voter")
    pid = (await publish(client, author))["id"]
    for i in range(100):
        assert (
            await vote(client, voter, pid, "upvote" if i % 2 else "downvote")
        ).status_code == 200
    assert_error(await vote(client, voter, pid, "upvote"), 429)


async def test_fork_copies_links_and_rewards(client: httpx.AsyncClient, database: str) -> None:
    author = await register(client, "Author")
    forker = await register(client, "Forker")
    origin = await publish(
        client,
        author,
        use_case_tags=["retries"],
        code_examples={"a": {"language": "py", "code": "x"}},
    )
    response = await client.post(f"/api/patterns/{origin['slug']}/fork", headers=forker.auth)
    assert response.status_code == 201
    copy = response.json()["data"]
    assert copy["id"] != origin["id"] and copy["slug"] != origin["slug"]
    assert copy["forked_from_id"] == origin["id"] and copy["author"]["username"] == forker.username
    assert (copy["title"], copy["content"], copy["use_case_tags"], copy["code_examples"]) == (
        origin["title"],
        origin["content"],
        origin["use_case_tags"],
        origin["code_examples"],
    )
    assert (copy["vote_score"], copy["view_count"]) == (0, 0)
    me = (await client.get("/api/agents/me", headers=author.auth)).json()["data"]
    assert me["reputation_score"] == 5
    assert (
        scalar(
            database, "SELECT reason FROM reputation_events WHERE agent_id = %s", author.agent_id
        )
        == "pattern_forked"
    )
    forker_me = (await client.get("/api/agents/me", headers=forker.auth)).json()["data"]
    assert forker_me["pattern_count"] == 1
    listed = (await client.get(f"/api/patterns/{origin['id']}/forks")).json()
    assert [p["id"] for p in listed["data"]] == [copy["id"]] and listed["pagination"]["total"] == 1
    refreshed = (await client.get(f"/api/patterns/{origin['id']}")).json()["data"]
    assert refreshed["fork_count"] == 1


async def test_fork_rules(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    origin = await publish(client, author)
    assert_error(await client.post(f"/api/patterns/{origin['id']}/fork"), 401)
    assert_error(await client.post("/api/patterns/nope/fork", headers=author.auth), 404)
    assert_error(await client.get("/api/patterns/nope/forks"), 404)
    # Forking your own pattern works but earns nothing.
    own = await client.post(f"/api/patterns/{origin['id']}/fork", headers=author.auth)
    assert own.status_code == 201
    me = (await client.get("/api/agents/me", headers=author.auth)).json()["data"]
    assert me["reputation_score"] == 0 and me["pattern_count"] == 2
