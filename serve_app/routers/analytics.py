"""Public site analytics."""

from __future__ import annotations

from typing import Any

from fastapi import Response

from serve_app.http.contract import api_router
from serve_app.http.deps import Ctx, PublicRead, ReadDb
from serve_app.schemas.meta import AnalyticsOut
from serve_app.services import analytics as service

router = api_router(prefix="/api", tags=["meta"])


@router.get("/analytics", dependencies=[PublicRead], response_model=AnalyticsOut)
async def analytics(response: Response, ctx: Ctx, db: ReadDb) -> dict[str, Any]:
    """Site totals, the top patterns and agents, and patterns per category (cached 5 minutes)."""
    cache: service.AnalyticsCache = ctx.caches.setdefault("analytics", service.AnalyticsCache())
    body, fresh_s = await cache.get(lambda: service.compute(db))
    response.headers["Cache-Control"] = f"public, max-age={fresh_s}"
    response.headers["Vary"] = "Authorization"  # the X-RateLimit-* headers are the caller's
    return body
