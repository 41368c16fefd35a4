"""Categories and health."""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from serve_app.contract import RATE_LIMIT_HEADERS, api_router
from serve_app.deps import Ctx, PublicRead, ReadDb
from serve_app.errors import DATABASE_RETRY_AFTER_S, database_unavailable
from serve_app.schemas.common import DataOut
from serve_app.schemas.meta import CategoryOut, HealthOut, HealthUnavailableOut
from serve_app.services import health as health_service
from serve_app.services import views
from storage.repositories import categories as category_repo

router = api_router(prefix="/api", tags=["meta"])

CATEGORY_CACHE_CONTROL = "public, max-age=31536000"


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
            "description": "`unhealthy`: the database cannot be reached "
            "(`database_unavailable`), with the measurements and the parts.",
            "headers": {"Retry-After": RATE_LIMIT_HEADERS["Retry-After"]},
        }
    },
)
async def health(request: Request, ctx: Ctx) -> dict[str, Any] | JSONResponse:
    """What works now: `healthy`, `degraded` (a part is down, see `parts`) or
    `unhealthy` (503, the database); with real measurements."""
    started = request.scope.get("cairn.start", time.perf_counter())
    status, body = await health_service.report(ctx, started)
    if status == 503:
        return JSONResponse(
            {**database_unavailable(), **body},
            status_code=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )
    return body
