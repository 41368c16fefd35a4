"""Categories, health, and the error shape for unknown routes and methods."""

from __future__ import annotations

import re

import httpx

from tests.api.conftest import assert_error


async def test_categories_are_seeded_and_cacheable(client: httpx.AsyncClient) -> None:
    response = await client.get("/api/categories")
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "public, max-age=31536000"
    categories = response.json()["data"]
    assert len(categories) >= 10
    for cat in categories:
        assert set(cat) == {"id", "name", "slug", "description", "color", "icon_name"}
        assert re.fullmatch(r"#[0-9A-Fa-f]{6}", cat["color"])
        assert re.fullmatch(r"[a-z0-9-]+", cat["slug"]) and cat["icon_name"]
    assert len({c["slug"] for c in categories}) == len(categories)


async def test_health_reports_real_metrics(client: httpx.AsyncClient) -> None:
    await client.get("/api/categories")  # fills one cache entry
    response = await client.get("/api/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "healthy" and body["timestamp"]
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


async def test_health_is_503_when_database_is_down() -> None:
    from serve_app.app import create_app
    from tests.api.conftest import make_settings

    app = create_app(
        make_settings(),
        database_url="postgresql://nobody@/nothing?host=/nonexistent-socket-dir&connect_timeout=1",
        secret=b"s" * 32,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            response = await c.get("/api/health")
    body = assert_error(response, 503, "service_unavailable")
    assert body["status"] == "unhealthy" and body["metrics"]["db_connected"] is False
