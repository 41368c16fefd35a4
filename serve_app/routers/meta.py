"""Categories and health."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import psutil
from fastapi import Request, Response
from fastapi.responses import JSONResponse

from serve_app.contract import api_router
from serve_app.deps import Ctx, PublicRead, ReadDb
from serve_app.errors import error_body
from serve_app.schemas.common import DataOut
from serve_app.schemas.meta import CategoryOut, HealthOut, HealthUnavailableOut
from serve_app.services import views
from storage.repositories import categories as category_repo
from storage.repositories import health as health_repo

router = api_router(prefix="/api", tags=["meta"])

CATEGORY_CACHE_CONTROL = "public, max-age=31536000"
_PROCESS = psutil.Process()


@router.get("/categories", dependencies=[PublicRead], response_model=DataOut[list[CategoryOut]])
async def categories(response: Response, ctx: Ctx, db: ReadDb) -> dict[str, Any]:
    """The category list (cacheable for one year)."""
    cached = ctx.caches.get("categories")
    if cached is None:
        cached = [views.category(c) for c in await category_repo.all_ordered(db)]
        ctx.caches["categories"] = cached
    response.headers["Cache-Control"] = CATEGORY_CACHE_CONTROL
    return {"data": cached}


@router.get(
    "/health",
    response_model=HealthOut,
    responses={
        503: {
            "model": HealthUnavailableOut,
            "description": "The database is unreachable (`service_unavailable`), with the "
            "measurements.",
        }
    },
)
async def health(request: Request, ctx: Ctx) -> dict[str, Any] | JSONResponse:
    """Liveness with real measurements: database round trip, memory, caches."""
    started = request.scope.get("cairn.start", time.perf_counter())
    db_ok = True
    t0 = time.perf_counter()
    try:
        await health_repo.ping(ctx.engine)
    except Exception:
        db_ok = False
    db_ms = (time.perf_counter() - t0) * 1000
    body: dict[str, Any] = {
        "status": "healthy" if db_ok else "unhealthy",
        "timestamp": datetime.now(UTC).isoformat(),
        "metrics": {
            "response_time_ms": 0.0,
            "db_latency_ms": round(db_ms, 3) if db_ok else None,
            "db_connected": db_ok,
            "cache_entries": ctx.cache_entries(),
            "memory_usage_mb": round(_PROCESS.memory_info().rss / 1_048_576, 1),
            "uptime_s": round(time.time() - ctx.started_at, 1),
        },
        # The trending counter's state; null while it cannot answer (the feed
        # then ranks from Postgres, so this does not make the service unhealthy).
        "trending": await ctx.trending.stats(),
        # The notification queues (fan-out jobs, e-mail) and the dispatcher's
        # counters; null while it cannot answer.
        "dispatch": await ctx.dispatch.stats(),
        # The vector index and its worker (model, sizes, pending jobs); null
        # while semantic search cannot answer (search then runs on full text).
        "search": await ctx.search.stats(),
        # This replica's BM25 index (serve_app/lexical.py): built yet, sizes,
        # changes followed; null with CAIRN_SEARCH_LEXICAL=false.
        "lexical": ctx.lexical.stats() if ctx.lexical is not None else None,
        # Image checks on this replica: slots, running now, refused as busy.
        "uploads": ctx.decodes.stats(),
    }
    body["metrics"]["response_time_ms"] = round((time.perf_counter() - started) * 1000, 3)
    if not db_ok:
        return JSONResponse(
            {**error_body("service_unavailable", "The database is unreachable."), **body},
            status_code=503,
        )
    return body
