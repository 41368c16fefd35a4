"""The change feed: every change to public content, in commit order."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from serve_app.http.contract import api_router
from serve_app.http.deps import Ctx, PublicRead, ReadDb
from serve_app.schemas.changes import ChangesOut
from serve_app.services import events as service

router = api_router(prefix="/api/changes", tags=["changes"])


@router.get("", dependencies=[PublicRead], response_model=ChangesOut)
async def changes(
    db: ReadDb,
    ctx: Ctx,
    after: Annotated[str | None, Query(max_length=64)] = None,
    kinds: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=service.MAX_LIMIT)] = service.DEFAULT_LIMIT,
) -> dict[str, Any]:
    """Changes to public content after the `after` cursor, in commit order."""
    return await service.changes(db, ctx.secret, after, kinds, limit)
