"""Patterns, comments, collections and trending through the real service, and the
TrendingCounter actor surviving a crash."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import httpx
import psutil
import pytest

from serve_app.runtime.trending import RANKING_TTL_S
from tests.e2e.conftest import Service, actor_process
from tests.e2e.test_service import auth, register

pytestmark = pytest.mark.e2e


async def publish(http: httpx.AsyncClient, key: str, title: str) -> dict[str, Any]:
    body = {
        "title": title,
        "description": "A pattern published through the real service.",
        "content": "Steps, caveats and a worked example.",
    }
    response = await http.post("/api/patterns", headers=auth(key), json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def test_discussion_and_collections_through_serve(http: httpx.AsyncClient) -> None:
    author = await register(http, "Thread Author")
    reader = await register(http, "Thread Reader")
    a, r = auth(author["api_key"]), auth(reader["api_key"])
    pattern = await publish(http, author["api_key"], "Threaded discussion pattern")
    pid = pattern["id"]

    top = await http.post(f"/api/patterns/{pid}/comments", headers=r, json={"content": "Why?"})
    assert top.status_code == 201, top.text
    top_id = top.json()["data"]["id"]
    reply = await http.post(
        f"/api/patterns/{pid}/comments",
        headers=a,
        json={"content": "Because.", "parent_id": top_id},
    )
    assert reply.status_code == 201
    voted = await http.post(f"/api/comments/{top_id}/vote", headers=a, json={"vote_type": "upvote"})
    assert voted.json()["data"]["vote_score"] == 1
    assert (
        await http.patch(f"/api/comments/{top_id}", headers=a, json={"content": "x"})
    ).status_code == 403
    deleted = await http.delete(f"/api/comments/{top_id}", headers=r)
    assert deleted.json()["data"]["removed"] is False
    thread = (await http.get(f"/api/patterns/{pid}/comments?sort=top")).json()
    assert thread["total"] == 2
    assert thread["data"][0]["content"] == "[deleted]"
    assert thread["data"][0]["replies"][0]["content"] == "Because."

    assert (await http.post(f"/api/patterns/{pid}/bookmark", headers=r)).status_code == 201
    marks = (await http.get("/api/agents/me/bookmarks", headers=r)).json()
    assert [p["id"] for p in marks["data"]] == [pid]
    fork = await http.post(f"/api/patterns/{pid}/fork", headers=r)
    assert fork.status_code == 201 and fork.json()["data"]["forked_from_id"] == pid
    flag = await http.post(f"/api/patterns/{pid}/flag", headers=r, json={"reason": "other"})
    assert flag.status_code == 201

    made = await http.post("/api/collections", headers=r, json={"name": "Reading list"})
    assert made.status_code == 201
    cid = made.json()["data"]["id"]
    added = await http.post(f"/api/collections/{cid}/patterns", headers=r, json={"pattern_id": pid})
    assert added.status_code == 201 and added.json()["data"]["pattern_count"] == 1
    assert (
        await http.patch(f"/api/collections/{cid}", headers=a, json={"name": "Mine"})
    ).status_code == 403
    detail = (await http.get(f"/api/collections/{cid}")).json()["data"]
    assert [p["id"] for p in detail["patterns"]] == [pid]
    assert (await http.delete(f"/api/collections/{cid}", headers=r)).status_code == 200
    assert (await http.post("/api/collections", json={"name": "x"})).status_code == 401


def trending_actor(service: Service) -> psutil.Process:
    return actor_process(service, "TrendingActor")


async def health_trending(http: httpx.AsyncClient) -> dict[str, Any] | None:
    trending: dict[str, Any] | None = (await http.get("/api/health")).json()["trending"]
    return trending


async def test_trending_counter_survives_a_crash(http: httpx.AsyncClient, service: Service) -> None:
    author = await register(http, "Trend Author")
    voters = [await register(http, f"Trend Voter {i}") for i in range(4)]
    hot = await publish(http, author["api_key"], "Crash-proof hot pattern")
    warm = await publish(http, author["api_key"], "Crash-proof warm pattern")

    async def vote(voter: dict[str, str], pid: str, kind: str) -> None:
        response = await http.post(
            f"/api/patterns/{pid}/vote", headers=auth(voter["api_key"]), json={"vote_type": kind}
        )
        assert response.status_code == 200, response.text

    await asyncio.gather(*[vote(v, hot["id"], "upvote") for v in voters])
    await asyncio.gather(*[vote(v, warm["id"], "upvote") for v in voters[:2]])

    def scores(feed: dict[str, Any]) -> dict[str, int]:
        return {p["id"]: p["trending_score"] for p in feed["data"]}

    before = (await http.get("/api/feed/trending?limit=50")).json()
    assert scores(before)[hot["id"]] == 4 and scores(before)[warm["id"]] == 2
    stats = await health_trending(http)
    assert stats is not None and stats["where"] == "actor"

    victim = trending_actor(service)
    os.kill(victim.pid, signal.SIGKILL)
    # Ray restarts the actor, which rebuilds from Postgres before answering.
    deadline = time.monotonic() + 60
    while True:
        after = await health_trending(http)
        if after is not None and after["started"] > stats["started"]:
            break
        assert time.monotonic() < deadline, "the trending actor did not come back"
        await asyncio.sleep(0.5)
    assert after["loaded_votes"] >= 6 and trending_actor(service).pid != victim.pid
    again = (await http.get("/api/feed/trending?limit=50")).json()
    assert again == before
    # And it keeps counting: a vote shows in every replica's rankings within
    # RANKING_TTL_S (at once in the replica that took it).
    await vote(voters[3], warm["id"], "downvote")
    voted = time.monotonic()
    while True:
        shown = scores((await http.get("/api/feed/trending?limit=50")).json())[warm["id"]]
        if shown == 1:
            break
        assert shown == 2 and time.monotonic() - voted < RANKING_TTL_S + 0.5, shown
        await asyncio.sleep(0.05)


async def test_contract_through_serve(http: httpx.AsyncClient) -> None:
    """Through HAProxy and two Api replicas: a retried create with one
    Idempotency-Key publishes once (the copies may land on either replica),
    a NUL in a query parameter is a 400, and the schema is served."""
    author = await register(http, "Retrying Author")
    headers = {**auth(author["api_key"]), "Idempotency-Key": "e2e-retry-0001"}
    body = {
        "title": "Published once however often it is sent",
        "description": "A retried create through the real service.",
        "content": "Steps, caveats and a worked example.",
    }
    first, *copies = await asyncio.gather(
        *(http.post("/api/patterns", headers=headers, json=body) for _ in range(4))
    )
    answers = [first, *copies]
    assert all(r.status_code in (201, 409) for r in answers), [r.text for r in answers]
    created = {r.json()["data"]["id"] for r in answers if r.status_code == 201}
    assert len(created) == 1, created
    again = await http.post("/api/patterns", headers=headers, json=body)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["data"]["id"] in created
    mine = await http.get("/api/patterns", params={"author_id": author["agent_id"]})
    assert mine.json()["pagination"]["total"] == 1

    bad = await http.get("/api/patterns?search=%00")
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_query"
    spec = (await http.get("/openapi.json")).json()
    read = spec["paths"]["/api/patterns/{id_or_slug}"]["get"]["responses"]
    assert "$ref" in read["200"]["content"]["application/json"]["schema"]
    assert "422" not in read
