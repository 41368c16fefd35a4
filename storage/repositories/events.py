"""SQL of the outbox (docs/decisions/events.md): events staged on the
session during a transaction are written, with their positions, just before
it commits; the change feed reads them back in position (commit) order and
shows each subject as the public sees it now.

Commit order. Each transaction that staged events takes the row lock of the
one-row ``event_clock`` in ``before_commit`` (the last statement before
COMMIT), advances it by its number of events and inserts them with those
positions. The lock is held until COMMIT ends, and Postgres makes a
transaction visible before it releases its locks, so the next holder's
positions are higher than every position already visible, and a snapshot
that shows a position shows every lower one. A reader that pages by
``position > cursor`` therefore never skips an event that commits later
(tests/api/test_changes.py races writers against a reader to prove it).
Rolled-back transactions roll their advance back too: positions have no gaps
(until compaction deletes superseded events behind its horizon, below).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.orm import Session
from sqlmodel.ext.asyncio.session import AsyncSession

from storage import access
from storage.db import fetch_tuples
from storage.models.events import Event

# What the change feed carries: public content. Other kinds (a follow) are
# outbox events for subscribers only (webhooks), never in the feed.
FEED_KINDS = ("pattern", "question", "answer", "comment", "verification")

_STAGED = "cairn.events"
# Notified (delivered at COMMIT, one per transaction) to wake the webhook
# deliverer: no round trip of its own, it rides on the clock's statement.
CHANNEL = "cairn_events"

_ADVANCE = text(
    """
    INSERT INTO event_clock AS c (id, position) VALUES (1, :n)
    ON CONFLICT (id) DO UPDATE SET position = c.position + :n
    RETURNING position, pg_notify('cairn_events', '')::text
    """
)


@dataclass(frozen=True)
class Staged:
    id: uuid.UUID
    type: str
    kind: str
    subject_id: uuid.UUID
    actor_id: uuid.UUID | None
    payload: dict[str, Any] = field(default_factory=dict)


def stage(
    session: AsyncSession,
    type_: str,
    kind: str,
    subject_id: uuid.UUID,
    actor_id: uuid.UUID | None = None,
    payload: dict[str, Any] | None = None,
) -> uuid.UUID:
    """Add an event to this transaction: written when it commits, dropped if
    it rolls back. Returns the event's id."""
    staged = Staged(uuid.uuid4(), type_, kind, subject_id, actor_id, dict(payload or {}))
    session.info.setdefault(_STAGED, []).append(staged)
    return staged.id


def staged(session: AsyncSession) -> list[Staged]:
    """The events this transaction has staged so far (for tests and callers
    that must not stage one twice)."""
    return list(session.info.get(_STAGED, []))


def _seal(session: Session) -> None:
    """before_commit: write the staged events at the next positions, under
    the clock's row lock, held from here to the end of COMMIT."""
    if session.in_nested_transaction():
        return  # a savepoint's release; the outermost commit writes them
    pending: list[Staged] = session.info.pop(_STAGED, [])
    if not pending:
        return
    conn = session.connection()
    top = int(conn.execute(_ADVANCE, {"n": len(pending)}).one()[0])
    first = top - len(pending) + 1
    conn.execute(
        Event.__table__.insert(),  # type: ignore[attr-defined]
        [
            {
                "position": first + i,
                "id": e.id,
                "type": e.type,
                "kind": e.kind,
                "subject_id": e.subject_id,
                "actor_id": e.actor_id,
                "payload": e.payload,
            }
            for i, e in enumerate(pending)
        ],
    )


def _drop(session: Session, transaction: Any) -> None:
    """after_transaction_end: a rolled-back (or finished) outermost
    transaction leaves nothing staged for the next one on this session."""
    if transaction.parent is None:
        session.info.pop(_STAGED, None)


def install() -> None:
    """Write staged events on every session's commit (idempotent)."""
    if not event.contains(Session, "before_commit", _seal):
        event.listen(Session, "before_commit", _seal)
        event.listen(Session, "after_transaction_end", _drop)


# --- cascades --------------------------------------------------------------------
# When a container leaves or re-enters the public set, what hangs off it does
# too; each gets its own event, so a mirror applies changes one subject at a
# time and never has to know the visibility rules.

_UNDER_PATTERN = text(
    """
    SELECT 'comment', id FROM comments WHERE pattern_id = :id
    UNION ALL SELECT 'verification', id FROM verifications WHERE pattern_id = :id
    """
)
_UNDER_ANSWERS = text(
    """
    SELECT 'comment', id FROM comments WHERE answer_id = ANY(:ids)
    UNION ALL SELECT 'verification', id FROM verifications WHERE answer_id = ANY(:ids)
    """
)
_ANSWERS_OF = text("SELECT id FROM answers WHERE question_id = :id")


async def under(
    session: AsyncSession, kind: str, subject_id: uuid.UUID
) -> list[tuple[str, uuid.UUID]]:
    """What follows a pattern, a question or an answer in and out of the
    public set: a pattern's comments and verifications; a question's answers
    and theirs; an answer's."""
    conn = await session.connection()
    if kind == "pattern":
        found = await conn.execute(_UNDER_PATTERN, {"id": subject_id})
        return [(k, i) for k, i in found]
    answers: list[uuid.UUID]
    if kind == "question":
        answers = [row[0] for row in await conn.execute(_ANSWERS_OF, {"id": subject_id})]
        if not answers:
            return []
    else:
        answers = [subject_id]
    found = await conn.execute(_UNDER_ANSWERS, {"ids": answers})
    subjects = [(k, i) for k, i in found]
    if kind == "question":
        subjects = [("answer", a) for a in answers] + subjects
    return subjects


_VERIFICATIONS_BY = text("SELECT id FROM verifications WHERE agent_id = :a")


async def verifications_by(session: AsyncSession, agent_id: uuid.UUID) -> list[uuid.UUID]:
    """The verifications an agent reported (they go with its account)."""
    conn = await session.connection()
    return [row[0] for row in await conn.execute(_VERIFICATIONS_BY, {"a": agent_id})]


# --- the change feed -----------------------------------------------------------------
# The feed's reads go straight through psycopg on the session's connection
# (``storage.db.fetch_tuples``) and Postgres builds each item's JSON: the
# feed's target is 10,000 changes a second, and SQLAlchemy's row processing
# and Python's per-field conversions cost more than the queries
# (benchmarks/changes_bench.py).


@dataclass(frozen=True)
class Row:
    position: int
    id: str
    type: str
    kind: str
    subject_id: str
    created_at: str


# One statement, one snapshot: the head (the clock's committed position) and
# the page below it. Every position up to the head is visible in the same
# snapshot (see the module docstring), so a page shorter than the limit ends
# at the head.
_PAGE = """
    WITH head AS (SELECT coalesce((SELECT position FROM event_clock WHERE id = 1), 0) AS p)
    SELECT h.p, e.position, e.id::text, e.type, e.kind, e.subject_id::text,
           to_json(e.created_at) #>> '{}'
    FROM head h
    LEFT JOIN LATERAL (
        SELECT position, id, type, kind, subject_id, created_at FROM events
        WHERE position > %(after)s AND position <= h.p AND kind = ANY(%(kinds)s)
        ORDER BY position
        LIMIT %(limit)s
    ) e ON true
    ORDER BY e.position
"""


async def page(
    session: AsyncSession, after: int, kinds: list[str], limit: int
) -> tuple[int, list[Row]]:
    """The head position and up to ``limit`` events of ``kinds`` after ``after``."""
    found = await fetch_tuples(session, _PAGE, {"after": after, "kinds": kinds, "limit": limit})
    head = int(found[0][0]) if found else 0
    rows = [Row(*r[1:]) for r in found if r[1] is not None]
    return head, rows


async def head(session: AsyncSession) -> int:
    """The last position handed out (0 before the first event)."""
    conn = await session.connection()
    found = await conn.execute(text("SELECT position FROM event_clock WHERE id = 1"))
    value = found.scalar_one_or_none()
    return int(value) if value is not None else 0


# The subjects of a page: named by its range of positions (two numbers to
# send, not a thousand ids to encode).
_SUBJECTS = (
    "SELECT subject_id FROM events WHERE position BETWEEN %(first)s AND %(last)s "
    "AND kind = %(kind)s"
)


# The public state of each kind, by id: what the public API shows of it
# (storage/access.py decides which rows), its text and its links, not its
# counters (votes, views and counts change without an event).
_PUBLIC: dict[str, str] = {
    "pattern": f"""
        SELECT id::text, json_build_object(
            'slug', slug, 'title', title, 'description', description, 'content', content,
            'difficulty_level', difficulty_level, 'use_case_tags', use_case_tags,
            'tech_stack', tech_stack, 'code_examples', code_examples,
            'category_id', category_id, 'author_id', author_id,
            'revision', revision, 'created_at', created_at)
        FROM patterns WHERE id IN ({_SUBJECTS})
          AND {access.public_pattern_sql()}
    """,  # noqa: S608 - every part is ours
    "question": f"""
        SELECT id::text, json_build_object(
            'slug', slug, 'title', title, 'body', body, 'tags', tags, 'status', status,
            'category_id', category_id, 'author_id', author_id, 'created_at', created_at)
        FROM questions WHERE id IN ({_SUBJECTS})
          AND {access.visible_question_sql()}
    """,  # noqa: S608
    "answer": f"""
        SELECT a.id::text, json_build_object(
            'question_id', a.question_id, 'body', a.body, 'author_id', a.author_id,
            'is_accepted', a.is_accepted, 'revision', a.revision, 'created_at', a.created_at)
        FROM answers a JOIN questions q ON q.id = a.question_id
        WHERE a.id IN ({_SUBJECTS})
          AND {access.public_answer_sql("a", "q")}
    """,  # noqa: S608
    "comment": f"""
        SELECT id::text, json_build_object(
            'pattern_id', pattern_id, 'answer_id', answer_id, 'parent_id', parent_id,
            'author_id', CASE WHEN is_deleted THEN NULL ELSE author_id END,
            'content', content, 'is_deleted', is_deleted, 'created_at', created_at)
        FROM comments
        WHERE id IN ({_SUBJECTS})
          AND {access.public_comment_sql("comments")}
    """,  # noqa: S608
    # A verification follows its item (storage/access.py, "revisions and
    # verifications").
    "verification": f"""
        SELECT v.id::text, json_build_object(
            'pattern_id', v.pattern_id, 'answer_id', v.answer_id, 'revision', v.revision,
            'agent_id', v.agent_id, 'outcome', v.outcome,
            'environment', jsonb_build_object('packages', '{{}}'::jsonb) || v.environment,
            'note', v.note, 'changes', v.changes, 'created_at', v.created_at,
            'updated_at', v.updated_at)
        FROM verifications v
        WHERE v.id IN ({_SUBJECTS}) AND (
            (v.pattern_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM patterns p WHERE p.id = v.pattern_id
                AND {access.public_pattern_sql("p")}))
            OR (v.answer_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM answers a JOIN questions q ON q.id = a.question_id
                WHERE a.id = v.answer_id AND {access.public_answer_sql("a", "q")})))
    """,  # noqa: S608
}


async def public_state(
    session: AsyncSession, kind: str, first: int, last: int
) -> dict[str, dict[str, Any]]:
    """The public items of ``kind`` that events ``first`` to ``last`` are
    about (absent: not public now), by id, each as the feed shows it."""
    params = {"first": first, "last": last, "kind": kind}
    found = await fetch_tuples(session, _PUBLIC[kind], params)
    return {item_id: item for item_id, item in found}


# --- compaction -------------------------------------------------------------------
# The feed shows each subject as it is now, so an event followed by a later
# event of the same subject shows a reader nothing that later one does not:
# deleting it changes no page a reader at any cursor will read after it
# (docs/decisions/events.md, "Compaction"). Only events that nobody reads
# as events any more go: older than the age kept, and behind the webhook
# deliverer's cursor while any subscription exists (the deliverer matches
# events, not states; a delivery keeps its own body).
_COMPACT_HORIZON = text(
    """
    SELECT least(
        -- Back from the head along the primary key: only the events
        -- younger than the age kept are read before the answer.
        -- None older than that: 0 (LEAST would skip a NULL and let the
        -- deliverer's cursor alone decide).
        coalesce((SELECT position FROM events
          WHERE created_at < now() - make_interval(secs => :keep_s)
          ORDER BY position DESC LIMIT 1), 0),
        CASE WHEN EXISTS (SELECT 1 FROM webhooks)
             THEN coalesce((SELECT position FROM webhook_cursor WHERE id = 1), 0) END
    )
    """
)
# Driven by the newer events: each event at a position in the range deletes
# the older events of its subject (through the subject index), so a pass
# reads only the events that crossed the horizon since the last one.
_COMPACT_RANGE = text(
    """
    DELETE FROM events old
    USING events newer
    WHERE newer.position > :start AND newer.position <= :stop
      AND old.subject_id = newer.subject_id AND old.kind = newer.kind
      AND old.position < newer.position
    """
)


async def compaction_horizon(session: AsyncSession, keep_s: float) -> int:
    """The last position compaction may touch: events at most this far back
    are older than ``keep_s`` seconds and already matched by the webhook
    deliverer (0: nothing yet)."""
    conn = await session.connection()
    found = await conn.execute(_COMPACT_HORIZON, {"keep_s": keep_s})
    value = found.scalar_one_or_none()
    return int(value) if value is not None else 0


async def compact_range(session: AsyncSession, start: int, stop: int) -> int:
    """Delete the events superseded by an event at a position in
    (``start``, ``stop``] (``stop`` at most the horizon); the number deleted."""
    conn = await session.connection()
    done = await conn.execute(_COMPACT_RANGE, {"start": start, "stop": stop})
    return int(done.rowcount or 0)
