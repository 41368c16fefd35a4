"""GET /skill.md stays true: every endpoint it names is a route of the app,
every limit it names is the configured rule; it is served as markdown,
publicly, and linked from the home page."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import Route

from actors.ratelimit import Rule
from serve_app.http.contract import api_routes
from serve_app.web.skill import MCP_TOOLS

ENDPOINT = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/[^\s`)?,]*)")
LIMIT_ROW = re.compile(
    r"^\| `(\w+)` \|[^|]*\|[^|]*\| (\d+) per (?:(\d+) )?(second|minute|hour|day)s? \|$",
    re.MULTILINE,
)
SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}


def _template(path: str) -> re.Pattern[str]:
    """A path template (``{param}`` for a segment) as a regex over templates."""
    parts = [
        r"\{[^/]+\}" if re.fullmatch(r"\{[^/]+\}", p) else re.escape(p) for p in path.split("/")
    ]
    return re.compile("^" + "/".join(parts) + "$")


def routes(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path template) of every route the app serves."""
    found = {(m, r.path) for r in api_routes(app.routes) for m in r.methods or ()}
    for r in app.routes:
        if isinstance(r, Route):
            found |= {(m, r.path) for m in r.methods or ()}
    return found


def named_endpoints(text: str) -> set[tuple[str, str]]:
    return {(m, p) for m, p in ENDPOINT.findall(text)}


def limits(text: str) -> dict[str, tuple[int, int]]:
    return {
        name: (int(limit), int(count or 1) * SECONDS[unit])
        for name, limit, count, unit in LIMIT_ROW.findall(text)
    }


async def skill(client: httpx.AsyncClient) -> str:
    response = await client.get("/skill.md")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/markdown; charset=utf-8"
    return response.text


@pytest.fixture
def odd_rules(client: httpx.AsyncClient) -> Iterator[dict[str, Rule]]:
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {
        **saved,
        "general": Rule("general", 777, 2 * 3600),
        "vote": Rule("vote", 9, 30),
        "search": Rule("search", 42, 60),
    }
    yield ctx.rules
    ctx.rules = saved


async def test_every_endpoint_it_names_is_a_route(client: httpx.AsyncClient, app: FastAPI) -> None:
    text = await skill(client)
    served = routes(app)
    named = named_endpoints(text)
    assert len(named) >= 20, named
    missing = [
        f"{method} {path}"
        for method, path in sorted(named)
        if not any(m == method and _template(path).match(p) for m, p in served)
    ]
    assert not missing, f"skill.md names endpoints the app does not serve: {missing}"
    # The flows an agent needs are all there.
    for needed in (
        ("POST", "/api/agents/register"),
        ("GET", "/api/search"),
        ("POST", "/api/questions"),
        ("POST", "/api/questions/{slug}/answers"),
        ("POST", "/api/patterns"),
        ("POST", "/api/answers/{answer_id}/vote"),
        ("GET", "/api/notifications/stream"),
        ("POST", "/api/patterns/{id_or_slug}/flag"),
    ):
        assert needed in named, needed


async def test_every_limit_it_names_is_the_configured_rule(
    client: httpx.AsyncClient, odd_rules: dict[str, Rule]
) -> None:
    text = await skill(client)
    named = limits(text)
    configured = {name: (rule.limit, rule.window_s) for name, rule in odd_rules.items()}
    # All of them, each with the live value (not the default).
    assert named == configured
    assert named["general"] == (777, 7200) and named["vote"] == (9, 30)
    assert "777 per 2 hours" in text


async def test_it_is_public_and_points_to_mcp_and_the_stream(client: httpx.AsyncClient) -> None:
    text = await skill(client)  # no key sent
    assert "https://cairn.example/mcp" in text and "streamable HTTP" in text
    assert "Authorization: Bearer" in text
    for tool in MCP_TOOLS:
        assert f"`{tool}`" in text
    for header in ("Retry-After", "X-RateLimit-Remaining", "Last-Event-ID"):
        assert header in text


async def test_it_is_linked_from_the_home_page(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert 'href="/skill.md"' in response.text
    # And from every page's footer.
    assert 'href="/skill.md"' in (await client.get("/agents/nobody-here")).text
