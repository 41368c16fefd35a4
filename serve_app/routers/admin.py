"""Administration (admins only): the admin view and changes to users and content."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from serve_app.http.contract import api_router, errors
from serve_app.http.deps import CurrentCaller, Db, needs_scope
from serve_app.kit import keys
from serve_app.schemas.admin import (
    AdminChange,
    AdminChangeOut,
    AdminViewOut,
    ModerationStatus,
    StatusFilter,
    Tab,
)
from serve_app.schemas.common import Limit, Page, SearchText
from serve_app.services import admin as service

# Staff routes: an API key needs the ``admin`` scope (docs/decisions/api-keys.md).
router = api_router(prefix="/api/admin", tags=["admin"], dependencies=[needs_scope(keys.KEY_ADMIN)])


@router.get("", response_model=AdminViewOut, responses=errors(403))
async def admin_view(
    caller: CurrentCaller,
    db: Db,
    tab: Tab = "overview",
    page: Page = 1,
    limit: Limit = 20,
    search: SearchText = None,
    status: Annotated[
        StatusFilter | None,
        Query(
            description="users: active, inactive; patterns: published, archived; "
            "questions: open, closed, deleted (none on the overview)."
        ),
    ] = None,
    moderation_status: Annotated[
        ModerationStatus | None,
        Query(description="patterns and questions only."),
    ] = None,
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


# 403: not an admin, or a change to your own role or activity; 404: no such
# row; 409: approving or rejecting a deleted question without restoring it.
@router.patch("", response_model=AdminChangeOut, responses=errors(403, 404, 409))
async def admin_change(body: AdminChange, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Change a user's verification, activity or role, or a pattern's or question's status."""
    return await service.change(db, caller.agent, body)
