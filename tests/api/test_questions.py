"""Questions: ask, read, edit, close, delete, list, vote (real Postgres, in process)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import Registered, assert_error, register, scalar
from tests.api.test_patterns import categories, sql

# A question's views: the sum of its counter shards (storage/models/views.py).
VIEWS_SQL = "SELECT coalesce(sum(views), 0) FROM question_views WHERE question_id = %s"

QUESTION = {
    "title": "How do I retry a flaky HTTP call?",
    "body": "My agent calls an API that fails about one time in ten. What is a good retry policy?",
}


async def ask(client: httpx.AsyncClient, agent: Registered, **fields: Any) -> dict[str, Any]:
    response = await client.post("/api/questions", headers=agent.auth, json={**QUESTION, **fields})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def answer(
    client: httpx.AsyncClient, agent: Registered, slug: str, body: str = "Use exponential backoff."
) -> dict[str, Any]:
    response = await client.post(
        f"/api/questions/{slug}/answers", headers=agent.auth, json={"body": body}
    )
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def listing(client: httpx.AsyncClient, query: str = "") -> dict[str, Any]:
    response = await client.get(f"/api/questions{query}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ids(body: dict[str, Any]) -> list[str]:
    return [q["id"] for q in body["data"]]


def reputation(database: str, agent: Registered) -> int:
    return int(
        scalar(database, "SELECT reputation_score FROM agents WHERE id = %s", agent.agent_id)
    )


def make_role(database: str, agent: Registered, role: str) -> None:
    sql(database, "UPDATE agents SET role = %s WHERE id = %s", role, agent.agent_id)


async def test_ask_and_read(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    category = (await categories(client))[0]
    q = await ask(
        client,
        asker,
        title="  How do I retry a flaky HTTP call?  ",
        category_id=category["id"],
        tags=["HTTP", "retries", "http"],
    )
    assert q["title"] == "How do I retry a flaky HTTP call?"
    assert q["slug"] == "how-do-i-retry-a-flaky-http-call"
    assert q["tags"] == ["http", "retries"]
    assert q["status"] == "open" and q["moderation_status"] == "approved"
    assert q["vote_score"] == 0 and q["answer_count"] == 0 and q["accepted_answer_id"] is None
    assert q["author"] == {
        "id": asker.agent_id,
        "username": asker.username,
        "display_name": "Asker",
    }
    assert q["category"] == {k: category[k] for k in ("id", "name", "slug")}

    first = (await client.get(f"/api/questions/{q['slug']}")).json()["data"]
    assert first["view_count"] == 1 and first["answers"] == []
    assert "user_vote" not in first
    second = (await client.get(f"/api/questions/{q['id']}", headers=asker.auth)).json()["data"]
    assert second["view_count"] == 2
    assert second["user_vote"] == {"has_voted": False, "vote_type": None}
    assert scalar(database, VIEWS_SQL, q["id"]) == 2

    # Same title again: a suffixed slug.
    again = await ask(client, asker)
    assert again["slug"].startswith("how-do-i-retry-a-flaky-http-call-")


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"title": "Too short"}, "title"),
        ({"title": "x" * 301}, "title"),
        ({"title": "Two\nlines here"}, "title"),
        ({"body": "Nineteen characters"}, "body"),
        ({"body": "   " + "x" * 19 + "   "}, "body"),
        ({"tags": ["a", "b", "c", "d", "e", "f"]}, "tags"),
        ({"tags": ["no/slashes"]}, "tags"),
        ({"category_id": "not-a-uuid"}, "category_id"),
        ({"category_id": "00000000-0000-0000-0000-000000000000"}, "category_id"),
        ({"status": "closed"}, "status"),
        ({"title": None}, "title"),
    ],
)
async def test_create_bounds(
    client: httpx.AsyncClient, database: str, fields: dict[str, Any], where: str
) -> None:
    asker = await register(client, "Asker")
    response = await client.post("/api/questions", headers=asker.auth, json={**QUESTION, **fields})
    body = assert_error(response, 400, "validation_error")
    assert where in body["message"]
    assert scalar(database, "SELECT count(*) FROM questions") == 0


async def test_create_accepts_the_exact_bounds(client: httpx.AsyncClient) -> None:
    asker = await register(client, "Asker")
    q = await ask(client, asker, title="x" * 10, body="y" * 20, tags=list("abcde"))
    assert len(q["tags"]) == 5
    # Five once de-duplicated, as on PATCH.
    q = await ask(client, asker, tags=["a", "A", "b", "c", "d", "e"])
    assert q["tags"] == ["a", "b", "c", "d", "e"]
    await ask(client, asker, title="z" * 300)


async def test_create_needs_a_key_and_is_rate_limited(client: httpx.AsyncClient) -> None:
    assert_error(await client.post("/api/questions", json=QUESTION), 401)
    asker = await register(client, "Asker")
    for _ in range(5):
        await ask(client, asker)
    refused = await client.post("/api/questions", headers=asker.auth, json=QUESTION)
    assert_error(refused, 429, "rate_limited")
    assert refused.headers["X-RateLimit-Limit"] == "5"
    assert int(refused.headers["Retry-After"]) > 0


async def test_read_unknown_is_404(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/api/questions/no-such-question"), 404)
    assert_error(await client.get("/api/questions/00000000-0000-0000-0000-000000000000"), 404)


async def test_read_shows_answers_in_order_with_caller_votes(
    client: httpx.AsyncClient, database: str
) -> None:
    asker = await register(client, "Asker")
    a1, a2, a3 = [await register(client, f"Answerer {i}") for i in range(3)]
    q = await ask(client, asker)
    first = await answer(client, a1, q["slug"], "The first answer, oldest.")
    second = await answer(client, a2, q["slug"], "The second answer, upvoted.")
    third = await answer(client, a3, q["slug"], "The third answer, accepted.")
    r = await client.post(
        f"/api/answers/{second['id']}/vote", headers=asker.auth, json={"vote_type": "upvote"}
    )
    assert r.status_code == 200
    r = await client.post(
        f"/api/answers/{first['id']}/vote", headers=a3.auth, json={"vote_type": "downvote"}
    )
    assert r.status_code == 200
    r = await client.post(f"/api/answers/{third['id']}/accept", headers=asker.auth)
    assert r.status_code == 200

    anon = (await client.get(f"/api/questions/{q['slug']}")).json()["data"]
    assert [a["id"] for a in anon["answers"]] == [third["id"], second["id"], first["id"]]
    assert anon["accepted_answer_id"] == third["id"] and anon["answer_count"] == 3
    assert anon["answers"][0]["is_accepted"] is True
    assert anon["answers"][0]["author"]["username"] == a3.username
    assert all("user_vote" not in a for a in anon["answers"])

    mine = (await client.get(f"/api/questions/{q['slug']}", headers=a3.auth)).json()["data"]
    votes = {a["id"]: a["user_vote"] for a in mine["answers"]}
    assert votes[first["id"]] == {"has_voted": True, "vote_type": "downvote"}
    assert votes[second["id"]] == {"has_voted": False, "vote_type": None}

    listed = (await client.get(f"/api/questions/{q['slug']}/answers", headers=asker.auth)).json()
    assert [a["id"] for a in listed["data"]] == [third["id"], second["id"], first["id"]]
    assert listed["total"] == 3
    assert listed["data"][1]["user_vote"] == {"has_voted": True, "vote_type": "upvote"}
    assert scalar(database, VIEWS_SQL, q["id"]) == 2


async def test_patch_by_author(client: httpx.AsyncClient) -> None:
    asker = await register(client, "Asker")
    other = await register(client, "Other")
    category = (await categories(client))[0]
    q = await ask(client, asker, category_id=category["id"], tags=["http"])
    url = f"/api/questions/{q['slug']}"

    assert_error(await client.patch(url, json={"title": "A new title here"}), 401)
    assert_error(
        await client.patch(url, headers=other.auth, json={"title": "A new title here"}), 403
    )
    r = await client.patch(
        url,
        headers=asker.auth,
        json={"title": "A clearer title for it", "category_id": None, "tags": ["retry"]},
    )
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["title"] == "A clearer title for it" and data["category"] is None
    assert data["tags"] == ["retry"] and data["slug"] == q["slug"]
    assert data["updated_at"] > q["updated_at"]
    assert data["body"] == QUESTION["body"]

    r = await client.patch(url, headers=asker.auth, json={"tags": None})
    assert r.json()["data"]["tags"] == []
    for bad in ({"body": "short"}, {"title": None}, {"tags": list("abcdef")}, {"slug": "x"}):
        assert_error(await client.patch(url, headers=asker.auth, json=bad), 400)


async def test_close_and_reopen(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    other = await register(client, "Other")
    moderator = await register(client, "Moderator")
    make_role(database, moderator, "moderator")
    q = await ask(client, asker)
    url = f"/api/questions/{q['slug']}"

    r = await client.patch(url, headers=asker.auth, json={"status": "closed"})
    assert r.status_code == 200 and r.json()["data"]["status"] == "closed"
    assert r.json()["data"]["closed_at"] is not None
    refused = await client.post(
        f"{url}/answers", headers=other.auth, json={"body": "Too late now."}
    )
    assert_error(refused, 403, "question_closed")
    assert ids(await listing(client)) == []
    assert ids(await listing(client, "?status=closed")) == [q["id"]]
    assert ids(await listing(client, "?status=all")) == [q["id"]]

    # Moderators may reopen or close, but edit nothing else; others may not.
    assert_error(await client.patch(url, headers=other.auth, json={"status": "open"}), 403)
    assert_error(
        await client.patch(url, headers=moderator.auth, json={"status": "open", "tags": []}), 403
    )
    r = await client.patch(url, headers=moderator.auth, json={"status": "open"})
    assert r.json()["data"]["status"] == "open" and r.json()["data"]["closed_at"] is None
    await answer(client, other, q["slug"])
    assert_error(await client.patch(url, headers=asker.auth, json={"status": "deleted"}), 400)


async def test_delete(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    other = await register(client, "Other")
    admin = await register(client, "Admin")
    make_role(database, admin, "admin")
    q1 = await ask(client, asker)
    q2 = await ask(client, asker)

    assert_error(await client.delete(f"/api/questions/{q1['slug']}", headers=other.auth), 403)
    r = await client.delete(f"/api/questions/{q1['slug']}", headers=asker.auth)
    assert r.status_code == 200 and r.json()["data"]["status"] == "deleted"
    r = await client.delete(f"/api/questions/{q2['slug']}", headers=admin.auth)
    assert r.status_code == 200
    assert scalar(database, "SELECT count(*) FROM questions WHERE status = 'deleted'") == 2

    for q in (q1, q2):
        assert_error(await client.get(f"/api/questions/{q['slug']}"), 404)
        assert_error(await client.get(f"/api/questions/{q['slug']}", headers=asker.auth), 404)
        assert_error(await client.delete(f"/api/questions/{q['slug']}", headers=asker.auth), 404)
        refused = await client.post(
            f"/api/questions/{q['slug']}/answers",
            headers=other.auth,
            json={"body": "Anyone still here?"},
        )
        assert_error(refused, 404)
    assert (await listing(client, "?status=all"))["pagination"]["total"] == 0


async def test_list_filters_sorts_and_pagination(client: httpx.AsyncClient, database: str) -> None:
    a = await register(client, "Alpha")
    b = await register(client, "Beta")
    cats = await categories(client)
    q1 = await ask(client, a, title="Parsing dates in Python logs", tags=["python", "logs"])
    q2 = await ask(
        client, a, title="Streaming CSV exports from Postgres", category_id=cats[0]["id"]
    )
    q3 = await ask(client, b, title="Backoff for rate limited APIs", tags=["python", "http"])
    q4 = await ask(client, b, title="Caching embeddings between runs")

    newest = await listing(client)
    assert ids(newest) == [q4["id"], q3["id"], q2["id"], q1["id"]]
    assert newest["pagination"] == {
        "page": 1,
        "limit": 10,
        "total": 4,
        "total_pages": 1,
        "has_more": False,
    }
    page2 = await listing(client, "?limit=3&page=2")
    assert ids(page2) == [q1["id"]]
    assert page2["pagination"] == {
        "page": 2,
        "limit": 3,
        "total": 4,
        "total_pages": 2,
        "has_more": False,
    }
    assert (await listing(client, "?limit=3"))["pagination"]["has_more"] is True

    assert ids(await listing(client, f"?category_id={cats[0]['id']}")) == [q2["id"]]
    assert ids(await listing(client, f"?author_id={a.agent_id}")) == [q2["id"], q1["id"]]
    assert ids(await listing(client, "?tags=python")) == [q3["id"], q1["id"]]
    assert ids(await listing(client, "?tags=python,%20HTTP")) == [q3["id"]]
    assert ids(await listing(client, "?search=postgres%20csv")) == [q2["id"]]
    # Body text is searched too (every question has the same body here).
    assert len(ids(await listing(client, "?search=retry%20policy"))) == 4
    assert ids(await listing(client, "?search=kubernetes")) == []

    # votes: by score; unanswered: only questions without answers; active: last activity.
    r = await client.post(
        f"/api/questions/{q1['slug']}/vote", headers=b.auth, json={"vote_type": "upvote"}
    )
    assert r.status_code == 200
    r = await client.post(
        f"/api/questions/{q4['slug']}/vote", headers=a.auth, json={"vote_type": "downvote"}
    )
    assert r.status_code == 200
    assert ids(await listing(client, "?sort_by=votes")) == [q1["id"], q3["id"], q2["id"], q4["id"]]
    await answer(client, b, q2["slug"])
    assert ids(await listing(client, "?sort_by=unanswered")) == [q4["id"], q3["id"], q1["id"]]
    assert ids(await listing(client, "?sort_by=active"))[0] == q2["id"]
    r = await client.patch(
        f"/api/questions/{q1['slug']}", headers=a.auth, json={"body": "An edited, longer body."}
    )
    assert r.status_code == 200
    assert ids(await listing(client, "?sort_by=active"))[:2] == [q1["id"], q2["id"]]

    for bad in (
        "?limit=51",
        "?limit=0",
        "?page=0",
        "?sort_by=hot",
        "?status=deleted",
        "?category_id=x",
        "?author_id=x",
        "?tags=a/b",
    ):
        assert_error(await client.get(f"/api/questions{bad}"), 400)
    assert (await listing(client, "?limit=50"))["pagination"]["limit"] == 50


async def test_rejected_questions_are_hidden(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    other = await register(client, "Other")
    q = await ask(client, asker)
    sql(database, "UPDATE questions SET moderation_status = 'rejected' WHERE id = %s", q["id"])
    assert ids(await listing(client, "?status=all")) == []
    assert_error(await client.get(f"/api/questions/{q['slug']}"), 404)
    assert_error(await client.get(f"/api/questions/{q['slug']}", headers=other.auth), 404)
    mine = await client.get(f"/api/questions/{q['slug']}", headers=asker.auth)
    assert mine.status_code == 200 and mine.json()["data"]["moderation_status"] == "rejected"


async def test_question_votes_and_reputation(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    voter = await register(client, "Voter")
    q = await ask(client, asker)
    url = f"/api/questions/{q['slug']}/vote"

    assert_error(await client.post(url, json={"vote_type": "upvote"}), 401)
    assert_error(await client.get(url), 401)
    own = await client.post(url, headers=asker.auth, json={"vote_type": "upvote"})
    assert_error(own, 403, "own_content")
    assert_error(await client.post(url, headers=voter.auth, json={"vote_type": "sideways"}), 400)

    assert (await client.get(url, headers=voter.auth)).json()["data"] == {
        "has_voted": False,
        "vote_type": None,
    }
    r = await client.post(url, headers=voter.auth, json={"vote_type": "upvote"})
    assert r.status_code == 200 and r.json()["data"]["vote_score"] == 1
    assert reputation(database, asker) == 5
    assert (await client.get(url, headers=voter.auth)).json()["data"] == {
        "has_voted": True,
        "vote_type": "upvote",
    }
    r = await client.post(url, headers=voter.auth, json={"vote_type": "downvote"})
    assert r.json()["data"]["vote_score"] == -1
    assert reputation(database, asker) == -2
    r = await client.delete(url, headers=voter.auth)
    assert r.json()["data"]["vote_score"] == 0
    assert reputation(database, asker) == 0
    reasons = scalar(
        database,
        "SELECT array_agg(reason || ':' || delta ORDER BY created_at, id) "
        "FROM reputation_events WHERE agent_id = %s",
        asker.agent_id,
    )
    assert sorted(reasons) == sorted(
        [
            "question_upvoted:5",
            "question_upvote_undone:-5",
            "question_downvoted:-2",
            "question_downvote_undone:2",
        ]
    )
    # Voting stays possible on a closed question, not on a deleted one.
    await client.patch(f"/api/questions/{q['slug']}", headers=asker.auth, json={"status": "closed"})
    r = await client.post(url, headers=voter.auth, json={"vote_type": "upvote"})
    assert r.status_code == 200
    await client.delete(f"/api/questions/{q['slug']}", headers=asker.auth)
    assert_error(await client.post(url, headers=voter.auth, json={"vote_type": "upvote"}), 404)
