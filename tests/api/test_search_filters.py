"""The pattern filters of the hybrid search (category, difficulty, language):
GET /api/search applies them before a page is cut, and the search page runs
the same call, so both answer the same hits in the same order."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from tests.api.conftest import assert_error, register
from tests.api.test_patterns import categories, publish
from tests.api.test_web_pages import assert_page


@pytest.fixture(autouse=True)
def _no_cookies(client: httpx.AsyncClient) -> None:
    client.cookies.clear()


async def api(client: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    response = await client.get("/api/search", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def slugs(body: dict[str, Any]) -> list[str]:
    return [hit["slug"] for hit in body["data"] if hit["type"] == "pattern"]


async def test_filters_in_the_hybrid_search_and_on_the_page(client: httpx.AsyncClient) -> None:
    cats = await categories(client)
    first, second = cats[0], cats[1]
    author = await register(client, "Retry Writer")
    other = await register(client, "Retry Expert")  # an agent the words find too
    made = {
        "jitter": await publish(
            client, author, title="Retry with jitter", description="Retry calls with jitter.",
            category_id=first["id"], difficulty_level="advanced", tech_stack=["python", "httpx"],
        ),
        "queue": await publish(
            client, author, title="Retry queue in Go", description="Retry jobs from a queue.",
            category_id=second["id"], difficulty_level="beginner", tech_stack=["go"],
        ),
        "budget": await publish(
            client, other, title="Retry budget", description="Cap retries with a budget.",
            category_id=first["id"], difficulty_level="beginner", tech_stack=["python"],
        ),
    }  # fmt: skip
    slug = {key: p["slug"] for key, p in made.items()}

    everything = await api(client, q="retry", type="all")
    assert set(slugs(everything)) == set(slug.values())
    assert any(hit["type"] == "agent" for hit in everything["data"])  # not vacuous below

    for filters, expected in (
        ({"tech_stack": "python"}, {"jitter", "budget"}),
        ({"tech_stack": "Python,HTTPX"}, {"jitter"}),  # all listed, normalized as on /api/patterns
        ({"difficulty_level": "beginner"}, {"queue", "budget"}),
        ({"category_id": first["id"]}, {"jitter", "budget"}),
        ({"category_id": first["id"], "difficulty_level": "beginner"}, {"budget"}),
        ({"tech_stack": "rust"}, set()),
    ):
        for kind in ("all", "patterns"):
            body = await api(client, q="retry", type=kind, **filters)
            # Only patterns match a pattern filter; the total counts them only.
            assert {hit["type"] for hit in body["data"]} <= {"pattern"}, filters
            assert set(slugs(body)) == {slug[k] for k in expected}, (kind, filters)
            assert body["pagination"]["total"] == len(expected)
    agents = await api(client, q="retry", type="agents", difficulty_level="beginner")
    assert agents["data"] == [] and agents["pagination"]["total"] == 0

    # Paging keeps the filter: the two python patterns, one a page.
    pages = [await api(client, q="retry", tech_stack="python", limit=1, page=n) for n in (1, 2)]
    assert sorted(slugs(pages[0]) + slugs(pages[1])) == sorted([slug["jitter"], slug["budget"]])
    assert pages[0]["pagination"]["has_more"] and not pages[1]["pagination"]["has_more"]

    for bad in ({"difficulty_level": "expert"}, {"category_id": "nope"}, {"tech_stack": "a b!"}):
        assert_error(await client.get("/api/search", params={"q": "retry", **bad}), 400)

    # The page: the same hits, in the same order, for the same query and filters.
    for params, api_params in (
        ({"q": "retry", "language": "python"}, {"tech_stack": "python"}),
        ({"q": "retry", "type": "patterns", "difficulty": "beginner"},
         {"type": "patterns", "difficulty_level": "beginner"}),
        ({"q": "retry", "category": first["slug"], "difficulty": "beginner"},
         {"category_id": first["id"], "difficulty_level": "beginner"}),
        ({"q": "retry", "language": "python", "page": "2"}, {"tech_stack": "python", "page": 2}),
    ):  # fmt: skip
        response = await client.get("/search?" + urlencode(params))
        body = assert_page(response)
        results = body.split('id="results"')[1].split("</ul>")[0]
        shown = re.findall(r'<a href="/patterns/([^"]+)">', results)
        expected_body = await api(client, q="retry", limit=20, **{"type": "all", **api_params})
        assert shown == slugs(expected_body), params
        # The page's JSON resource is that same call.
        link = response.headers["link"].split(">", 1)[0].removeprefix("<")
        assert link.startswith("/api/search?")
        assert slugs(await api_at(client, link)) == shown
        if params.get("page") != "2":
            assert shown, params  # not vacuous
        # The form keeps the filters.
        if "language" in params:
            assert 'name="language" value="python"' in body
    assert_page(await client.get("/search?q=retry&category=no-such-category"), 404)


async def api_at(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    response = await client.get(url)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body
