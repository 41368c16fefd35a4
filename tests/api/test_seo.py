"""What crawlers and link previews read (serve_app/web/seo.py and the pages'
heads): robots.txt, the sitemaps and their paging, only what storage/access.py
offers crawlers."""

from __future__ import annotations

import contextlib
import html.parser
import json
import urllib.robotparser
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest

from actors.ratelimit import Rule
from tests.api.conftest import register, sign_up
from tests.api.test_patterns import categories, publish, sql
from tests.api.test_questions import answer, ask
from tests.api.test_web_pages import assert_page

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
        "/signup",
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
    client: httpx.AsyncClient, database: str
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
    # One author for all: room past the hourly creation budgets.
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {
        **saved,
        "pattern_create": Rule("pattern_create", 100, 3600),
        "question_create": Rule("question_create", 100, 3600),
    }
    try:
        author = await register(client, "Sitemap Author")
        expected[f"/agents/{author.username}"] = True
        for i, (state, (status, moderation, listed)) in enumerate(pattern_states.items()):
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
    finally:
        ctx.rules = saved
    for name in ("Sitemap Bot One", "Sitemap Bot Two"):
        expected[f"/agents/{(await register(client, name)).username}"] = True
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
        if size == 2:  # 4 listed agents of 5, 2 a file: paged
            assert sum(p.startswith("/sitemaps/agents-") for p in files) >= 2
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


# --- canonical URLs, link previews, structured data ------------------------------

SITE = "https://cairn.example"  # the test app's public base URL
XSS = '</script><script>alert("x")</script><img src=x onerror=alert(1)>'


class Head(html.parser.HTMLParser):
    """A page's meta tags, canonical link and JSON-LD blocks."""

    def __init__(self, body: str) -> None:
        super().__init__()
        self.meta: dict[str, str] = {}
        self.canonical: list[str] = []
        self.json_ld: list[str] = []
        self._in_ld = False
        self.feed(body)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "meta" and (a.get("property") or a.get("name")):
            self.meta[str(a.get("property") or a.get("name"))] = str(a.get("content"))
        elif tag == "link" and a.get("rel") == "canonical":
            self.canonical.append(str(a["href"]))
        elif tag == "script" and a.get("type") == "application/ld+json":
            self._in_ld = True
            self.json_ld.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_ld = False

    def handle_data(self, data: str) -> None:
        if self._in_ld:
            self.json_ld[-1] += data


def _head(response: httpx.Response) -> Head:
    found = Head(assert_page(response))
    assert len(found.canonical) == 1
    for name in ("og:title", "og:description", "og:url", "og:type", "og:site_name",
                 "twitter:card", "twitter:title", "description"):  # fmt: skip
        assert name in found.meta, name
    assert found.meta["og:url"] == found.canonical[0]
    return found


def _ld(found: Head) -> dict[str, Any]:
    assert len(found.json_ld) == 1
    text = found.json_ld[0]
    # Nothing in it can end the element or open markup.
    assert "<" not in text and ">" not in text and "&" not in text
    data: dict[str, Any] = json.loads(text)
    assert data["@context"] == "https://schema.org"
    return data


async def test_pattern_page_has_previews_and_a_tech_article(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Article Author")
    cat = (await categories(client))[0]
    pattern = await publish(
        client,
        author,
        title=f"Retry {XSS}",
        description=f"Back off *exponentially* {XSS}",
        category_id=cat["id"],
        difficulty_level="advanced",
        use_case_tags=["resilience"],
        tech_stack=["python"],
    )
    by_id = await client.get(f"/patterns/{pattern['id']}")
    raw = by_id.text
    assert "<script>alert" not in raw and "<img src=x" not in raw  # inert everywhere
    found = _head(by_id)
    url = f"{SITE}/patterns/{pattern['slug']}"
    assert found.canonical == [url]  # the slug's URL, whichever reference was asked
    assert found.meta["og:title"] == pattern["title"] and found.meta["og:type"] == "article"
    assert found.meta["og:description"].startswith("Back off exponentially </script>")
    assert "robots" not in found.meta
    data = _ld(found)
    assert data["@type"] == "TechArticle"
    assert data["headline"] == pattern["title"]  # the author's text, whole
    assert data["url"] == url and data["mainEntityOfPage"] == url
    assert data["author"] == {
        "@type": "Person",
        "name": "Article Author",
        "url": f"{SITE}/agents/{author.username}",
    }
    assert data["articleSection"] == cat["name"] and data["proficiencyLevel"] == "Expert"
    assert data["keywords"] == "resilience, python"
    assert datetime.fromisoformat(data["datePublished"]) <= datetime.fromisoformat(
        data["dateModified"]
    )

    # Public but awaiting a moderator: shown, not indexed.
    sql(database, "UPDATE patterns SET moderation_status = 'pending' WHERE id = %s", pattern["id"])
    assert _head(await client.get(url.removeprefix(SITE))).meta["robots"] == "noindex"


async def test_question_page_is_a_qa_page(client: httpx.AsyncClient) -> None:
    asker = await register(client, "Curious Asker")
    question = await ask(client, asker, title="How do I retry safely?", body=f"Asking {XSS}")
    slug = question["slug"]
    helper = await register(client, f"Helper {XSS}"[:50])
    first = await answer(client, helper, slug, f"Use a loop {XSS}")
    second = await answer(client, await register(client, "Second Helper"), slug, "Use tenacity.")
    voter = await register(client, "Voter")
    vote = await client.post(
        f"/api/answers/{first['id']}/vote", headers=voter.auth, json={"vote_type": "upvote"}
    )
    assert vote.status_code == 200, vote.text
    assert (
        await client.post(f"/api/answers/{second['id']}/accept", headers=asker.auth)
    ).status_code == 200

    response = await client.get(f"/questions/{slug}?sort=newest")
    assert "<script>alert" not in response.text
    found = _head(response)
    url = f"{SITE}/questions/{slug}"
    assert found.canonical == [url]  # the sort is not part of it
    data = _ld(found)
    assert data["@type"] == "QAPage"
    entity = data["mainEntity"]
    assert entity["@type"] == "Question" and entity["name"] == "How do I retry safely?"
    assert entity["text"] == f"Asking {XSS}"
    assert entity["answerCount"] == 2 and entity["upvoteCount"] == 0
    assert entity["author"]["name"] == "Curious Asker"
    datetime.fromisoformat(entity["dateCreated"])
    accepted = entity["acceptedAnswer"]
    assert accepted["text"] == "Use tenacity." and accepted["url"] == f"{url}#answer-{second['id']}"
    [suggested] = entity["suggestedAnswer"]
    assert suggested["text"] == f"Use a loop {XSS}" and suggested["upvoteCount"] == 1
    assert suggested["author"]["name"] == f"Helper {XSS}"[:50]
    assert suggested["url"] == f"{url}#answer-{first['id']}"


async def test_listings_and_profiles_have_canonical_urls(client: httpx.AsyncClient) -> None:
    bot = await register(client, "Preview Bot", description="I *retry* things.")
    listings = (
        ("/patterns?page=1&sort=newest&tag=resilience&utm_source=x", "/patterns?tag=resilience"),
        ("/patterns?sort=top_rated&difficulty=advanced", "/patterns?difficulty=advanced&sort=top_rated"),  # noqa: E501
        ("/questions?status=open&sort=votes&page=1", "/questions?sort=votes"),
        ("/", "/"),
    )  # fmt: skip
    for path, canonical in listings:
        found = _head(await client.get(path))
        assert found.canonical == [SITE + canonical], path
        assert found.meta["og:type"] == "website" and not found.json_ld
    profile = _head(await client.get(f"/agents/{bot.username}"))
    assert profile.canonical == [f"{SITE}/agents/{bot.username}"]
    assert profile.meta["og:type"] == "profile"
    assert profile.meta["og:description"] == "I retry things."
