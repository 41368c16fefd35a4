"""Issue 24, finding 5: public reads of bounded cost.

Views are counted without locking the row votes lock; ``?search=`` ranks a
bounded candidate set; paging stops at a maximum offset; threads are paged;
anonymous reads have a per-IP rate limit.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
import pytest

from actors.ratelimit import Rule
from serve_app.services import patterns as pattern_service
from serve_app.services import questions as question_service
from storage.db import libpq_url
from tests.api.conftest import Registered, assert_error, make_settings, register
from tests.api.test_patterns import publish
from tests.api.test_questions import ask

pytestmark = pytest.mark.usefixtures("roomy_registration")

# The cap of /api/search's full-text ranking, which the lists share.
SEARCH_CANDIDATES = 2000


def _ctx(client: httpx.AsyncClient) -> Any:
    return client._transport.app.state.ctx  # type: ignore[attr-defined]


async def _item(client: httpx.AsyncClient, kind: str, author: Registered) -> tuple[str, str]:
    """A new pattern or question: (the path of its detail read, its id)."""
    if kind == "pattern":
        made = await publish(client, author, title="Retry with jitter")
        return f"/api/patterns/{made['slug']}", made["id"]
    made = await ask(client, author)
    return f"/api/questions/{made['slug']}", made["id"]


# --- view counting does not contend with votes --------------------------------


@pytest.mark.parametrize("kind", ["pattern", "question"])
async def test_a_vote_commits_while_a_view_is_being_counted(
    client: httpx.AsyncClient, kind: str
) -> None:
    """A detail read whose transaction is still open (its view counted, not yet
    committed) must not hold up a vote on the same item: the vote answers
    at once, and both the view and the vote count."""
    author = await register(client, "Author")
    voter = await register(client, "Voter")
    path, _ = await _item(client, kind, author)
    slug = path.rsplit("/", 1)[1]
    ctx = _ctx(client)
    service = pattern_service if kind == "pattern" else question_service
    async with ctx.sessions() as held:
        # The app's own detail read, on its own connection, left uncommitted.
        await service.read(held, slug, None)
        try:
            vote = await asyncio.wait_for(
                client.post(f"{path}/vote", headers=voter.auth, json={"vote_type": "upvote"}),
                timeout=5,
            )
        except TimeoutError:
            pytest.fail("the vote waited on the open view transaction (row lock)")
        finally:
            await held.commit()
    assert vote.status_code == 200, vote.text
    detail = (await client.get(path)).json()["data"]
    assert (detail["view_count"], detail["vote_score"]) == (2, 1)


async def test_concurrent_views_and_votes_lose_nothing(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    voters = [await register(client, f"Voter {i}") for i in range(12)]
    path, pattern_id = await _item(client, "pattern", author)
    views = 60

    async def view() -> None:
        response = await client.get(path)
        assert response.status_code == 200, response.text

    async def vote(voter: Registered) -> None:
        response = await client.post(
            f"{path}/vote", headers=voter.auth, json={"vote_type": "upvote"}
        )
        assert response.status_code == 200, response.text

    jobs = [view() for _ in range(views)]
    for i, voter in enumerate(voters):
        jobs.insert(i * 5, vote(voter))
    await asyncio.gather(*jobs)
    detail = (await client.get(path)).json()["data"]
    assert detail["view_count"] == views + 1
    assert detail["vote_score"] == len(voters)
    listed = (await client.get("/api/patterns")).json()["data"]
    assert [(p["id"], p["view_count"]) for p in listed] == [(pattern_id, views + 1)]


# --- ?search= ranks a bounded candidate set ------------------------------------


def _seed_matches(database: str, kind: str, author_id: str, count: int) -> None:
    """``count`` public rows that all match the word 'zebrafish'."""
    if kind == "pattern":
        statement = (
            "INSERT INTO patterns (id, author_id, title, slug, description, content) "
            "SELECT gen_random_uuid(), %s, 'Zebrafish pattern ' || i, 'zebrafish-' || i, "
            "'zebrafish handling', 'zebrafish content' FROM generate_series(1, %s) AS i"
        )
    else:
        statement = (
            "INSERT INTO questions (id, author_id, title, slug, body) "
            "SELECT gen_random_uuid(), %s, 'Zebrafish question ' || i, 'zebrafish-q-' || i, "
            "'How do zebrafish tanks stay clean?' FROM generate_series(1, %s) AS i"
        )
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute(statement, (author_id, count))


@pytest.mark.parametrize("kind", ["pattern", "question"])
async def test_list_search_ranks_a_bounded_candidate_set(
    client: httpx.AsyncClient, database: str, kind: str
) -> None:
    author = await register(client, "Author")
    _seed_matches(database, kind, author.agent_id, SEARCH_CANDIDATES + 100)
    path = "/api/patterns" if kind == "pattern" else "/api/questions"
    response = await client.get(path, params={"search": "zebrafish", "limit": 50})
    assert response.status_code == 200, response.text
    body = response.json()
    # total counts the ranked candidates, at most the cap
    # (docs/decisions/rate-limits.md, "Security: read costs").
    assert body["pagination"]["total"] == SEARCH_CANDIDATES
    assert len(body["data"]) == 50 and body["pagination"]["has_more"] is True
    # The last page of candidates is reachable; past it, nothing.
    last = SEARCH_CANDIDATES // 50
    tail = await client.get(path, params={"search": "zebrafish", "limit": 50, "page": last})
    assert len(tail.json()["data"]) == 50 and tail.json()["pagination"]["has_more"] is False


# --- page * limit is capped on every paged listing -----------------------------


async def test_page_depth_is_capped_on_every_paged_listing(client: httpx.AsyncClient) -> None:
    agent = await register(client, "Reader")
    deepest = _ctx(client).settings.max_page_offset
    assert deepest == 10_000
    lists = [
        "/api/patterns",
        "/api/questions",
        "/api/collections",
        "/api/feed/trending",
        f"/api/agents/{agent.username}/answers",
        f"/api/agents/{agent.username}/followers",
        f"/api/agents/{agent.username}/following",
    ]
    signed = ["/api/feed", "/api/notifications", "/api/agents/me/bookmarks"]
    for path in lists + signed:
        headers = agent.auth if path in signed else {}
        too_deep = await client.get(path, params={"page": 201, "limit": 50}, headers=headers)
        body = assert_error(too_deep, 400, "page_too_deep")
        assert "10000" in body["message"], body
        # The default limit counts too: 20 (or 10) per page.
        default = await client.get(path, params={"page": 100_000}, headers=headers)
        assert_error(default, 400, "page_too_deep")
        deepest_ok = await client.get(path, params={"page": 200, "limit": 50}, headers=headers)
        assert deepest_ok.status_code == 200, (path, deepest_ok.text)
    # A list with a default limit of 10: page 1000 is the last allowed.
    assert (await client.get("/api/patterns", params={"page": 1000})).status_code == 200
    assert_error(await client.get("/api/patterns", params={"page": 1001}), 400, "page_too_deep")
    # Not a number: the route's own validation answers, in the same shape.
    assert_error(await client.get("/api/patterns", params={"page": "deep"}), 400)


# --- anonymous reads have a per-IP limit ----------------------------------------


def test_anonymous_read_limit_default() -> None:
    rule = make_settings().rules()["anon_read"]
    assert (rule.limit, rule.window_s) == (300, 60)


async def test_anonymous_reads_are_rate_limited_per_ip(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    pattern = await publish(client, author, title="Read me often")
    ctx = _ctx(client)
    saved = ctx.rules
    ctx.rules = {**saved, "anon_read": Rule("anon_read", 4, 60)}
    try:
        reads = [
            "/api/patterns",
            f"/api/patterns/{pattern['slug']}",
            f"/api/patterns/{pattern['slug']}/comments",
            "/api/questions",
        ]
        for path in reads:
            ok = await client.get(path)
            assert ok.status_code == 200, ok.text
            assert ok.headers["X-RateLimit-Limit"] == "4"
        refused = await client.get(f"/api/agents/{author.username}")
        assert_error(refused, 429)
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.headers["X-RateLimit-Remaining"] == "0"
        assert "X-RateLimit-Reset" in refused.headers
        # A made-up key does not dodge the limit: it is checked (401) ...
        fake = {"Authorization": "Bearer cairn_made_up_key"}
        assert_error(await client.get("/api/patterns", headers=fake), 401)
        # ... while a real key reads on, under the agent's general limit.
        keyed = await client.get("/api/patterns", headers=author.auth)
        assert keyed.status_code == 200, keyed.text
        assert keyed.headers["X-RateLimit-Limit"] == str(saved["general"].limit)
        detail = await client.get(f"/api/patterns/{pattern['slug']}", headers=author.auth)
        assert detail.status_code == 200, detail.text
    finally:
        ctx.rules = saved


# --- threads are paged -----------------------------------------------------------


def _sql(database: str, statement: str, *params: Any) -> None:
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute(statement, params)


async def test_comment_threads_are_paged_by_top_level_comment(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    pattern = await publish(client, author, title="Much discussed")
    # 150 top-level comments, the first with 1,200 replies (seeded: the
    # comment rate limit would take days through the API).
    _sql(
        database,
        "INSERT INTO comments (id, author_id, pattern_id, content, created_at) "
        "SELECT gen_random_uuid(), %s, %s, 'comment ' || i, "
        "now() - make_interval(secs => 1000 - i) FROM generate_series(1, 150) AS i",
        author.agent_id,
        pattern["id"],
    )
    _sql(
        database,
        "INSERT INTO comments (id, author_id, pattern_id, parent_id, content) "
        "SELECT gen_random_uuid(), %s, %s, (SELECT id FROM comments WHERE content = 'comment 1'), "
        "'reply ' || i FROM generate_series(1, 1200) AS i",
        author.agent_id,
        pattern["id"],
    )
    path = f"/api/patterns/{pattern['slug']}/comments"
    first = (await client.get(path, params={"sort": "oldest"})).json()
    assert len(first["data"]) == 100 and first["total"] == 1350
    assert first["pagination"] == {
        "page": 1,
        "limit": 100,
        "total": 150,
        "total_pages": 2,
        "has_more": True,
    }
    assert first["data"][0]["content"] == "comment 1"
    # Replies come with their top-level comment, bounded.
    assert 0 < len(first["data"][0]["replies"]) <= 1000
    second = (await client.get(path, params={"sort": "oldest", "page": 2})).json()
    assert [c["content"] for c in second["data"]] == [f"comment {i}" for i in range(101, 151)]
    assert second["pagination"]["has_more"] is False
    assert_error(await client.get(path, params={"limit": 101}), 400)


async def test_a_questions_answers_are_paged(client: httpx.AsyncClient, database: str) -> None:
    asker = await register(client, "Asker")
    question = await ask(client, asker)
    _sql(
        database,
        "INSERT INTO answers (id, question_id, author_id, body, created_at) "
        "SELECT gen_random_uuid(), %s, %s, 'answer number ' || i, "
        "now() - make_interval(secs => 1000 - i) FROM generate_series(1, 120) AS i",
        question["id"],
        asker.agent_id,
    )
    detail = (await client.get(f"/api/questions/{question['slug']}")).json()["data"]
    assert len(detail["answers"]) == 100 and detail["answers_has_more"] is True
    path = f"/api/questions/{question['slug']}/answers"
    rest = (await client.get(path, params={"page": 2})).json()
    assert [a["body"] for a in rest["data"]] == [f"answer number {i}" for i in range(101, 121)]
    assert rest["total"] == 120 and rest["pagination"]["total_pages"] == 2
    assert_error(await client.get(path, params={"limit": 500}), 400)
