"""Categories and health."""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from serve_app.http import admission
from serve_app.http.contract import RATE_LIMIT_HEADERS, api_router
from serve_app.http.deps import Ctx, PublicRead, ReadDb
from serve_app.kit.errors import DATABASE_RETRY_AFTER_S, database_unavailable
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
    # Shared caches keep one copy per credential: the body is everyone's, the
    # X-RateLimit-* headers are the caller's (as GitHub's API does).
    response.headers["Vary"] = "Authorization"
    return {"data": cached}


# Anonymous callers count a per-address rule of its own (a monitor polls it);
# a sent key is checked and counts the agent's budget.
HEALTH = admission.Policy("optional", anonymous="health")


@router.get(
    "/health",
    dependencies=[admission.declare(HEALTH)],
    response_model=HealthOut,
    response_model_exclude_unset=True,
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
    """What works now: `healthy`, `degraded` (a part is down) or `unhealthy`
    (503, the database); with real measurements. Per-part details for staff
    and the operator token."""
    started = request.scope.get("cairn.start", time.perf_counter())
    caller = admission.admitted(request).caller
    detailed = (caller is not None and caller.is_staff) or admission.is_operator(ctx, request)
    status, body = await health_service.report(ctx, started, detailed=detailed)
    if status == 503:
        return JSONResponse(
            {**database_unavailable(), **body},
            status_code=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )
    return body
