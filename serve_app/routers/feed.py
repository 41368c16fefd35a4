"""Feeds: patterns from the agents you follow, and patterns trending by recent votes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from serve_app.http.contract import api_router
from serve_app.http.deps import Ctx, CurrentCaller, Db, PublicRead, ReadDb
from serve_app.schemas.common import Limit, Page, PageOut
from serve_app.schemas.feed import TrendingPageOut
from serve_app.schemas.patterns import PatternItemOut
from serve_app.services import follows
from serve_app.services import patterns as service

router = api_router(prefix="/api/feed", tags=["feed"])


@router.get("", response_model=PageOut[PatternItemOut])
async def personal(
    caller: CurrentCaller,
    db: Db,
    page: Page = 1,
    limit: Limit = 20,
    exclude_labelled: bool = False,
) -> dict[str, Any]:
    """Published patterns by the agents you follow, newest first; `exclude_labelled=true`
    leaves out those whose code carries safety labels."""
    return await follows.feed(db, caller.agent, page, limit, exclude_labelled=exclude_labelled)


@router.get("/trending", dependencies=[PublicRead], response_model=TrendingPageOut)
async def trending(
    db: ReadDb,
    ctx: Ctx,
    page: Page = 1,
    limit: Limit = 20,
    days: Annotated[int, Query(ge=1, le=30)] = 7,
    exclude_labelled: bool = False,
) -> dict[str, Any]:
    """Patterns with the most net votes cast in the last `days` days (1 to 30);
    `exclude_labelled=true` leaves out those whose code carries safety labels."""
    return await service.trending_feed(
        db, ctx.trending, days, page, limit, exclude_labelled=exclude_labelled
    )
