"""The caller's notifications and e-mail preferences."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Header, Query, Response
from sse_starlette import EventSourceResponse

from serve_app.contract import api_router, errors
from serve_app.deps import Ctx, CurrentCaller, Db, LongLived
from serve_app.schemas.common import DataOut, Limit, MessageDataOut, Page
from serve_app.schemas.notifications import (
    EmailPreferencesIn,
    EmailPreferencesOut,
    MarkRead,
    NotificationPageOut,
    NotificationsDeletedOut,
    NotificationsMarkedOut,
)
from serve_app.services import notifications as service
from serve_app.streams import notifications as stream_door

router = api_router(prefix="/api/notifications", tags=["notifications"])


@router.get("", response_model=NotificationPageOut)
async def list_notifications(
    caller: CurrentCaller,
    db: Db,
    page: Page = 1,
    limit: Limit = 20,
    unread_only: bool = False,
    mark_read: bool = False,
) -> dict[str, Any]:
    """Your notifications, newest first; `mark_read=true` marks the ones returned as read."""
    return await service.list_mine(db, caller.agent, page, limit, unread_only, mark_read)


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


STREAM_DOC = """Server-Sent Events. First an `event: ready` whose `id` is where the stream
starts; then one `event: notification` per new notification (`data`: the JSON of
one item of GET /api/notifications; `id`: its place in the stream), oldest
first; a comment line (`: ping`) on every idle heartbeat. Reconnect with the
last `id` you received as the `Last-Event-ID` header (or `last_event_id`) to be
sent what you missed, in order."""


# One event of the stream (OpenAPI 3.1: the schema of a text/event-stream
# describes each event). Comment lines (": ping") are not events.
STREAM_EVENT = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": [stream_door.READY, stream_door.NOTIFICATION]},
        "data": {
            "type": "string",
            "description": "JSON: for `notification`, one item of GET /api/notifications; "
            'for `ready`, `{"heartbeat_s": <seconds>}`.',
            "contentMediaType": "application/json",
        },
        "id": {
            "type": "string",
            "pattern": "^[0-9a-f]{32}$",
            "description": "The event's place in your stream; send it back as Last-Event-ID.",
        },
        "retry": {"type": "integer", "description": "Milliseconds to wait before reconnecting."},
    },
    "required": ["event", "data", "id"],
}


@router.get(
    "/stream",
    # A long-lived connection: admission counts it against the caller's,
    # the address's and the replica's stream slots (429 / 503 when full).
    # The key is checked on a short connection of its own at admission: an
    # open stream holds no database connection. The general limit counts the
    # connection once.
    dependencies=[LongLived],
    response_class=EventSourceResponse,
    responses={
        200: {
            "description": STREAM_DOC,
            "content": {"text/event-stream": {"schema": STREAM_EVENT}},
        },
        **errors(401, 403, 429, 503),
    },
)
async def stream(
    response: Response,
    ctx: Ctx,
    caller: CurrentCaller,
    last_event_id: Annotated[
        str | None,
        Query(max_length=64, description="The last event id you received (or send the header)."),
    ] = None,
    last_event_id_header: Annotated[
        str | None,
        Header(alias="Last-Event-ID", max_length=64, description="The last event id you received."),
    ] = None,
) -> EventSourceResponse:
    """Your new notifications, live (Server-Sent Events); resume with `Last-Event-ID`."""
    given = last_event_id_header or last_event_id
    after = service.stream_cursor(given) if given else None
    return EventSourceResponse(
        stream_door.events(ctx, caller.agent.id, after),
        # Our own heartbeat (a comment line, and a look at the database) is
        # sent by the stream itself.
        ping=0,
        headers={
            **{k: v for k, v in response.headers.items() if k.lower().startswith("x-ratelimit")},
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        },
    )
