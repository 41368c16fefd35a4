"""Answers: post, edit, delete, accept, vote, comments; reputation stays exact
under random and concurrent sequences (real Postgres, in process)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest

from tests.api.conftest import Registered, assert_error, register, scalar
from tests.api.test_questions import answer, ask, make_role, reputation


def events_sum(database: str, agent: Registered) -> int:
    total = scalar(
        database,
        "SELECT coalesce(sum(delta), 0) FROM reputation_events WHERE agent_id = %s",
        agent.agent_id,
    )
    return int(total)


def assert_reputation_invariant(database: str) -> None:
    """Every agent's score is the sum of its events."""
    mismatched = scalar(
        database,
        "SELECT count(*) FROM agents a WHERE a.reputation_score <> "
        "(SELECT coalesce(sum(delta), 0) FROM reputation_events e WHERE e.agent_id = a.id)",
    )
    assert mismatched == 0


def accepted_pointer(database: str, question_id: str) -> Any:
    return scalar(database, "SELECT accepted_answer_id FROM questions WHERE id = %s", question_id)


async def accept(client: httpx.AsyncClient, agent: Registered, answer_id: str) -> httpx.Response:
    return await client.post(f"/api/answers/{answer_id}/accept", headers=agent.auth)


async def vote(
    client: httpx.AsyncClient, agent: Registered, answer_id: str, vote_type: str | None
) -> httpx.Response:
    url = f"/api/answers/{answer_id}/vote"
    if vote_type is None:
        return await client.delete(url, headers=agent.auth)
    return await client.post(url, headers=agent.auth, json={"vote_type": vote_type})


async def test_post_answer(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    helper = await register(client, "Helper")
    q = await ask(client, asker)
    a = await answer(client, helper, q["slug"], "  Retry with jitter and a cap.  ")
    assert a["body"] == "Retry with jitter and a cap."
    assert a["question_id"] == q["id"] and a["vote_score"] == 0 and a["is_accepted"] is False
    assert a["author"]["username"] == helper.username and a["comment_count"] == 0
    assert scalar(database, "SELECT answer_count FROM questions WHERE id = %s", q["id"]) == 1

    url = f"/api/questions/{q['slug']}/answers"
    assert_error(await client.post(url, json={"body": "No key, no answer."}), 401)
    for bad in ({"body": "Too short"}, {"body": " " * 30}, {}, {"body": 12345678901}):
        assert_error(await client.post(url, headers=helper.auth, json=bad), 400)
    assert_error(
        await client.post(
            "/api/questions/missing/answers", headers=helper.auth, json={"body": "x" * 10}
        ),
        404,
    )
    await answer(client, helper, q["slug"], "y" * 10)  # the exact bound


async def test_answer_rate_limit(client: httpx.AsyncClient) -> None:
    asker = await register(client, "Asker")
    helper = await register(client, "Helper")
    q = await ask(client, asker)
    for i in range(10):
        await answer(client, helper, q["slug"], f"Answer number {i} here.")
    refused = await client.post(
        f"/api/questions/{q['slug']}/answers", headers=helper.auth, json={"body": "One too many."}
    )
    assert_error(refused, 429, "rate_limited")
    assert refused.headers["X-RateLimit-Limit"] == "10"


async def test_edit_answer(client: httpx.AsyncClient) -> None:
    asker = await register(client, "Asker")
    helper = await register(client, "Helper")
    q = await ask(client, asker)
    a = await answer(client, helper, q["slug"])
    url = f"/api/answers/{a['id']}"
    assert_error(await client.patch(url, json={"body": "An improved answer."}), 401)
    assert_error(
        await client.patch(url, headers=asker.auth, json={"body": "Hijacked answer."}), 403
    )
    r = await client.patch(url, headers=helper.auth, json={"body": "An improved answer."})
    assert r.status_code == 200 and r.json()["data"]["body"] == "An improved answer."
    assert r.json()["data"]["updated_at"] > a["updated_at"]
    assert_error(await client.patch(url, headers=helper.auth, json={"body": "short"}), 400)
    assert_error(await client.patch(url, headers=helper.auth, json={}), 400)
    missing = "/api/answers/00000000-0000-0000-0000-000000000000"
    assert_error(await client.patch(missing, headers=helper.auth, json={"body": "x" * 10}), 404)
    assert_error(await client.patch("/api/answers/nope", headers=helper.auth, json={}), 400)


async def test_answer_votes_and_reputation(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    helper = await register(client, "Helper")
    q = await ask(client, asker)
    a = await answer(client, helper, q["slug"])
    assert_error(await vote(client, helper, a["id"], "upvote"), 403, "own_content")
    state = await client.get(f"/api/answers/{a['id']}/vote", headers=asker.auth)
    assert state.json()["data"] == {"has_voted": False, "vote_type": None}

    r = await vote(client, asker, a["id"], "upvote")
    assert r.status_code == 200 and r.json()["data"]["vote_score"] == 1
    assert reputation(database, helper) == 10
    r = await vote(client, asker, a["id"], "downvote")
    assert r.json()["data"]["vote_score"] == -1 and reputation(database, helper) == -2
    state = await client.get(f"/api/answers/{a['id']}/vote", headers=asker.auth)
    assert state.json()["data"] == {"has_voted": True, "vote_type": "downvote"}
    r = await vote(client, asker, a["id"], None)
    assert r.json()["data"]["vote_score"] == 0 and reputation(database, helper) == 0
    assert_error(await client.get(f"/api/answers/{a['id']}/vote"), 401)
    missing = "00000000-0000-0000-0000-000000000000"
    assert_error(await vote(client, asker, missing, "upvote"), 404)


async def test_accept_toggles_and_moves(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    h1 = await register(client, "Helper One")
    h2 = await register(client, "Helper Two")
    q = await ask(client, asker)
    a1 = await answer(client, h1, q["slug"])
    a2 = await answer(client, h2, q["slug"])

    assert_error(await accept(client, h1, a1["id"]), 403)
    assert_error(await client.post(f"/api/answers/{a1['id']}/accept"), 401)
    r = await accept(client, asker, a1["id"])
    assert r.status_code == 200 and r.json()["data"]["is_accepted"] is True
    assert r.json()["data"]["accepted_answer_id"] == a1["id"]
    assert (reputation(database, h1), reputation(database, asker)) == (15, 2)

    # Accepting another moves the acceptance (and its reputation).
    r = await accept(client, asker, a2["id"])
    assert r.json()["data"]["accepted_answer_id"] == a2["id"]
    assert (reputation(database, h1), reputation(database, h2)) == (0, 15)
    assert reputation(database, asker) == 2
    accepted = scalar(database, "SELECT count(*) FROM answers WHERE is_accepted")
    assert accepted == 1

    # Accepting the accepted one again takes it back.
    r = await accept(client, asker, a2["id"])
    assert r.json()["data"] == {
        "answer_id": a2["id"],
        "question_id": q["id"],
        "is_accepted": False,
        "accepted_answer_id": None,
    }
    assert (reputation(database, h2), reputation(database, asker)) == (0, 0)
    assert (
        scalar(database, "SELECT accepted_answer_id FROM questions WHERE id = %s", q["id"]) is None
    )

    # A closed question still takes an acceptance.
    await client.patch(f"/api/questions/{q['slug']}", headers=asker.auth, json={"status": "closed"})
    assert (await accept(client, asker, a1["id"])).status_code == 200
    assert_reputation_invariant(database)


async def test_accepting_your_own_answer_earns_nothing(
    client: httpx.AsyncClient, database: str
) -> None:
    asker = await register(client, "Asker")
    q = await ask(client, asker)
    own = await answer(client, asker, q["slug"], "I found it myself: use a token bucket.")
    r = await accept(client, asker, own["id"])
    assert r.status_code == 200 and r.json()["data"]["is_accepted"] is True
    assert reputation(database, asker) == 0
    assert scalar(database, "SELECT count(*) FROM reputation_events") == 0


async def test_delete_answer(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    helper = await register(client, "Helper")
    voter = await register(client, "Voter")
    admin = await register(client, "Admin")
    make_role(database, admin, "admin")
    q = await ask(client, asker)
    a1 = await answer(client, helper, q["slug"])
    a2 = await answer(client, helper, q["slug"], "A second, separate answer.")
    await vote(client, voter, a1["id"], "upvote")
    await vote(client, asker, a1["id"], "upvote")
    await accept(client, asker, a1["id"])
    c = await client.post(
        f"/api/answers/{a1['id']}/comments", headers=voter.auth, json={"content": "Nice."}
    )
    await client.post(
        f"/api/comments/{c.json()['data']['id']}/vote",
        headers=asker.auth,
        json={"vote_type": "upvote"},
    )
    assert reputation(database, helper) == 35 and reputation(database, asker) == 2

    assert_error(await client.delete(f"/api/answers/{a1['id']}", headers=voter.auth), 403)
    assert_error(await client.delete(f"/api/answers/{a1['id']}", headers=asker.auth), 403)
    r = await client.delete(f"/api/answers/{a1['id']}", headers=helper.auth)
    assert r.status_code == 200 and r.json()["data"]["removed"] is True
    assert scalar(database, "SELECT count(*) FROM answers WHERE id = %s", a1["id"]) == 0
    assert scalar(database, "SELECT count(*) FROM comments") == 0
    assert scalar(database, "SELECT count(*) FROM votes") == 0
    question = (await client.get(f"/api/questions/{q['slug']}")).json()["data"]
    assert question["answer_count"] == 1 and question["accepted_answer_id"] is None
    # The reputation the answer earned goes with it.
    assert (reputation(database, helper), reputation(database, asker)) == (0, 0)
    assert_error(await client.delete(f"/api/answers/{a1['id']}", headers=helper.auth), 404)

    r = await client.delete(f"/api/answers/{a2['id']}", headers=admin.auth)
    assert r.status_code == 200
    assert scalar(database, "SELECT answer_count FROM questions WHERE id = %s", q["id"]) == 0
    assert_reputation_invariant(database)


async def test_agent_answers(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    helper = await register(client, "Helper")
    q1 = await ask(client, asker, title="First question about queues")
    q2 = await ask(client, asker, title="Second question about caches")
    q3 = await ask(client, asker, title="Third question, later deleted")
    a1 = await answer(client, helper, q1["slug"])
    a2 = await answer(client, helper, q2["slug"])
    await answer(client, helper, q3["slug"])
    await client.delete(f"/api/questions/{q3['slug']}", headers=asker.auth)

    body = (await client.get(f"/api/agents/{helper.username}/answers")).json()
    assert [a["id"] for a in body["data"]] == [a2["id"], a1["id"]]
    assert body["data"][0]["question"] == {
        "id": q2["id"],
        "title": "Second question about caches",
        "slug": q2["slug"],
    }
    assert body["data"][0]["is_accepted"] is False and "vote_score" in body["data"][0]
    assert body["pagination"] == {
        "page": 1,
        "limit": 20,
        "total": 2,
        "total_pages": 1,
        "has_more": False,
    }
    page = (await client.get(f"/api/agents/{helper.username}/answers?limit=1&page=2")).json()
    assert [a["id"] for a in page["data"]] == [a1["id"]]
    assert page["pagination"]["total_pages"] == 2
    assert_error(await client.get(f"/api/agents/{helper.username}/answers?limit=51"), 400)
    assert_error(await client.get("/api/agents/nobody_here/answers"), 404)
    empty = (await client.get(f"/api/agents/{asker.username}/answers")).json()
    assert empty["data"] == [] and empty["pagination"]["total"] == 0


async def test_answer_comments(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    helper = await register(client, "Helper")
    q = await ask(client, asker)
    a = await answer(client, helper, q["slug"])
    other = await answer(client, asker, q["slug"], "Another answer on the same question.")
    url = f"/api/answers/{a['id']}/comments"

    first = (await client.post(url, headers=asker.auth, json={"content": "Why jitter?"})).json()
    assert first["data"]["answer_id"] == a["id"] and first["data"]["pattern_id"] is None
    reply = await client.post(
        url,
        headers=helper.auth,
        json={"content": "So retries spread out.", "parent_id": first["data"]["id"]},
    )
    assert reply.status_code == 201, reply.text
    second = await client.post(url, headers=helper.auth, json={"content": "Also: cap it."})
    assert second.status_code == 201

    thread = (await client.get(url)).json()
    assert thread["total"] == 3 and thread["sort"] == "oldest"
    assert [c["id"] for c in thread["data"]] == [first["data"]["id"], second.json()["data"]["id"]]
    assert thread["data"][0]["replies"][0]["content"] == "So retries spread out."
    assert thread["data"][0]["author"]["username"] == asker.username
    detail = (await client.get(f"/api/questions/{q['slug']}")).json()["data"]
    assert {x["id"]: x["comment_count"] for x in detail["answers"]}[a["id"]] == 3

    # A parent must be on the same answer; bounds; a key is needed.
    elsewhere = await client.post(
        f"/api/answers/{other['id']}/comments",
        headers=asker.auth,
        json={"content": "Wrong thread.", "parent_id": first["data"]["id"]},
    )
    assert_error(elsewhere, 400, "validation_error")
    for bad in ({"content": ""}, {"content": "   "}, {"content": "x" * 10_001}):
        assert_error(await client.post(url, headers=asker.auth, json=bad), 400)
    assert_error(await client.post(url, json={"content": "Anonymous."}), 401)
    long = await client.post(url, headers=asker.auth, json={"content": "x" * 10_000})
    assert long.status_code == 201

    # Edit, vote and delete through /api/comments: the placeholder rule.
    cid = first["data"]["id"]
    r = await client.patch(f"/api/comments/{cid}", headers=asker.auth, json={"content": "Edited."})
    assert r.status_code == 200 and r.json()["data"]["content"] == "Edited."
    r = await client.post(
        f"/api/comments/{cid}/vote", headers=helper.auth, json={"vote_type": "upvote"}
    )
    assert r.json()["data"]["vote_score"] == 1
    r = await client.delete(f"/api/comments/{cid}", headers=asker.auth)
    assert r.json()["data"]["removed"] is False
    thread = (await client.get(url)).json()
    assert thread["data"][0]["content"] == "[deleted]" and thread["data"][0]["author"] is None
    reply_id = reply.json()["data"]["id"]
    r = await client.delete(f"/api/comments/{reply_id}", headers=helper.auth)
    assert r.json()["data"]["removed"] is True
    thread = (await client.get(url)).json()
    assert cid not in [c["id"] for c in thread["data"]]  # the placeholder went with its last reply
    assert scalar(database, "SELECT comment_count FROM answers WHERE id = %s", a["id"]) == 2

    missing = "/api/answers/00000000-0000-0000-0000-000000000000/comments"
    assert_error(await client.get(missing), 404)
    await client.delete(f"/api/questions/{q['slug']}", headers=asker.auth)
    assert_error(await client.get(url), 404)
    assert_error(await client.post(url, headers=asker.auth, json={"content": "Gone?"}), 404)


async def test_reputation_invariant_after_random_sequence(
    client: httpx.AsyncClient, database: str, roomy_registration: None
) -> None:
    """Random votes, switches, removals and accept toggles (question and answer
    votes, by several agents): every score equals the sum of its events and the
    reputation follows the spec's table exactly."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    from actors.ratelimit import Rule

    ctx.rules = {**ctx.rules, "vote": Rule("vote", 100_000, 3600)}
    rng = random.Random(20261121)
    agents = [await register(client, f"Agent {i}") for i in range(5)]
    questions = [await ask(client, agents[i]) for i in range(2)]
    answers: list[tuple[dict[str, Any], Registered, dict[str, Any]]] = []
    for q in questions:
        for helper in agents[2:]:
            answers.append((await answer(client, helper, q["slug"]), helper, q))
    owner = {q["id"]: agents[i] for i, q in enumerate(questions)}

    for _ in range(200):
        action = rng.random()
        agent = rng.choice(agents)
        kind = rng.choice([None, "upvote", "downvote"])
        if action < 0.3:
            q = rng.choice(questions)
            url = f"/api/questions/{q['slug']}/vote"
            r = await (
                client.delete(url, headers=agent.auth)
                if kind is None
                else client.post(url, headers=agent.auth, json={"vote_type": kind})
            )
            assert r.status_code in (200, 403), r.text
        elif action < 0.8:
            a, _, _ = rng.choice(answers)
            assert (await vote(client, agent, a["id"], kind)).status_code in (200, 403)
        else:
            a, _, q = rng.choice(answers)
            assert (await accept(client, owner[q["id"]], a["id"])).status_code == 200

    assert_reputation_invariant(database)
    # Recompute what each agent should have from the final state alone.
    expected = {agent.agent_id: 0 for agent in agents}
    votes = scalar(
        database,
        "SELECT coalesce(json_agg(json_build_array(target_type, target_id, value)), '[]') "
        "FROM votes",
    )
    author_of = {q["id"]: owner[q["id"]].agent_id for q in questions}
    author_of.update({a["id"]: helper.agent_id for a, helper, _ in answers})
    points = {"question": (5, -2), "answer": (10, -2)}
    for target_type, target_id, value in votes:
        up, down = points[target_type]
        expected[author_of[target_id]] += up if value > 0 else down
    accepted = scalar(
        database,
        "SELECT coalesce(json_agg(json_build_array(a.author_id, q.author_id)), '[]') "
        "FROM answers a JOIN questions q ON q.id = a.question_id WHERE a.is_accepted",
    )
    for answerer, asker_id in accepted:
        expected[answerer] += 15
        expected[asker_id] += 2
    for agent in agents:
        assert reputation(database, agent) == expected[agent.agent_id], agent.username
        assert events_sum(database, agent) == expected[agent.agent_id]
    for q in questions:
        stored = scalar(database, "SELECT vote_score FROM questions WHERE id = %s", q["id"])
        total = scalar(
            database, "SELECT coalesce(sum(value), 0) FROM votes WHERE target_id = %s", q["id"]
        )
        assert stored == total


@pytest.mark.parametrize("rounds", [3])
async def test_concurrent_accepts_leave_at_most_one(
    client: httpx.AsyncClient, database: str, rounds: int
) -> None:
    asker = await register(client, "Asker")
    helpers = [await register(client, f"Helper {i}") for i in range(4)]
    q = await ask(client, asker)
    made = [await answer(client, h, q["slug"]) for h in helpers]
    for _ in range(rounds):
        # Every answer accepted at once, some twice (toggling back and forth).
        targets = [a["id"] for a in made] + [made[0]["id"], made[1]["id"]]
        responses = await asyncio.gather(*(accept(client, asker, t) for t in targets))
        assert [r.status_code for r in responses] == [200] * len(targets)
        accepted = scalar(
            database, "SELECT count(*) FROM answers WHERE question_id = %s AND is_accepted", q["id"]
        )
        assert accepted <= 1
        pointer = scalar(
            database, "SELECT accepted_answer_id FROM questions WHERE id = %s", q["id"]
        )
        flagged = scalar(
            database, "SELECT id FROM answers WHERE question_id = %s AND is_accepted", q["id"]
        )
        assert pointer == flagged
        assert reputation(database, asker) == (2 if accepted else 0)
        assert_reputation_invariant(database)


async def test_concurrent_answer_writes_never_fail(
    client: httpx.AsyncClient, database: str
) -> None:
    """Deleting an answer while its comments are created, replied to, deleted and
    voted on, and the answer voted on and accepted: each call succeeds or gets a
    clean 4xx (no deadlock, no 500), and nothing is left behind."""
    asker = await register(client, "Asker")
    helper = await register(client, "Helper")
    others = [await register(client, f"Other {i}") for i in range(3)]
    q = await ask(client, asker)
    a = await answer(client, helper, q["slug"])
    url = f"/api/answers/{a['id']}/comments"
    seeded = [
        (await client.post(url, headers=o.auth, json={"content": f"Seed {i}"})).json()["data"]
        for i, o in enumerate(others)
    ]
    calls = [
        client.delete(f"/api/answers/{a['id']}", headers=helper.auth),
        accept(client, asker, a["id"]),
        vote(client, others[0], a["id"], "upvote"),
        client.post(url, headers=others[1].auth, json={"content": "A late comment."}),
        client.post(
            url, headers=others[2].auth, json={"content": "A reply.", "parent_id": seeded[0]["id"]}
        ),
        client.delete(f"/api/comments/{seeded[1]['id']}", headers=others[1].auth),
        client.post(
            f"/api/comments/{seeded[2]['id']}/vote",
            headers=others[0].auth,
            json={"vote_type": "upvote"},
        ),
    ]
    responses = await asyncio.gather(*calls)
    for r in responses:
        assert r.status_code < 500, r.text
    assert responses[0].status_code == 200
    assert scalar(database, "SELECT count(*) FROM answers") == 0
    assert scalar(database, "SELECT count(*) FROM comments") == 0
    assert scalar(database, "SELECT count(*) FROM votes") == 0
    assert scalar(database, "SELECT answer_count FROM questions") == 0
    assert_reputation_invariant(database)
    assert reputation(database, helper) == 0 and reputation(database, asker) == 0
