"""GET /api/notifications/stream: the caller's new notifications as
Server-Sent Events (sse-starlette), each as GET /api/notifications lists it.

The stream holds no database connection while idle: it waits on the
replica's hub (serve_app/runtime/streamhub.py) and borrows a connection only to
read its rows after its cursor: on a ring; soon again while rows it can see
are not settled yet; and on a heartbeat when the hub's listener may have
missed something (it was not connected, or reconnected, since the last look)
or every FULL_LOOK_BEATS heartbeats (docs/decisions/notifications-and-streams.md, "Notification
stream")."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Header, Query, Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from serve_app.context import AppContext
from serve_app.http.contract import api_router, errors
from serve_app.http.deps import Ctx, CurrentCaller, LongLived
from serve_app.runtime.streamhub import StreamsFull
from serve_app.services import notifications as service
from storage.repositories.notifications import Cursor

# Notifications read (and sent) per look at the database.
BATCH = 50
# How soon a browser's EventSource reconnects after the stream ends.
RETRY_MS = 1000
# Rows written but not yet settled: looked at again after this, doubling.
RECHECK_S = (0.05, 1.0)

# With a healthy listener an idle stream skips the database on its
# heartbeats, but still looks on every FULL_LOOK_BEATS-th (every 5 minutes
# at the default 15 s): a guard, not the mechanism.
FULL_LOOK_BEATS = 20

NOTIFICATION = "notification"
READY = "ready"


def _event(kind: str, data: object, event_id: str) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(data, separators=(",", ":")), event=kind, id=event_id)


async def events(
    ctx: AppContext, recipient_id: uuid.UUID, after: Cursor | None
) -> AsyncIterator[ServerSentEvent]:
    """The stream of one recipient: a ``ready`` event (its id is the starting
    cursor, so a reconnect before any notification misses nothing), then each
    notification as it settles, and a comment line on every idle heartbeat.
    Ends after ``stream_max_age_s`` (the client reconnects with its last id)
    or when the replica shuts down."""
    settings = ctx.settings
    heartbeat = settings.stream_heartbeat_s
    try:
        sub = ctx.streams.subscribe(str(recipient_id))
    except StreamsFull:
        # Lost a race for the last places since the route checked: the
        # client reconnects (perhaps to another replica) after RETRY_MS.
        yield ServerSentEvent(comment="this replica is full; reconnect", retry=RETRY_MS)
        return
    with sub:
        if after is None:
            async with ctx.read_sessions() as db:
                after = await service.stream_start(db)
        yield ServerSentEvent(
            data=json.dumps({"heartbeat_s": heartbeat}),
            event=READY,
            id=after.encode(),
            retry=RETRY_MS,
        )
        hub = ctx.streams
        now = time.monotonic()
        ends, last_sent, recheck = now + settings.stream_max_age_s, now, RECHECK_S[0]
        look, beats = True, 0
        while not sub.closed:
            if look:
                # What the listener was doing when we looked: if it stays
                # connected, every notification after this look rings us.
                seen = hub.epoch if hub.listening else None
                async with ctx.read_sessions() as db:
                    batch = await service.stream_next(db, recipient_id, after, BATCH)
                after, beats = batch.cursor, 0
                for event_id, item in batch.items:
                    yield _event(NOTIFICATION, item, event_id)
                now = time.monotonic()
                if batch.items:
                    last_sent = now
                if batch.more:
                    continue
            now = time.monotonic()
            if now >= ends:
                return
            wait = last_sent + heartbeat - now
            if batch.waiting:
                wait, recheck = min(wait, recheck), min(recheck * 2, RECHECK_S[1])
            else:
                recheck = RECHECK_S[0]
            rung = await sub.wait(max(0.0, min(wait, ends - now)))
            if time.monotonic() - last_sent >= heartbeat:
                yield ServerSentEvent(comment="ping")
                last_sent = time.monotonic()
                beats += 1
            # Look when rung, when rows were waiting to settle, and on a
            # heartbeat unless the listener has stayed connected since the
            # last look (then nothing can have been missed; a reconnect rings
            # every stream anyway); and at least every FULL_LOOK_BEATS.
            look = (
                rung
                or batch.waiting
                or seen is None
                or not hub.listening
                or hub.epoch != seen
                or beats >= FULL_LOOK_BEATS
            )


# --- the route ----------------------------------------------------------------

router = api_router(prefix="/api/notifications", tags=["notifications"])


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
        "event": {"type": "string", "enum": [READY, NOTIFICATION]},
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
        events(ctx, caller.agent.id, after),
        # Our own heartbeat (a comment line, and a look at the database) is
        # sent by the stream itself.
        ping=0,
        headers={
            **{k: v for k, v in response.headers.items() if k.lower().startswith("x-ratelimit")},
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        },
    )
