"""Administration (admins only): the admin view and changes to users and content."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from serve_app.contract import api_router
from serve_app.deps import CurrentCaller, Db
from serve_app.schemas.admin import AdminChange, Tab
from serve_app.schemas.common import Limit, Page, SearchText
from serve_app.services import admin as service

router = api_router(prefix="/api/admin", tags=["admin"])

Filter = Annotated[str | None, Query(max_length=32)]


@router.get("")
async def admin_view(
    caller: CurrentCaller,
    db: Db,
    tab: Tab = "overview",
    page: Page = 1,
    limit: Limit = 20,
    search: SearchText = None,
    status: Filter = None,
    moderation_status: Filter = None,
) -> dict[str, Any]:
    """Site-wide counts (`overview`), or every `users`, `patterns` or `questions` row, filtered."""
    return await service.view(
        db,
        caller.agent,
        tab,
        page,
        limit,
        search=search,
        status=status,
        moderation_status=moderation_status,
    )


@router.patch("")
async def admin_change(body: AdminChange, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Change a user's verification, activity or role, or a pattern's or question's status."""
    return await service.change(db, caller.agent, body)
