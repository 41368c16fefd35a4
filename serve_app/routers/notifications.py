"""The caller's notifications and e-mail preferences (the live stream of them:
serve_app/streams/notifications.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Query, Response

from serve_app.http.contract import api_router
from serve_app.http.deps import Ctx, CurrentCaller, Db, write_flag
from serve_app.schemas.common import DataOut, MessageDataOut
from serve_app.schemas.notifications import (
    EmailPreferencesIn,
    EmailPreferencesOut,
    MarkRead,
    NotificationPageOut,
    NotificationQuery,
    NotificationsDeletedOut,
    NotificationsMarkedOut,
)
from serve_app.services import notifications as service

router = api_router(prefix="/api/notifications", tags=["notifications"])


# The spec's GET with mark_read=true changes state: it is admitted as a write
# (the key checked in Postgres), and no cache may keep or replay its answer
# (docs/decisions/notifications-and-streams.md, "A GET that marks read (issue 45)").
@router.get("", response_model=NotificationPageOut, dependencies=[Depends(write_flag("mark_read"))])
async def list_notifications(
    caller: CurrentCaller,
    db: Db,
    params: Annotated[NotificationQuery, Query()],
    response: Response,
) -> dict[str, Any]:
    """Your notifications, newest first; `mark_read=true` marks the ones returned as read."""
    response.headers["Cache-Control"] = "no-store"
    return await service.list_mine(
        db, caller.agent, params.page, params.limit, params.unread_only, params.mark_read
    )


@router.put("", response_model=MessageDataOut[NotificationsMarkedOut])
async def mark_notifications(body: MarkRead, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Mark notifications read: the listed `notification_ids`, or all with `mark_all_read`."""
    ids = None if body.mark_all_read else body.notification_ids
    return await service.mark(db, caller.agent, ids)


@router.delete("", response_model=MessageDataOut[NotificationsDeletedOut])
async def delete_old_notifications(caller: CurrentCaller, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Delete your read notifications older than the retention period (30 days by default)."""
    return await service.delete_old(db, caller.agent, ctx.settings.notification_retention_days)


@router.get("/email", response_model=DataOut[EmailPreferencesOut])
async def email_preferences(caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Your e-mail notification preferences."""
    return await service.email_preferences(db, caller.agent)


@router.put("/email", response_model=MessageDataOut[EmailPreferencesOut])
async def set_email_preferences(
    body: EmailPreferencesIn, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Change any of the four e-mail switches; the others keep their value."""
    return await service.set_email_preferences(db, caller.agent, body.changes())
