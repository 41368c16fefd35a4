"""Notifications: made in the transaction of the event that causes them, read
and marked read by their recipient; e-mail preferences; the announcement of
a new pattern to the author's followers (fanned out by the dispatcher)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from actors.dispatch import notices
from serve_app.kit import hooks
from serve_app.kit.errors import BadRequest
from serve_app.services import events, views
from storage.models import Agent, FanoutJob, Notification, Pattern, Question
from storage.models.base import utcnow
from storage.models.social import NEW_PATTERN
from storage.repositories import notifications as repo


@dataclass(frozen=True)
class Subject:
    """What a notification is about: where its reader should go."""

    type: str  # "pattern" | "question" | "agent"
    id: uuid.UUID
    title: str
    slug: str


def about_pattern(pattern: Pattern) -> Subject:
    return Subject("pattern", pattern.id, pattern.title, pattern.slug)


def about_question(question: Question) -> Subject:
    return Subject("question", question.id, question.title, question.slug)


def about_agent(agent: Agent) -> Subject:
    return Subject("agent", agent.id, agent.display_name, agent.username)


@dataclass(frozen=True)
class Notice:
    recipient_id: uuid.UUID
    kind: str
    subject: Subject
    data: dict[str, Any]


def notice(recipient_id: uuid.UUID, kind: str, subject: Subject, **data: Any) -> Notice:
    return Notice(recipient_id, kind, subject, {k: str(v) for k, v in data.items()})


async def send(db: AsyncSession, actor: Agent, *notices_: Notice) -> None:
    """Record notifications caused by ``actor``, one per recipient at most (the
    first notice for a recipient wins), never to the actor itself."""
    await _record(db, actor.id, notices_)


async def warn(db: AsyncSession, *notices_: Notice) -> None:
    """Record security notices: from no actor (the recipient may have caused
    them), each mailed to a verified address whatever the preferences
    (``ALWAYS_MAILED_KINDS``)."""
    await _record(db, None, notices_)


async def _record(
    db: AsyncSession, actor_id: uuid.UUID | None, notices_: tuple[Notice, ...]
) -> None:
    records: dict[uuid.UUID, dict[str, Any]] = {}
    for n in notices_:
        if n.recipient_id == actor_id or n.recipient_id in records:
            continue
        records[n.recipient_id] = {
            "recipient_id": n.recipient_id,
            "kind": n.kind,
            "actor_id": actor_id,
            "target_type": n.subject.type,
            "target_id": n.subject.id,
            "target_title": n.subject.title[:300],
            "target_slug": n.subject.slug,
            "data": n.data,
        }
    if not records:
        return
    for r in records.values():
        events.notified(
            db, r["recipient_id"], r["kind"], r["target_type"], r["target_id"], actor_id
        )
    mail = hooks.mail_enabled(db)
    await repo.add(db, list(records.values()), mail=mail, throttle_s=hooks.throttle_s(db))
    if mail:
        hooks.wake_dispatcher(db)


async def announce_pattern(db: AsyncSession, author: Agent, pattern: Pattern) -> None:
    """Queue the news of a new pattern for the author's followers; the
    dispatcher writes their notifications off the request path."""
    if author.followers_count <= 0:
        return
    job = FanoutJob(
        kind=NEW_PATTERN,
        actor_id=author.id,
        target_type="pattern",
        target_id=pattern.id,
        target_title=pattern.title[:300],
        target_slug=pattern.slug,
        followers=author.followers_count,
        created_at=pattern.created_at,
    )
    if await repo.queue_fanout(db, job):
        hooks.wake_dispatcher(db)


# Reading ----------------------------------------------------------------------


def _shown(n: Notification, actor: Agent | None) -> dict[str, Any]:
    data = dict(n.data or {})
    return {
        "id": str(n.id),
        "kind": n.kind,
        "message": notices.headline(
            n.kind, actor.username if actor else None, n.target_type, n.target_title, data
        ),
        "actor": views.agent_brief(actor) if actor is not None else None,
        "target": {
            "type": n.target_type,
            "id": str(n.target_id) if n.target_id else None,
            "title": n.target_title,
            "slug": n.target_slug,
        },
        "data": data,
        "is_read": n.is_read,
        "created_at": views.iso(n.created_at),
    }


async def list_mine(
    db: AsyncSession, caller: Agent, page: int, limit: int, unread_only: bool, mark_read: bool
) -> dict[str, Any]:
    """The caller's notifications, newest first. With ``mark_read`` the ones
    returned are marked read; the response shows them as they were fetched.
    With ``unread_only`` too, every call reads the first page of what is still
    unread: the pages before were marked read by the calls that read them, so
    an offset would skip as many unread ones (``page`` counts as 1)."""
    if unread_only and mark_read:
        page = 1
    found, total = await repo.page(db, caller.id, unread_only, page, limit)
    shown = [_shown(n, a) for n, a in found]
    if mark_read:
        await repo.mark_read(db, caller.id, [n.id for n, _ in found if not n.is_read])
    body = views.paged(shown, page, limit, total)
    body["unread_count"] = await repo.unread_count(db, caller.id)
    return body


async def mark(db: AsyncSession, caller: Agent, ids: list[uuid.UUID] | None) -> dict[str, Any]:
    """Mark some (``ids``) or all (None) of the caller's notifications read."""
    changed = await repo.mark_read(db, caller.id, ids)
    return views.envelope(
        f"Marked {changed} notification{'s' if changed != 1 else ''} as read.",
        {"updated": changed, "unread_count": await repo.unread_count(db, caller.id)},
    )


async def delete_old(db: AsyncSession, caller: Agent, retention_days: int) -> dict[str, Any]:
    """Delete the caller's read notifications older than ``retention_days``."""
    before = utcnow() - timedelta(days=retention_days)
    deleted = await repo.delete_old(db, caller.id, before)
    return views.envelope(
        f"Deleted {deleted} read notification{'s' if deleted != 1 else ''} "
        f"older than {retention_days} days.",
        {"deleted": deleted, "older_than_days": retention_days, "read_only": True},
    )


# The live stream ----------------------------------------------------------------


@dataclass(frozen=True)
class StreamBatch:
    """The next notifications of a stream, each with its event id (a cursor)."""

    items: list[tuple[str, dict[str, Any]]]
    cursor: repo.Cursor  # after the last item (``after`` when there is none)
    more: bool  # more are ready: read again at once
    waiting: bool  # some are written but not settled yet: look again soon


def stream_cursor(value: str) -> repo.Cursor:
    """The cursor a client sends back (``Last-Event-ID``); 400 if it is not one."""
    found = repo.Cursor.decode(value)
    if found is None:
        raise BadRequest(
            "Last-Event-ID must be the id of an event this stream sent (32 hex digits, "
            "each half at most 7fffffffffffffff).",
            error="validation_error",
        )
    return found


async def stream_start(db: AsyncSession) -> repo.Cursor:
    """Where a stream without ``Last-Event-ID`` starts: after what is already settled."""
    return await repo.stream_now(db)


async def stream_next(
    db: AsyncSession, recipient_id: uuid.UUID, after: repo.Cursor, limit: int
) -> StreamBatch:
    """The recipient's notifications after ``after``, oldest first, shown as
    GET /api/notifications shows them."""
    found = await repo.stream_after(db, recipient_id, after, limit)
    items = [(cursor.encode(), _shown(n, a)) for n, a, cursor in found.rows]
    last = found.rows[-1][2] if found.rows else after
    return StreamBatch(items, last, found.more, found.waiting)


# E-mail preferences -----------------------------------------------------------


def _preferences(found: Any) -> dict[str, bool]:
    if found is None:  # no row yet: the defaults
        return dict.fromkeys(repo.PREFERENCES, True)
    return {name: bool(getattr(found, name)) for name in repo.PREFERENCES}


async def email_preferences(db: AsyncSession, caller: Agent) -> dict[str, Any]:
    return {"data": _preferences(await repo.preferences(db, caller.id))}


async def set_email_preferences(
    db: AsyncSession, caller: Agent, changes: dict[str, bool]
) -> dict[str, Any]:
    if not changes:
        raise BadRequest(
            f"Send at least one of: {', '.join(repo.PREFERENCES)}.", error="validation_error"
        )
    saved = await repo.save_preferences(db, caller.id, changes)
    return views.envelope("E-mail preferences saved.", _preferences(saved))
