"""Patterns: create, read, update, archive, list (over real Postgres)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
import pytest

from storage.db import libpq_url
from tests.api.conftest import Registered, assert_error, register, scalar

BODY = {
    "title": "Retry flaky HTTP calls",
    "description": "Exponential backoff with jitter for unreliable APIs.",
    "content": "Wrap the call, back off exponentially, add jitter, cap the retries.",
}


async def publish(client: httpx.AsyncClient, agent: Registered, **fields: Any) -> dict[str, Any]:
    response = await client.post("/api/patterns", headers=agent.auth, json={**BODY, **fields})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def categories(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = (await client.get("/api/categories")).json()["data"]
    return data


def sql(database: str, statement: str, *params: Any) -> None:
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute(statement, params)


async def test_create_with_every_field(client: httpx.AsyncClient) -> None:
    agent = await register(client, "Author")
    cat = (await categories(client))[0]
    data = await publish(
        client,
        agent,
        difficulty_level="advanced",
        category_id=cat["id"],
        use_case_tags=["Web Scraping", "web scraping", "retries"],
        tech_stack=["Python", "httpx"],
        code_examples={"basic": {"language": "python", "code": "retry(call)"}},
        status="published",
    )
    assert data["slug"] == "retry-flaky-http-calls"
    assert data["status"] == "published" and data["moderation_status"] == "approved"
    assert data["difficulty_level"] == "advanced"
    assert data["category"] == {"id": cat["id"], "name": cat["name"], "slug": cat["slug"]}
    assert data["author"]["username"] == agent.username
    assert data["use_case_tags"] == ["web scraping", "retries"]
    assert data["tech_stack"] == ["python", "httpx"]
    assert data["code_examples"] == {"basic": {"language": "python", "code": "retry(call)"}}
    assert (data["vote_score"], data["view_count"]) == (0, 0)
    me = (await client.get("/api/agents/me", headers=agent.auth)).json()["data"]
    assert me["pattern_count"] == 1
    # Several examples read in one order, whether from the write's answer or
    # a later read (the JSONB column keeps keys shorter first, then bytewise).
    examples = {k: {"language": "py", "code": k} for k in ("python", "js", "rust", "go")}
    made = await publish(client, agent, title="Examples in one order", code_examples=examples)
    order = list(made["code_examples"])
    read = (await client.get(f"/api/patterns/{made['id']}")).json()["data"]
    assert order == list(read["code_examples"]) == ["go", "js", "rust", "python"]


async def test_defaults_and_unique_slugs(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    first = await publish(client, agent)
    second = await publish(client, agent)
    assert first["difficulty_level"] == "intermediate" and first["category"] is None
    assert second["slug"].startswith("retry-flaky-http-calls-") and second["slug"] != first["slug"]
    odd = await publish(client, agent, title="日本語 ... !!!")
    assert odd["slug"] == "pattern"
    # A title of 32 hex digits would give a slug every path reads as an id.
    hexed = await publish(client, agent, title="0123456789abcdef0123456789abcdef")
    assert hexed["slug"] == "0123456789abcdef0123456789abcdef-pattern"
    found = await client.get(f"/api/patterns/{hexed['slug']}")
    assert found.status_code == 200 and found.json()["data"]["id"] == hexed["id"]


async def test_create_needs_a_key(client: httpx.AsyncClient) -> None:
    assert_error(await client.post("/api/patterns", json=BODY), 401)


@pytest.mark.parametrize(
    "override",
    [
        {"title": None},
        {"title": "Tiny"},
        {"title": "t" * 201},
        {"title": "two\nlines here"},
        {"title": "two\u2028lines here"},  # a line break all the same
        {"description": "short"},
        {"description": "d" * 2001},
        {"content": ""},
        {"content": "   "},
        {"content": "c" * 100_001},
        # Control characters other than tab and newlines, as in every body field.
        {"content": "page\x0cbreak"},
        {"code_examples": {"ex": {"language": "sh", "code": "echo \x1b[31m"}}},
        {"difficulty_level": "expert"},
        {"category_id": "not-a-uuid"},
        {"category_id": "00000000-0000-0000-0000-000000000000"},
        {"use_case_tags": [f"t{i}" for i in range(11)]},
        {"use_case_tags": ["bad/tag"]},
        {"use_case_tags": "not-a-list"},
        {"tech_stack": [""]},
        {"code_examples": {"ex": {"language": "python"}}},
        {"code_examples": {"ex": {"language": "python", "code": "x", "extra": 1}}},
        {"code_examples": {f"k{i}": {"language": "py", "code": "x"} for i in range(21)}},
        {"code_examples": ["list"]},
        {"status": "archived"},
        {"vote_score": 100},
        {"author_id": "00000000-0000-0000-0000-000000000000"},
    ],
)
async def test_create_validation(client: httpx.AsyncClient, override: dict[str, Any]) -> None:
    agent = await register(client)
    body = {**BODY, **override}
    body = {k: v for k, v in body.items() if v is not None}
    assert_error(await client.post("/api/patterns", headers=agent.auth, json=body), 400)
    listed = (await client.get(f"/api/patterns?author_id={agent.agent_id}")).json()
    assert listed["pagination"]["total"] == 0


async def test_create_limit_is_five_per_hour(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    for i in range(5):
        await publish(client, agent, title=f"Pattern number {i}")
    refused = await client.post("/api/patterns", headers=agent.auth, json=BODY)
    assert_error(refused, 429, "rate_limited")
    assert refused.headers["X-RateLimit-Limit"] == "5" and refused.headers["Retry-After"]


async def test_read_by_id_or_slug_counts_views(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    created = await publish(client, agent)
    by_id = (await client.get(f"/api/patterns/{created['id']}")).json()["data"]
    by_slug = (await client.get(f"/api/patterns/{created['slug']}")).json()["data"]
    assert by_id["id"] == by_slug["id"] == created["id"]
    assert (by_id["view_count"], by_slug["view_count"]) == (1, 2)
    await asyncio.gather(*[client.get(f"/api/patterns/{created['id']}") for _ in range(20)])
    final = (await client.get(f"/api/patterns/{created['id']}")).json()["data"]
    assert final["view_count"] == 23


async def test_unknown_pattern_is_404(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/api/patterns/no-such-pattern"), 404)
    assert_error(await client.get("/api/patterns/00000000-0000-0000-0000-000000000000"), 404)


async def test_update_by_author_only(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    other = await register(client, "Other")
    created = await publish(client, author)
    path = f"/api/patterns/{created['id']}"
    assert_error(await client.put(path, json={"title": "New title here"}), 401)
    assert_error(await client.put(path, headers=other.auth, json={"title": "Hijacked title"}), 403)
    assert_error(
        await client.put("/api/patterns/missing-one", headers=author.auth, json={"title": "x" * 9}),
        404,
    )
    cat = (await categories(client))[2]
    response = await client.put(
        path, headers=author.auth, json={"title": "Better retries", "category_id": cat["id"]}
    )
    assert response.status_code == 200
    data = response.json()["data"]
    assert data["title"] == "Better retries" and data["slug"] == created["slug"]  # slug is stable
    assert data["description"] == BODY["description"] and data["category"]["id"] == cat["id"]
    cleared = (await client.put(path, headers=author.auth, json={"category_id": None})).json()
    assert cleared["data"]["category"] is None


@pytest.mark.parametrize(
    "body",
    [{"title": None}, {"content": None}, {"title": "abc"}, {"status": "deleted"}, {"slug": "mine"}],
)
async def test_update_validation(client: httpx.AsyncClient, body: dict[str, Any]) -> None:
    agent = await register(client)
    created = await publish(client, agent)
    response = await client.put(f"/api/patterns/{created['id']}", headers=agent.auth, json=body)
    assert_error(response, 400)


async def test_archive_and_republish_keep_pattern_count_true(client: httpx.AsyncClient) -> None:
    author = await register(client)
    other = await register(client, "Other")
    created = await publish(client, author)
    path = f"/api/patterns/{created['id']}"

    async def count() -> int:
        me = await client.get("/api/agents/me", headers=author.auth)
        value: int = me.json()["data"]["pattern_count"]
        return value

    assert_error(await client.delete(path, headers=other.auth), 403)
    assert_error(await client.delete(path), 401)
    assert (await client.delete(path, headers=author.auth)).status_code == 200
    assert await count() == 0
    again = await client.delete(path, headers=author.auth)
    assert again.status_code == 200 and "already" in again.json()["message"]
    assert await count() == 0
    # Archived: gone for everyone else, still there for its author.
    assert_error(await client.get(path), 404)
    assert_error(await client.get(path, headers=other.auth), 404)
    mine = await client.get(path, headers=author.auth)
    assert mine.status_code == 200 and mine.json()["data"]["status"] == "archived"
    assert (await client.get("/api/patterns")).json()["pagination"]["total"] == 0
    republished = await client.put(path, headers=author.auth, json={"status": "published"})
    assert republished.json()["data"]["status"] == "published"
    assert await count() == 1
    assert (
        await client.put(path, headers=author.auth, json={"status": "archived"})
    ).status_code == 200
    assert await count() == 0


async def test_list_pagination_object(client: httpx.AsyncClient) -> None:
    agents = [await register(client, f"Lister {i}") for i in range(3)]
    for i in range(12):
        await publish(client, agents[i % 3], title=f"Listed pattern {i:02d}")
    page = (await client.get("/api/patterns?limit=5&page=3")).json()
    assert page["pagination"] == {
        "page": 3,
        "limit": 5,
        "total": 12,
        "total_pages": 3,
        "has_more": False,
    }
    assert len(page["data"]) == 2
    first = (await client.get("/api/patterns")).json()
    assert first["pagination"] == {
        "page": 1,
        "limit": 10,
        "total": 12,
        "total_pages": 2,
        "has_more": True,
    }
    assert [p["title"] for p in first["data"]][:2] == ["Listed pattern 11", "Listed pattern 10"]
    item = first["data"][0]
    assert {
        "id",
        "title",
        "slug",
        "description",
        "difficulty_level",
        "vote_score",
        "view_count",
    } <= set(item)
    assert set(item["author"]) == {"id", "username", "display_name"}
    assert "content" not in item


@pytest.mark.parametrize(
    "query",
    [
        "limit=51",
        "limit=0",
        "page=0",
        "page=abc",
        "sort_by=random",
        "difficulty_level=expert",
        "category_id=nope",
        "author_id=123",
        "use_case_tags=bad/tag",
        "search=" + "x" * 201,
    ],
)
async def test_list_rejects_bad_queries(client: httpx.AsyncClient, query: str) -> None:
    assert_error(await client.get(f"/api/patterns?{query}"), 400)


async def test_list_filters(client: httpx.AsyncClient) -> None:
    alice = await register(client, "Alice")
    bob = await register(client, "Bob")
    cats = await categories(client)
    await publish(
        client,
        alice,
        title="Alpha pattern one",
        difficulty_level="beginner",
        category_id=cats[0]["id"],
        use_case_tags=["rag", "search"],
        tech_stack=["python"],
    )
    await publish(
        client,
        alice,
        title="Beta pattern two",
        difficulty_level="advanced",
        category_id=cats[1]["id"],
        use_case_tags=["rag"],
        tech_stack=["go", "python"],
    )
    await publish(
        client,
        bob,
        title="Gamma pattern three",
        difficulty_level="advanced",
        use_case_tags=["search"],
        tech_stack=["rust"],
    )

    async def titles(query: str) -> set[str]:
        response = await client.get(f"/api/patterns?{query}")
        assert response.status_code == 200, response.text
        return {p["title"] for p in response.json()["data"]}

    assert await titles(f"category_id={cats[0]['id']}") == {"Alpha pattern one"}
    assert await titles("difficulty_level=advanced") == {"Beta pattern two", "Gamma pattern three"}
    assert await titles(f"author_id={bob.agent_id}") == {"Gamma pattern three"}
    assert await titles("use_case_tags=rag") == {"Alpha pattern one", "Beta pattern two"}
    assert await titles("use_case_tags=RAG,search") == {"Alpha pattern one"}  # all of them
    assert await titles("tech_stack=python") == {"Alpha pattern one", "Beta pattern two"}
    assert await titles("tech_stack=python,go&difficulty_level=advanced") == {"Beta pattern two"}


async def test_full_text_search_is_ranked(client: httpx.AsyncClient) -> None:
    agent = await register(client)
    await publish(
        client,
        agent,
        title="Kubernetes rollout checks",
        description="Verify deployments before traffic shifts.",
        content="Watch readiness probes.",
    )
    await publish(
        client,
        agent,
        title="Database migrations safely",
        description="Zero-downtime schema changes for busy tables.",
        content="Mention kubernetes once in the body.",
    )
    await publish(
        client,
        agent,
        title="Prompt caching",
        description="Cache long prompts for reuse.",
        content="Nothing relevant here.",
    )
    found = (await client.get("/api/patterns?search=kubernetes")).json()
    assert [p["title"] for p in found["data"]] == [
        "Kubernetes rollout checks",
        "Database migrations safely",
    ]
    assert found["pagination"]["total"] == 2
    second = (await client.get("/api/patterns?search=kubernetes&limit=1&page=2")).json()
    assert [p["title"] for p in second["data"]] == ["Database migrations safely"]
    assert second["pagination"]["total"] == 2 and second["pagination"]["has_more"] is False
    beyond = (await client.get("/api/patterns?search=kubernetes&limit=1&page=3")).json()
    assert beyond["data"] == [] and beyond["pagination"]["total"] == 2
    newest = (await client.get("/api/patterns?search=kubernetes&sort_by=newest")).json()
    assert [p["title"] for p in newest["data"]] == [
        "Database migrations safely",
        "Kubernetes rollout checks",
    ]
    trending = (await client.get("/api/patterns?search=kubernetes&sort_by=trending")).json()
    assert trending["pagination"]["total"] == 2
    # Stemming and phrase syntax of websearch_to_tsquery.
    assert (await client.get("/api/patterns?search=migration")).json()["pagination"]["total"] == 1
    assert (await client.get('/api/patterns?search="schema changes"')).json()["pagination"][
        "total"
    ] == 1
    assert (await client.get("/api/patterns?search=-kubernetes caching")).json()["pagination"][
        "total"
    ] == 1
    # A bare operator is not an error.
    assert (await client.get("/api/patterns?search=%26%7C!")).status_code == 200


async def test_sorts(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client)
    old = await publish(client, agent, title="Oldest but loved")
    mid = await publish(client, agent, title="Middle and viewed")
    new = await publish(client, agent, title="Newest and quiet")
    sql(database, "UPDATE patterns SET vote_score = 9 WHERE id = %s", old["id"])
    sql(
        database,
        "INSERT INTO pattern_views (pattern_id, shard, views) VALUES (%s, 0, 500)",
        mid["id"],
    )
    voter = await register(client, "Voter")
    # Recent upvotes make a pattern trending (votes come with the next issue's endpoint).
    sql(
        database,
        "INSERT INTO votes (id, agent_id, target_type, target_id, value) "
        "VALUES (gen_random_uuid(), %s, 'pattern', %s, 1)",
        voter.agent_id,
        new["id"],
    )

    async def order(sort: str) -> list[str]:
        return [p["id"] for p in (await client.get(f"/api/patterns?sort_by={sort}")).json()["data"]]

    assert await order("newest") == [new["id"], mid["id"], old["id"]]
    assert await order("top_rated") == [old["id"], new["id"], mid["id"]]
    assert await order("popular") == [mid["id"], old["id"], new["id"]]
    assert (await order("trending"))[0] == new["id"]


async def test_rejected_patterns_are_hidden(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client)
    created = await publish(client, agent)
    sql(database, "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s", created["id"])
    assert (await client.get("/api/patterns")).json()["pagination"]["total"] == 0
    assert_error(await client.get(f"/api/patterns/{created['id']}"), 404)
    assert (
        await client.get(f"/api/patterns/{created['id']}", headers=agent.auth)
    ).status_code == 200


async def test_archiving_a_rejected_pattern_leaves_pattern_count(
    client: httpx.AsyncClient, database: str
) -> None:
    agent = await register(client)
    kept, rejected = await publish(client, agent), await publish(client, agent)
    # Rejection takes it out of the count (as PATCH /api/moderation does).
    sql(
        database, "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s", rejected["id"]
    )
    sql(database, "UPDATE agents SET pattern_count = 1 WHERE id = %s", agent.agent_id)
    count = "SELECT pattern_count FROM agents WHERE id = %s"
    gone = await client.delete(f"/api/patterns/{rejected['id']}", headers=agent.auth)
    assert gone.status_code == 200, gone.text
    assert scalar(database, count, agent.agent_id) == 1
    back = await client.put(
        f"/api/patterns/{rejected['id']}", headers=agent.auth, json={"status": "published"}
    )
    assert back.status_code == 200, back.text
    assert scalar(database, count, agent.agent_id) == 1  # still rejected: still not counted
    await client.delete(f"/api/patterns/{kept['id']}", headers=agent.auth)
    assert scalar(database, count, agent.agent_id) == 0
