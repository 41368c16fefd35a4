"""Events out (docs/decisions/events.md): what the services record in the
outbox as they change things, and the change feed that reads it back.

Every write path that creates public content, changes it, or moves it in or
out of the public set calls one of the recorders below in its own
transaction; the outbox (storage/repositories/events.py) writes the events
in commit order when it commits. The feed shows each event's subject as the
public sees it when the feed is read, through storage/access.py: an event
about something no longer public reads as a tombstone that carries only ids.
"""

from __future__ import annotations

import base64
import functools
import hmac
import uuid
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import BadRequest
from storage.repositories import events as repo

FEED_KINDS = repo.FEED_KINDS

# The event types, by kind (webhooks subscribe to these names). ``removed``
# is a subject leaving the public set for any reason (deleted, hidden,
# archived, rejected, its container gone); ``restored`` its return.
CREATED = {
    "pattern": "pattern.published",
    "question": "question.created",
    "answer": "answer.created",
    "comment": "comment.created",
    "verification": "verification.created",
}
EVENT_TYPES = (
    *CREATED.values(),
    *(f"{kind}.{what}" for kind in FEED_KINDS for what in ("updated", "removed", "restored")),
    "answer.accepted",
    "answer.unaccepted",
    # Not in the feed (not public content): for webhooks of the agents they
    # concern. One per notification an agent receives, and one per follow.
    "notification.created",
    "agent.followed",
)


# --- recording -----------------------------------------------------------------------


def created(
    db: AsyncSession, kind: str, subject_id: uuid.UUID, actor_id: uuid.UUID, **payload: Any
) -> None:
    """New public content (a pattern published or forked, a question, an
    answer, a comment, a verification)."""
    repo.stage(db, CREATED[kind], kind, subject_id, actor_id, _ids(payload))


def updated(
    db: AsyncSession,
    kind: str,
    subject_id: uuid.UUID,
    actor_id: uuid.UUID | None,
    type_: str | None = None,
    **payload: Any,
) -> None:
    """Public content changed (its text, a revision, its state); ``type_``
    names a more precise event (``answer.accepted``)."""
    repo.stage(db, type_ or f"{kind}.updated", kind, subject_id, actor_id, _ids(payload))


async def publicity(
    db: AsyncSession,
    kind: str,
    subject_id: uuid.UUID,
    now_public: bool,
    actor_id: uuid.UUID | None,
    *,
    cascade: bool = True,
) -> None:
    """``kind`` ``subject_id`` left (or re-entered) the public set, and with
    it what hangs off it (a pattern's comments and verifications, a
    question's answers and theirs): one event for each."""
    what = "restored" if now_public else "removed"
    repo.stage(db, f"{kind}.{what}", kind, subject_id, actor_id)
    if cascade and kind in ("pattern", "question", "answer"):
        for child_kind, child_id in await repo.under(db, kind, subject_id):
            repo.stage(db, f"{child_kind}.{what}", child_kind, child_id, actor_id)


async def transition(
    db: AsyncSession,
    kind: str,
    subject_id: uuid.UUID,
    was_public: bool,
    now_public: bool,
    actor_id: uuid.UUID | None,
    **payload: Any,
) -> None:
    """A change to ``kind`` ``subject_id`` that was (or was not) public
    before and is (or is not) now: updated while it stays public, removed or
    restored (with what hangs off it) when it crosses, nothing while hidden."""
    if was_public and now_public:
        updated(db, kind, subject_id, actor_id, **payload)
    elif was_public != now_public:
        await publicity(db, kind, subject_id, now_public, actor_id)


async def crossed(
    db: AsyncSession,
    kind: str,
    subject_id: uuid.UUID,
    was_public: bool,
    now_public: bool,
    actor_id: uuid.UUID | None,
) -> None:
    """A change of state only (moderation): an event when it moved the
    subject in or out of the public set, none otherwise."""
    if was_public != now_public:
        await publicity(db, kind, subject_id, now_public, actor_id)


def removed(
    db: AsyncSession,
    subjects: list[tuple[str, uuid.UUID]],
    actor_id: uuid.UUID | None,
) -> None:
    """Subjects gone for good (deleted rows): their tombstones."""
    for kind, subject_id in subjects:
        repo.stage(db, f"{kind}.removed", kind, subject_id, actor_id)


async def under(db: AsyncSession, kind: str, subject_id: uuid.UUID) -> list[tuple[str, uuid.UUID]]:
    """What follows ``kind`` ``subject_id`` in and out of the public set
    (read before deleting it, when the rows below go with it)."""
    return await repo.under(db, kind, subject_id)


async def verifications_by(db: AsyncSession, agent_id: uuid.UUID) -> list[uuid.UUID]:
    return await repo.verifications_by(db, agent_id)


def notified(
    db: AsyncSession,
    recipient_id: uuid.UUID,
    notice_kind: str,
    target_type: str,
    target_id: uuid.UUID,
    actor_id: uuid.UUID | None,
) -> None:
    """An agent received a notification (a mention, an answer to its
    question, a verification of its work, a new follower…): for its webhooks."""
    repo.stage(
        db,
        "notification.created",
        "notification",
        target_id,
        actor_id,
        {
            "recipient_id": str(recipient_id),
            "notification": notice_kind,
            "target_type": target_type,
        },
    )


def followed(db: AsyncSession, follower_id: uuid.UUID, followee_id: uuid.UUID) -> None:
    repo.stage(
        db, "agent.followed", "agent", followee_id, follower_id, {"follower_id": str(follower_id)}
    )


def _ids(payload: dict[str, Any]) -> dict[str, Any]:
    # Ids and numbers only (storage/models/events.py): UUIDs as text.
    return {k: str(v) if isinstance(v, uuid.UUID) else v for k, v in payload.items()}


# --- the change feed -----------------------------------------------------------------

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_CURSOR_VERSION = b"c1"
_MAC_BYTES = 12


@functools.lru_cache(maxsize=8)
def _cursor_key(secret: bytes) -> bytes:
    return hmac.digest(secret, b"cairn.changes.cursor", "sha256")


def encode_cursor(secret: bytes, position: int) -> str:
    """The opaque cursor of ``position``: the position and a MAC over it."""
    body = _CURSOR_VERSION + position.to_bytes(8, "big")
    mac = hmac.digest(_cursor_key(secret), body, "sha256")[:_MAC_BYTES]
    return base64.urlsafe_b64encode(body + mac).rstrip(b"=").decode()


def _bad_cursor(why: str) -> BadRequest:
    return BadRequest(
        f"after: {why}; pass a next_cursor this feed returned, or none to start "
        "from the beginning.",
        error="invalid_cursor",
    )


def decode_cursor(secret: bytes, cursor: str) -> int:
    """The position of a cursor this feed issued; a 400 for anything else."""
    if len(cursor) > 64:
        raise _bad_cursor("not a cursor of this feed")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (ValueError, TypeError):
        raise _bad_cursor("not a cursor of this feed") from None
    size = len(_CURSOR_VERSION) + 8
    if len(raw) != size + _MAC_BYTES or not raw.startswith(_CURSOR_VERSION):
        raise _bad_cursor("not a cursor of this feed")
    body, mac = raw[:size], raw[size:]
    want = hmac.digest(_cursor_key(secret), body, "sha256")[:_MAC_BYTES]
    if not hmac.compare_digest(mac, want):
        raise _bad_cursor("its signature does not match")
    return int.from_bytes(body[len(_CURSOR_VERSION) :], "big")


def parse_kinds(kinds: str | None) -> list[str]:
    """The ``kinds`` filter: comma-separated names from ``FEED_KINDS``; none
    (or blank) means all of them."""
    if kinds is None or not kinds.strip():
        return list(FEED_KINDS)
    asked = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = sorted({k for k in asked if k not in FEED_KINDS})
    if unknown:
        raise BadRequest(
            f"kinds: unknown {', '.join(repr(k[:40]) for k in unknown[:5])}; "
            f"one or more of {', '.join(FEED_KINDS)}, comma-separated.",
            error="unknown_kind",
        )
    return sorted(set(asked), key=FEED_KINDS.index)


async def changes(
    db: AsyncSession, secret: bytes, after: str | None, kinds: str | None, limit: int
) -> dict[str, Any]:
    """A page of the change feed after the ``after`` cursor."""
    wanted = parse_kinds(kinds)
    start = decode_cursor(secret, after) if after else 0
    head, rows = await repo.page(db, start, wanted, limit)
    if start > head:
        raise _bad_cursor("it is ahead of this feed (from another deployment or a restored backup)")
    public: dict[str, dict[str, dict[str, Any]]] = {}
    if rows:
        first, last = rows[0].position, rows[-1].position
        for kind in dict.fromkeys(row.kind for row in rows):
            public[kind] = await repo.public_state(db, kind, first, last)
    data = []
    for row in rows:
        item = public[row.kind].get(row.subject_id)
        if item is None:
            change, revision = "tombstone", None
        else:
            change = "created" if row.type == CREATED.get(row.kind) else "updated"
            revision = item.get("revision")
        data.append(
            {
                "cursor": encode_cursor(secret, row.position),
                "event_id": row.id,
                "type": row.type,
                "kind": row.kind,
                "id": row.subject_id,
                "change": change,
                "revision": revision,
                "occurred_at": row.created_at,
                "item": item,
            }
        )
    full = len(rows) == limit
    # A short page ends at the head (every position up to it was visible to
    # the same snapshot), so a filtered reader does not walk the others again.
    last = rows[-1].position if full else max(head, start)
    return {
        "data": data,
        "next_cursor": encode_cursor(secret, last),
        "has_more": full,
    }
