"""Categories, health, and the error shape for unknown routes and methods."""

from __future__ import annotations

import re
import time

import httpx

from actors.dispatch.dispatcher import Dispatcher
from serve_app.app import create_app
from serve_app.context import AppContext
from serve_app.runtime.dispatch import LocalDispatch, dispatch_config
from serve_app.runtime.semantic import LocalSearch
from serve_app.runtime.trending import LocalTrending
from serve_app.services import health as health_service
from storage.db import make_engine, make_sessionmaker
from tests.api.conftest import OPERATOR, SECRET, assert_error, make_settings
from tests.contract_check import Contract


async def test_categories_are_seeded_and_cacheable(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/categories")
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "public, max-age=31536000"
    assert response.headers["Vary"] == "Authorization"  # X-RateLimit-* are the caller's
    categories = response.json()["data"]
    assert len(categories) >= 10
    for cat in categories:
        assert set(cat) == {"id", "name", "slug", "description", "color", "icon_name"}
        assert re.fullmatch(r"#[0-9A-Fa-f]{6}", cat["color"])
        assert re.fullmatch(r"[a-z0-9-]+", cat["slug"]) and cat["icon_name"]
    assert len({c["slug"] for c in categories}) == len(categories)


async def test_health_reports_real_metrics(client: httpx.AsyncClient) -> None:
    await client.get("/api/categories")  # fills one cache entry
    response = await client.get("/api/health", headers=OPERATOR)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "healthy" and body["timestamp"]
    parts = body["parts"]
    assert parts["search"]["state"] == "off"  # this app runs without semantic search
    for name in ("database", "dispatcher", "rate_limiter", "trending"):
        assert parts[name] == {"state": "up", "reason": None}, name
    metrics = body["metrics"]
    assert metrics["db_connected"] is True
    assert 0 < metrics["db_latency_ms"] < 5000
    assert 0 < metrics["response_time_ms"] < 5000
    assert metrics["response_time_ms"] >= metrics["db_latency_ms"]
    assert metrics["cache_entries"] >= 1
    assert metrics["memory_usage_mb"] > 10
    # This process's BM25 index (built per test by the client fixture).
    assert body["lexical"]["ready"] is True
    assert body["lexical"]["indexes"] == {"pattern": 0, "agent": 0, "question": 0}


async def test_unknown_route_and_method_use_error_shape(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/api/does-not-exist"), 404, "not_found")
    assert_error(await client.put("/api/categories"), 405, "method_not_allowed")
    assert_error(await client.put("/api/agents/register"), 405)


NOWHERE = "postgresql://nobody@/nothing?host=/nonexistent-socket-dir&connect_timeout=1"


async def test_health_is_503_when_database_is_down() -> None:
    app = create_app(make_settings(), database_url=NOWHERE, secret=b"s" * 32)
    contract = Contract(app.openapi())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            t0 = time.monotonic()
            response = await c.get("/api/health", headers=OPERATOR)
            took = time.monotonic() - t0
    assert not contract.problems(response)
    body = assert_error(response, 503, "database_unavailable")
    assert int(response.headers["Retry-After"]) > 0
    assert body["status"] == "unhealthy" and body["metrics"]["db_connected"] is False
    assert body["parts"]["database"]["state"] == "down"
    assert "psycopg" not in response.text and "socket" not in response.text
    # Every part is asked at once, each with a deadline: a load balancer's
    # probe gets its answer in time even with the database gone.
    assert took < health_service.PROBE_TIMEOUT_S + 1.5


def _ctx(client: httpx.AsyncClient) -> AppContext:
    ctx: AppContext = client._transport.app.state.ctx  # type: ignore[attr-defined]
    return ctx


async def test_health_is_degraded_while_semantic_search_cannot_embed(
    client: httpx.AsyncClient, semantic: LocalSearch
) -> None:
    healthy = (await client.get("/api/health", headers=OPERATOR)).json()
    assert healthy["status"] == "healthy" and healthy["parts"]["search"]["state"] == "up"
    semantic.stopped = True  # the embedder is gone; the index still answers
    response = await client.get("/api/health", headers=OPERATOR)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    search = body["parts"]["search"]
    assert search["state"] == "down" and "embedder" in search["reason"]
    assert body["parts"]["database"]["state"] == "up"


async def test_health_is_degraded_while_the_dispatcher_and_trending_cannot_answer(
    client: httpx.AsyncClient, database: str
) -> None:
    ctx = _ctx(client)
    saved = ctx.dispatch
    # The real dispatcher and trending counter, pointed at a database that
    # is not there.
    dead = make_engine(NOWHERE, pool_size=1, max_overflow=0, connect_wait_s=0)
    ctx.dispatch = LocalDispatch(
        Dispatcher(dispatch_config(ctx.settings, NOWHERE, SECRET), sessions=make_sessionmaker(dead))
    )
    ctx.trending = LocalTrending(NOWHERE)
    try:
        response = await client.get("/api/health", headers=OPERATOR)
    finally:
        ctx.dispatch = saved
        await dead.dispose()
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert body["dispatch"] is None and body["trending"] is None
    for name in ("dispatcher", "trending"):
        part = body["parts"][name]
        assert part["state"] == "down" and part["reason"], name
        assert "nonexistent" not in part["reason"]
    assert body["parts"]["database"]["state"] == "up"
    assert body["parts"]["rate_limiter"]["state"] == "up"
