"""What crawlers and link previews read (serve_app/web/seo.py and the pages'
heads): robots.txt, the sitemaps and their paging, only what storage/access.py
offers crawlers."""

from __future__ import annotations

import contextlib
import urllib.robotparser
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest

from tests.api.conftest import register, sign_up
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import ask

NS = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
# A base URL with a character XML must escape.
BASE = "https://cairn.example.org/k&r"


@pytest.fixture(autouse=True)
def _no_cookies(client: httpx.AsyncClient) -> None:
    client.cookies.clear()


@contextlib.contextmanager
def settings(client: httpx.AsyncClient, **changed: Any) -> Iterator[None]:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.settings
    ctx.settings = saved.model_copy(update=changed)
    try:
        yield
    finally:
        ctx.settings = saved


async def test_robots_txt(client: httpx.AsyncClient) -> None:
    with settings(client, public_base_url=BASE):
        response = await client.get("/robots.txt")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert f"Sitemap: {BASE}/sitemap.xml" in response.text.splitlines()
    robots = urllib.robotparser.RobotFileParser()
    robots.parse(response.text.splitlines())
    allowed = (
        "/",
        "/patterns/retry-with-jitter",
        "/questions/how-to-retry",
        "/patterns",
        "/questions?tag=http",
        "/agents/some-bot",
        "/users/some-person",
        "/skill.md",
    )
    for path in allowed:
        assert robots.can_fetch("AnyBot", f"https://cairn.example.org{path}"), path
    refused = (
        "/api/patterns",
        "/dashboard",
        "/moderation?tab=flags",
        "/admin",
        "/oauth/grants",
        "/signin",
        "/agents/claim/123",
        "/search?q=x",
        "/mcp",
        "/authorize",
    )
    for path in refused:
        assert not robots.can_fetch("AnyBot", f"https://cairn.example.org{path}"), path


def _parse(response: httpx.Response) -> ElementTree.Element:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/xml; charset=utf-8"
    assert response.text.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    return ElementTree.fromstring(response.content)


async def _crawl(client: httpx.AsyncClient, size: int) -> dict[str, list[str]]:
    """Each sitemap file the index names (by its path) with its page URLs,
    every lastmod checked."""
    with settings(client, public_base_url=BASE, sitemap_urls_per_file=size):
        index = await client.get("/sitemap.xml")
        assert "&amp;" in index.text  # the base URL escaped
        files: dict[str, list[str]] = {}
        for item in _parse(index).findall("s:sitemap", NS):
            loc = item.findtext("s:loc", namespaces=NS)
            assert loc is not None and loc.startswith(f"{BASE}/sitemaps/")
            lastmod = item.findtext("s:lastmod", namespaces=NS)
            if lastmod is not None:
                datetime.fromisoformat(lastmod)
            path = loc.removeprefix(BASE)
            urls = []
            for url in _parse(await client.get(path)).findall("s:url", NS):
                page = url.findtext("s:loc", namespaces=NS)
                assert page is not None and page.startswith(BASE)
                urls.append(page.removeprefix(BASE))
            # The listing pages' file is a fixed few.
            assert 0 < len(urls) <= max(size, 3), (path, urls)
            files[path] = urls
    return files


async def test_sitemaps_list_only_what_crawlers_may_index(
    client: httpx.AsyncClient, database: str, roomy_registration: None
) -> None:
    # Each state a pattern or question can be in; what the sitemaps list.
    pattern_states = {
        "published": ("published", "approved", True),
        "pending": ("published", "pending", False),
        "flagged": ("published", "flagged", False),
        "held": ("published", "held_for_safety", False),
        "rejected": ("published", "rejected", False),
        "archived": ("archived", "approved", False),
    }
    question_states = {
        "open": ("open", "approved", True),
        "closed": ("closed", "approved", True),
        "pending": ("open", "pending", False),
        "held": ("open", "held_for_safety", False),
        "rejected": ("open", "rejected", False),
        "deleted": ("deleted", "approved", False),
    }
    expected: dict[str, bool] = {}
    for i, (state, (status, moderation, listed)) in enumerate(pattern_states.items()):
        author = await register(client, f"Sitemap Author {i}")
        made = await publish(client, author, title=f"A pattern that is {state} now")
        sql(
            database,
            "UPDATE patterns SET status = %s, moderation_status = %s WHERE id = %s",
            status,
            moderation,
            made["id"],
        )
        expected[f"/patterns/{made['slug']}"] = listed
        made = await ask(client, author, title=f"A question that is {list(question_states)[i]}")
        status, moderation, listed = question_states[list(question_states)[i]]
        sql(
            database,
            "UPDATE questions SET status = %s, moderation_status = %s WHERE id = %s",
            status,
            moderation,
            made["id"],
        )
        expected[f"/questions/{made['slug']}"] = listed
        expected[f"/agents/{author.username}"] = True
    gone = await register(client, "Deactivated Bot")
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", gone.agent_id)
    expected[f"/agents/{gone.username}"] = False
    person = await sign_up(client, "Mapped Person")
    expected[f"/users/{person.username}"] = True
    client.cookies.clear()

    for size in (2, 50_000):
        files = await _crawl(client, size)
        listed = [url for urls in files.values() for url in urls]
        assert len(listed) == len(set(listed))  # no page twice
        assert set(files.pop("/sitemaps/pages-1.xml")) == {"/", "/patterns", "/questions"}
        for url, should in expected.items():
            assert (url in listed) == should, (size, url)
        # Every listed page is a page, and all of a kind's rows are listed.
        assert {u for u in listed if u.startswith("/agents/")} == {
            u for u, ok in expected.items() if ok and u.startswith("/agents/")
        }
        kinds = {path.split("/")[2].split("-")[0] for path in files}
        assert kinds == {"patterns", "questions", "agents"}
        if size == 2:  # 8 agents, 2 a file: paged
            assert sum(p.startswith("/sitemaps/agents-") for p in files) >= 4
        else:
            assert len(files) == 3
    for url, should in expected.items():
        if should:
            assert (await client.get(url)).status_code == 200, url

    for missing in (
        "/sitemaps/patterns-999999.xml",
        "/sitemaps/nothing-1.xml",
        "/sitemaps/patterns-0.xml",
        "/sitemaps/patterns.xml",
    ):
        assert (await client.get(missing)).status_code == 404, missing
