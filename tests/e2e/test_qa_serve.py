"""Questions and answers through the real service: the whole flow, reputation
that always matches the votes and acceptances, and concurrent accepts and
votes served by several ingress replicas at once."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest

from tests.e2e.test_service import auth, register

pytestmark = pytest.mark.e2e

POINTS = {"question": (5, -2), "answer": (10, -2)}


async def ask(http: httpx.AsyncClient, key: str, title: str, **fields: Any) -> dict[str, Any]:
    body = {"title": title, "body": "Asked through the real service, with enough words.", **fields}
    response = await http.post("/api/questions", headers=auth(key), json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def answer(http: httpx.AsyncClient, key: str, slug: str, text: str) -> dict[str, Any]:
    response = await http.post(
        f"/api/questions/{slug}/answers", headers=auth(key), json={"body": text}
    )
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def reputation(http: httpx.AsyncClient, agent: dict[str, str]) -> int:
    profile = await http.get(f"/api/agents/{agent['username']}")
    return int(profile.json()["data"]["reputation_score"])


async def test_question_and_answer_flow_through_serve(http: httpx.AsyncClient) -> None:
    asker = await register(http, "QA Asker")
    h1 = await register(http, "QA Helper One")
    h2 = await register(http, "QA Helper Two")
    k_asker, k1, k2 = asker["api_key"], h1["api_key"], h2["api_key"]

    q = await ask(http, k_asker, "How should agents back off from a busy API?", tags=["HTTP"])
    assert q["tags"] == ["http"] and q["status"] == "open"
    a1 = await answer(http, k1, q["slug"], "Exponential backoff with full jitter.")
    a2 = await answer(http, k2, q["slug"], "Honour Retry-After before anything else.")

    up = await http.post(
        f"/api/answers/{a2['id']}/vote", headers=auth(k1), json={"vote_type": "upvote"}
    )
    assert up.status_code == 200 and up.json()["data"]["vote_score"] == 1
    own = await http.post(
        f"/api/questions/{q['slug']}/vote", headers=auth(k_asker), json={"vote_type": "upvote"}
    )
    assert own.status_code == 403
    qv = await http.post(
        f"/api/questions/{q['slug']}/vote", headers=auth(k2), json={"vote_type": "upvote"}
    )
    assert qv.status_code == 200
    check = await http.get(f"/api/questions/{q['slug']}/vote", headers=auth(k2))
    assert check.json()["data"] == {"has_voted": True, "vote_type": "upvote"}

    accepted = await http.post(f"/api/answers/{a1['id']}/accept", headers=auth(k_asker))
    assert accepted.status_code == 200 and accepted.json()["data"]["is_accepted"] is True
    assert (await http.post(f"/api/answers/{a1['id']}/accept", headers=auth(k1))).status_code == 403

    detail = (await http.get(f"/api/questions/{q['slug']}", headers=auth(k1))).json()["data"]
    assert [a["id"] for a in detail["answers"]] == [a1["id"], a2["id"]]
    assert detail["answers"][1]["user_vote"] == {"has_voted": True, "vote_type": "upvote"}
    assert detail["view_count"] == 1 and detail["vote_score"] == 1
    assert await reputation(http, asker) == 5 + 2
    assert await reputation(http, h1) == 15
    assert await reputation(http, h2) == 10

    comment = await http.post(
        f"/api/answers/{a1['id']}/comments", headers=auth(k2), json={"content": "Why full jitter?"}
    )
    assert comment.status_code == 201
    reply = await http.post(
        f"/api/answers/{a1['id']}/comments",
        headers=auth(k1),
        json={"content": "It spreads retries best.", "parent_id": comment.json()["data"]["id"]},
    )
    assert reply.status_code == 201
    thread = (await http.get(f"/api/answers/{a1['id']}/comments")).json()
    assert thread["total"] == 2
    assert thread["data"][0]["replies"][0]["author"]["id"] == h1["agent_id"]

    mine = (await http.get(f"/api/agents/{h1['username']}/answers")).json()
    assert mine["data"][0]["question"] == {"id": q["id"], "title": q["title"], "slug": q["slug"]}
    assert mine["pagination"]["total"] == 1

    found = (await http.get("/api/questions?search=busy%20api&status=all")).json()
    assert q["id"] in [item["id"] for item in found["data"]]

    # Deleting the accepted answer takes its reputation back.
    deleted = await http.delete(f"/api/answers/{a1['id']}", headers=auth(k1))
    assert deleted.status_code == 200
    assert await reputation(http, h1) == 0 and await reputation(http, asker) == 5
    closed = await http.patch(
        f"/api/questions/{q['slug']}", headers=auth(k_asker), json={"status": "closed"}
    )
    assert closed.json()["data"]["status"] == "closed"
    late = await http.post(
        f"/api/questions/{q['slug']}/answers", headers=auth(k1), json={"body": "One more idea."}
    )
    assert late.status_code == 403 and late.json()["error"] == "question_closed"
    gone = await http.delete(f"/api/questions/{q['slug']}", headers=auth(k_asker))
    assert gone.status_code == 200
    assert (await http.get(f"/api/questions/{q['slug']}")).status_code == 404


async def test_concurrent_accepts_and_votes_through_serve(http: httpx.AsyncClient) -> None:
    """Two ingress replicas serve these at once: one accepted answer at most,
    and the answer's score and its author's reputation match the votes."""
    asker = await register(http, "Race Asker")
    helpers = [await register(http, f"Race Helper {i}") for i in range(4)]
    voters = [await register(http, f"Race Voter {i}") for i in range(8)]
    q = await ask(http, asker["api_key"], "Which answer wins a race to be accepted?")
    made = [
        await answer(http, h["api_key"], q["slug"], f"Candidate answer number {i}.")
        for i, h in enumerate(helpers)
    ]

    for _ in range(3):
        targets = [a["id"] for a in made] * 2
        results = await asyncio.gather(
            *(
                http.post(f"/api/answers/{t}/accept", headers=auth(asker["api_key"]))
                for t in targets
            )
        )
        assert [r.status_code for r in results] == [200] * len(targets)
        detail = (await http.get(f"/api/questions/{q['slug']}")).json()["data"]
        flagged = [a["id"] for a in detail["answers"] if a["is_accepted"]]
        assert len(flagged) <= 1
        assert detail["accepted_answer_id"] == (flagged[0] if flagged else None)
        expected = {h["agent_id"]: 0 for h in helpers}
        if flagged:
            winner = next(a for a in made if a["id"] == flagged[0])
            expected[winner["author"]["id"]] = 15
        for h in helpers:
            assert await reputation(http, h) == expected[h["agent_id"]]
        assert await reputation(http, asker) == (2 if flagged else 0)

    target = made[0]
    votes = await asyncio.gather(
        *(
            http.post(
                f"/api/answers/{target['id']}/vote",
                headers=auth(v["api_key"]),
                json={"vote_type": "upvote"},
            )
            for v in voters
        )
    )
    assert [r.status_code for r in votes] == [200] * len(voters)
    detail = (await http.get(f"/api/questions/{q['slug']}")).json()["data"]
    score = next(a["vote_score"] for a in detail["answers"] if a["id"] == target["id"])
    assert score == len(voters)
    accepted_bonus = 15 if detail["accepted_answer_id"] == target["id"] else 0
    assert await reputation(http, helpers[0]) == 10 * len(voters) + accepted_bonus


async def test_reputation_matches_votes_after_random_sequence_through_serve(
    http: httpx.AsyncClient,
) -> None:
    """Random votes, switches, removals and accept toggles; afterwards each
    agent's reputation equals what the remaining votes and acceptances give."""
    rng = random.Random(4)
    agents = [await register(http, f"Random Agent {i}") for i in range(4)]
    q = await ask(http, agents[0]["api_key"], "A question for a random sequence of votes")
    answers = [
        (await answer(http, a["api_key"], q["slug"], f"Random answer {i} text."), a)
        for i, a in enumerate(agents[1:])
    ]
    targets: list[tuple[str, str, dict[str, str]]] = [
        ("question", f"/api/questions/{q['slug']}", agents[0])
    ] + [("answer", f"/api/answers/{a['id']}", author) for a, author in answers]

    for _ in range(60):
        agent = rng.choice(agents)
        _, url, _ = rng.choice(targets)
        choice = rng.choice(["upvote", "downvote", None, "accept"])
        if choice == "accept":
            a, _ = rng.choice(answers)
            r = await http.post(
                f"/api/answers/{a['id']}/accept", headers=auth(agents[0]["api_key"])
            )
        elif choice is None:
            r = await http.delete(f"{url}/vote", headers=auth(agent["api_key"]))
        else:
            r = await http.post(
                f"{url}/vote", headers=auth(agent["api_key"]), json={"vote_type": choice}
            )
        assert r.status_code in (200, 403), r.text

    expected = {a["agent_id"]: 0 for a in agents}
    for kind, url, author in targets:
        up, down = POINTS[kind]
        for voter in agents:
            state = (await http.get(f"{url}/vote", headers=auth(voter["api_key"]))).json()["data"]
            if state["has_voted"]:
                expected[author["agent_id"]] += up if state["vote_type"] == "upvote" else down
    detail = (await http.get(f"/api/questions/{q['slug']}")).json()["data"]
    for a, author in answers:
        if detail["accepted_answer_id"] == a["id"]:
            expected[author["agent_id"]] += 15
            expected[agents[0]["agent_id"]] += 2
    for agent in agents:
        assert await reputation(http, agent) == expected[agent["agent_id"]], agent["username"]
