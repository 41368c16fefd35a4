"""SQL for notifications, e-mail preferences, follower fan-out jobs and the
e-mail outbox.

Notifications and their outbox rows are written in the transaction of the
event that causes them. Fan-out copies one event to an agent's followers a
batch per transaction, moving the job's cursor in that same transaction.

Every insert of notifications also sends ``pg_notify`` on ``CHANNEL`` with
the recipients' ids, in the same transaction: Postgres delivers it at commit
(never for a rollback) to each replica's listener, which wakes that
replica's open streams (docs/decisions/notifications-and-streams.md, "Notification stream").
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, insert, literal_column, text, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import aliased
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.access import PUBLIC_PATTERN_SQL
from storage.db import listen as db_listen
from storage.models import (
    Agent,
    EmailPreference,
    EmailVerification,
    FanoutJob,
    MailMessage,
    Notification,
)
from storage.models.base import utcnow
from storage.models.social import (
    ALWAYS_MAILED_KINDS,
    MAIL_PREFERENCE,
    REPEATABLE_KINDS,
    UNTHROTTLED_MAIL_KINDS,
)

PREFERENCES = tuple(MAIL_PREFERENCE.values())
# Below every uuid4: where a fan-out starts.
START = uuid.UUID(int=0)

# Whether the recipient's preferences let a notification kind be mailed; kinds
# without a preference are in-app only, but for the security notices, always
# mailed. A missing preferences row means the defaults (all on).
_ALLOWED = (
    "CASE m.kind "
    + " ".join(f"WHEN '{k}' THEN COALESCE(p.{pref}, true)" for k, pref in MAIL_PREFERENCE.items())
    + "".join(f" WHEN '{k}' THEN true" for k in ALWAYS_MAILED_KINDS)
    + " ELSE false END"
)
_MAILED_KINDS = frozenset(MAIL_PREFERENCE) | frozenset(ALWAYS_MAILED_KINDS)


# At most one notice per (actor, recipient, kind) per window
# (docs/decisions/claims-and-reputation.md, "Security: reputation and mail");
# CAIRN_NOTICE_THROTTLE_HOURS sets it.
DEFAULT_THROTTLE_S = 24 * 3600.0
_UNTHROTTLED = ", ".join(f"'{k}'" for k in UNTHROTTLED_MAIL_KINDS)


def _mail_ctes(source: str) -> str:
    """CTEs (to follow a WITH) that queue outbox rows for the notifications in
    ``source`` (id, recipient_id, kind, actor_id) that may be mailed: to a
    human's own address, or to the address of the human who claimed a bot,
    and only to an address its owner has verified. Then at most one message
    per (actor, recipient, kind) per window: the upsert into notice_throttle
    lets a key through only when its last message is older than the window
    (moderation decisions are exempt). The last CTE is ``mailed``."""
    return f"""
        mail_candidates AS (
            SELECT m.id, m.recipient_id, m.kind, m.actor_id, address.email,
                   row_number() OVER (
                       PARTITION BY m.recipient_id, m.actor_id, m.kind ORDER BY m.id
                   ) AS nth
            FROM {source} m
            JOIN agents r ON r.id = m.recipient_id AND r.is_active
            LEFT JOIN agents o ON o.id = r.owner_id AND o.is_human AND o.is_active
            LEFT JOIN email_preferences p ON p.agent_id = r.id
            CROSS JOIN LATERAL (
                SELECT CASE WHEN r.is_human THEN r.email ELSE o.email END AS email,
                       CASE WHEN r.is_human THEN r.email_verified_at
                            ELSE o.email_verified_at END AS verified_at
            ) address
            WHERE address.email IS NOT NULL AND address.verified_at IS NOT NULL AND {_ALLOWED}
        ), mail_gate AS (
            INSERT INTO notice_throttle AS t (recipient_id, actor_id, kind, subject_id, last_at)
            SELECT recipient_id, actor_id, kind, '{START}'::uuid, now() FROM mail_candidates
            WHERE nth = 1 AND actor_id IS NOT NULL AND kind NOT IN ({_UNTHROTTLED})
            ON CONFLICT (recipient_id, actor_id, kind, subject_id)
            DO UPDATE SET last_at = EXCLUDED.last_at
            WHERE t.last_at <= EXCLUDED.last_at - make_interval(secs => :throttle_s)
            RETURNING recipient_id, actor_id, kind
        ), mailed AS (
            INSERT INTO mail_outbox (id, notification_id, recipient_id, to_address)
            SELECT gen_random_uuid(), c.id, c.recipient_id, c.email FROM mail_candidates c
            WHERE c.actor_id IS NULL OR c.kind IN ({_UNTHROTTLED})
               OR (c.nth = 1 AND (c.recipient_id, c.actor_id, c.kind) IN (
                       SELECT recipient_id, actor_id, kind FROM mail_gate))
            ON CONFLICT (notification_id) DO NOTHING
            RETURNING id
        )
    """  # noqa: S608 - every part is ours; values are bound


_MAIL_FOR_IDS = text(
    f"""
    WITH src AS (
        SELECT id, recipient_id, kind, actor_id FROM notifications WHERE id = ANY(:ids)
    ), {_mail_ctes("src")}
    SELECT count(*) FROM mailed
    """  # noqa: S608 - every part is ours; values are bound
)

# A repeatable event (REPEATABLE_KINDS) makes a notification only when the
# same (actor, recipient, kind, target) made none within the window.
_NOTICE_GATE = text(
    """
    INSERT INTO notice_throttle AS t (recipient_id, actor_id, kind, subject_id, last_at)
    VALUES (:recipient, :actor, :kind, :subject, now())
    ON CONFLICT (recipient_id, actor_id, kind, subject_id)
    DO UPDATE SET last_at = EXCLUDED.last_at
    WHERE t.last_at <= EXCLUDED.last_at - make_interval(secs => :throttle_s)
    RETURNING 1
    """
)


async def _sql(session: AsyncSession, statement: Any) -> Any:
    """Run literal SQL in the session's transaction."""
    conn = await session.connection()
    return await conn.execute(statement)


async def _passes(session: AsyncSession, record: dict[str, Any], throttle_s: float) -> bool:
    """Whether a notification may be made: always, but for a repeatable kind
    only the first of its (actor, recipient, kind, target) in the window."""
    if record["kind"] not in REPEATABLE_KINDS or record.get("actor_id") is None:
        return True
    passed = await _sql(
        session,
        _NOTICE_GATE.bindparams(
            recipient=record["recipient_id"],
            actor=record["actor_id"],
            kind=record["kind"],
            subject=record.get("target_id") or START,
            throttle_s=throttle_s,
        ),
    )
    return passed.first() is not None


# The channel of "these recipients have new notifications": the payload is
# their ids, comma-separated, at most NOTIFY_IDS per message (Postgres caps a
# payload at 8000 bytes; 200 ids are 7,399).
CHANNEL = "cairn_notifications"
NOTIFY_IDS = 200
_NOTIFY = text("SELECT pg_notify(:channel, :payload)")
# How each replica's listening connection shows in pg_stat_activity.
LISTENER_NAME = "cairn-notification-listener"


async def _notify(session: AsyncSession, recipients: list[uuid.UUID]) -> None:
    """Tell every listening replica, at commit, that these recipients have news."""
    unique = list(dict.fromkeys(str(r) for r in recipients))
    for start in range(0, len(unique), NOTIFY_IDS):
        payload = ",".join(unique[start : start + NOTIFY_IDS])
        await _sql(session, _NOTIFY.bindparams(channel=CHANNEL, payload=payload))


async def add(
    session: AsyncSession,
    records: list[dict[str, Any]],
    *,
    mail: bool,
    throttle_s: float = DEFAULT_THROTTLE_S,
) -> None:
    """Insert notifications (and, with ``mail``, their outbox rows), minus the
    repeats the throttle drops."""
    records = [r for r in records if await _passes(session, r, throttle_s)]
    if not records:
        return
    for record in records:
        record.setdefault("id", uuid.uuid4())
    await session.exec(insert(Notification).values(records))
    await _notify(session, [r["recipient_id"] for r in records])
    if mail and any(r["kind"] in _MAILED_KINDS for r in records):
        await _sql(
            session,
            _MAIL_FOR_IDS.bindparams(ids=[r["id"] for r in records], throttle_s=throttle_s),
        )


def _mine(recipient_id: uuid.UUID, unread_only: bool = False) -> Any:
    condition = col(Notification.recipient_id) == recipient_id
    if unread_only:
        condition = and_(condition, col(Notification.is_read).is_(False))
    return condition


async def page(
    session: AsyncSession, recipient_id: uuid.UUID, unread_only: bool, page: int, limit: int
) -> tuple[list[tuple[Notification, Agent | None]], int]:
    """The recipient's notifications, newest first, with each one's actor.

    The page is cut first and only its rows are joined to their actors: an
    index lookup each, however many notifications and agents there are."""
    condition = _mine(recipient_id, unread_only)
    newest = (col(Notification.created_at).desc(), col(Notification.id).desc())
    cut = (
        select(Notification, func.count().over().label("total"))
        .where(condition)
        .order_by(*newest)
        .offset((page - 1) * limit)
        .limit(limit)
        .subquery()
    )
    shown = aliased(Notification, cut)
    found = (
        await session.exec(
            select(shown, Agent, cut.c.total)
            .outerjoin(Agent, col(Agent.id) == shown.actor_id)
            .order_by(shown.created_at.desc(), shown.id.desc())  # type: ignore[attr-defined]
        )
    ).all()
    if found:
        return [(n, a) for n, a, _ in found], int(found[-1][-1])
    if page == 1:
        return [], 0
    count = select(func.count()).select_from(Notification).where(condition)
    return [], int((await session.exec(count)).one())


async def unread_count(session: AsyncSession, recipient_id: uuid.UUID) -> int:
    result = await session.exec(
        select(func.count()).select_from(Notification).where(_mine(recipient_id, True))
    )
    return int(result.one())


async def mark_read(
    session: AsyncSession, recipient_id: uuid.UUID, ids: list[uuid.UUID] | None
) -> int:
    """Mark the recipient's unread notifications among ``ids`` (all when None)
    as read; returns how many changed."""
    condition = _mine(recipient_id, True)
    if ids is not None:
        condition = and_(condition, col(Notification.id).in_(ids))
    result = await session.exec(update(Notification).where(condition).values(is_read=True))
    return int(result.rowcount)  # type: ignore[attr-defined]


async def delete_old(session: AsyncSession, recipient_id: uuid.UUID, before: datetime) -> int:
    """Delete the recipient's read notifications created before ``before``."""
    result = await session.exec(
        delete(Notification).where(
            _mine(recipient_id),
            col(Notification.is_read),
            col(Notification.created_at) < before,
        )
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


# The live stream ----------------------------------------------------------------

_CURSOR = re.compile(r"[0-9a-f]{32}")
# Both halves are compared with bigint columns: a larger one would fail in
# the database, after the stream has opened.
_BIGINT_MAX = 2**63 - 1
# The oldest transaction still running when the statement's snapshot was taken:
# every transaction below it has ended, so its rows are final.
_HORIZON_SQL = "(pg_snapshot_xmin(pg_current_snapshot())::text)::bigint"
_HORIZON: Any = literal_column(_HORIZON_SQL)


@dataclass(frozen=True, order=True)
class Cursor:
    """A place in a recipient's stream: just after row ``seq`` of transaction
    ``txid``. Written as 32 hex digits, which sort as the cursors do; each
    half is a signed bigint's non-negative range (0 to 2**63 - 1)."""

    txid: int
    seq: int

    def encode(self) -> str:
        return f"{self.txid:016x}{self.seq:016x}"

    @classmethod
    def decode(cls, value: str) -> Cursor | None:
        value = value.strip().lower()
        if not _CURSOR.fullmatch(value):
            return None
        txid, seq = int(value[:16], 16), int(value[16:], 16)
        if txid > _BIGINT_MAX or seq > _BIGINT_MAX:
            return None
        return cls(txid, seq)


@dataclass(frozen=True)
class StreamRows:
    rows: list[tuple[Notification, Agent | None, Cursor]]
    more: bool  # more settled rows wait beyond ``limit``
    waiting: bool  # rows are written but not settled yet (an older transaction is open)


async def stream_now(session: AsyncSession) -> Cursor:
    """Where a new stream starts: after every row that is already final."""
    horizon = (await _sql(session, text(f"SELECT {_HORIZON_SQL}"))).scalar_one()
    return Cursor(int(horizon), 0)


async def stream_after(
    session: AsyncSession, recipient_id: uuid.UUID, after: Cursor, limit: int
) -> StreamRows:
    """The recipient's settled notifications after ``after``, in stream order,
    with each one's actor. A row is settled when its transaction is older than
    every transaction still running: no row can then commit before it, so a
    cursor never skips one (docs/decisions/notifications-and-streams.md, "Notification stream")."""
    settled = (col(Notification.txid) < _HORIZON).label("settled")
    statement = (
        select(Notification, Agent, settled)
        .outerjoin(Agent, col(Agent.id) == col(Notification.actor_id))
        .where(
            col(Notification.recipient_id) == recipient_id,
            tuple_(col(Notification.txid), col(Notification.seq)) > tuple_(after.txid, after.seq),
        )
        .order_by(col(Notification.txid), col(Notification.seq))
        .limit(limit + 1)
    )
    found = (await session.exec(statement)).all()
    ready: list[tuple[Notification, Agent | None]] = [(n, a) for n, a, ok in found if ok]
    rows = [(n, a, Cursor(int(n.txid or 0), int(n.seq or 0))) for n, a in ready[:limit]]
    return StreamRows(rows=rows, more=len(ready) > limit, waiting=len(ready) < len(found))


def listen(
    database_url: str, on_ready: Callable[[], Awaitable[None]], check_s: float
) -> AsyncIterator[list[str]]:
    """The recipient ids of each message on ``CHANNEL`` (``storage.db.listen``)."""
    return db_listen(database_url, CHANNEL, on_ready, check_s, LISTENER_NAME)


# E-mail preferences -------------------------------------------------------------


async def preferences(session: AsyncSession, agent_id: uuid.UUID) -> EmailPreference | None:
    return await session.get(EmailPreference, agent_id)


async def save_preferences(
    session: AsyncSession, agent_id: uuid.UUID, changes: dict[str, bool]
) -> EmailPreference:
    """Set some of the switches (the rest keep their value, or the default)."""
    now = utcnow()
    statement = (
        pg_insert(EmailPreference)
        .values(agent_id=agent_id, updated_at=now, **changes)
        .on_conflict_do_update(index_elements=["agent_id"], set_={**changes, "updated_at": now})
        .returning(*[getattr(EmailPreference, name) for name in PREFERENCES])
    )
    saved = (await session.exec(statement)).one()
    return EmailPreference(
        agent_id=agent_id, updated_at=now, **dict(zip(PREFERENCES, saved, strict=True))
    )


# Fan-out -------------------------------------------------------------------------


async def queue_fanout(session: AsyncSession, job: FanoutJob) -> bool:
    """Queue an event for the actor's followers; an event already queued is not
    queued again. True when queued."""
    values = job.model_dump()
    statement = pg_insert(FanoutJob).values(**values).on_conflict_do_nothing()
    result = await session.exec(statement)
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def claim_fanout(session: AsyncSession) -> FanoutJob | None:
    """The oldest pending job no other worker holds, locked for this transaction."""
    statement = (
        select(FanoutJob)
        .where(col(FanoutJob.status) == "pending")
        .order_by(col(FanoutJob.created_at))
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    return (await session.exec(statement)).first()


_PUBLIC_PATTERN = text(f"SELECT 1 FROM patterns WHERE id = :id AND {PUBLIC_PATTERN_SQL}")  # noqa: S608


async def target_public(session: AsyncSession, job: FanoutJob) -> bool:
    """Whether the job's pattern can still be seen (not archived, rejected or gone)."""
    found = await _sql(session, _PUBLIC_PATTERN.bindparams(id=job.target_id))
    return found.first() is not None


def _fanout_sql(mail: bool) -> Any:
    mailed = f", {_mail_ctes('made')}" if mail else ""
    return text(
        f"""
        WITH batch AS (
            SELECT f.follower_id FROM follows f
            WHERE f.followee_id = :actor AND f.follower_id > :cursor
            ORDER BY f.follower_id
            LIMIT :size
        ), made AS (
            INSERT INTO notifications (id, recipient_id, kind, actor_id, target_type,
                                       target_id, target_title, target_slug, created_at)
            SELECT gen_random_uuid(), b.follower_id, :kind, :actor, :target_type,
                   :target_id, :target_title, :target_slug, :at
            FROM batch b JOIN agents a ON a.id = b.follower_id AND a.is_active
            RETURNING id, recipient_id, kind, actor_id
        ), woken AS (
            SELECT pg_notify('{CHANNEL}', string_agg(recipient_id::text, ','))
            FROM (SELECT recipient_id, (row_number() OVER ()) / {NOTIFY_IDS} AS part
                  FROM made) m
            GROUP BY part
        ){mailed}
        SELECT (SELECT follower_id FROM batch ORDER BY follower_id DESC LIMIT 1),
               (SELECT count(*) FROM batch),
               (SELECT count(*) FROM made),
               (SELECT count(*) FROM woken)
        """  # noqa: S608 - every part is ours; values are bound
    )


_FANOUT = {True: _fanout_sql(True), False: _fanout_sql(False)}


@dataclass(frozen=True)
class Batch:
    seen: int  # followers walked
    made: int  # notifications made (inactive followers get none)
    done: bool


async def fanout_batch(
    session: AsyncSession,
    job: FanoutJob,
    size: int,
    *,
    mail: bool,
    throttle_s: float = DEFAULT_THROTTLE_S,
) -> Batch:
    """Notify the next ``size`` followers after the job's cursor and move the
    cursor past them, in the caller's transaction."""
    statement = _FANOUT[mail]
    if mail:
        statement = statement.bindparams(throttle_s=throttle_s)
    result = await _sql(
        session,
        statement.bindparams(
            actor=job.actor_id,
            cursor=job.cursor or START,
            size=size,
            kind=job.kind,
            target_type=job.target_type,
            target_id=job.target_id,
            target_title=job.target_title,
            target_slug=job.target_slug,
            at=job.created_at,
        ),
    )
    last, seen, made, _ = result.one()
    done = seen < size
    await session.exec(
        update(FanoutJob)
        .where(col(FanoutJob.id) == job.id)
        .values(
            cursor=last if last is not None else job.cursor,
            delivered=col(FanoutJob.delivered) + made,
            batches=col(FanoutJob.batches) + 1,
            status="done" if done else "pending",
            finished_at=utcnow() if done else None,
        )
    )
    return Batch(seen=int(seen), made=int(made), done=done)


async def cancel_fanout(session: AsyncSession, job: FanoutJob) -> None:
    await session.exec(
        update(FanoutJob)
        .where(col(FanoutJob.id) == job.id)
        .values(status="cancelled", finished_at=utcnow())
    )


# The e-mail outbox ------------------------------------------------------------


@dataclass(frozen=True)
class Outgoing:
    """A due message with what it takes to write it: its notification, or the
    address verification it carries."""

    message: MailMessage
    notification: Notification | None
    verification: EmailVerification | None
    actor: Agent | None
    recipient: Agent


async def claim_mail(session: AsyncSession, limit: int) -> list[Outgoing]:
    """Due pending messages no other worker holds, locked for this transaction."""
    recipient = aliased(Agent, name="recipient")
    statement = (
        select(MailMessage, Notification, Agent, recipient)
        .outerjoin(Notification, col(Notification.id) == col(MailMessage.notification_id))
        .outerjoin(Agent, col(Agent.id) == col(Notification.actor_id))
        .join(recipient, col(recipient.id) == col(MailMessage.recipient_id))
        .where(col(MailMessage.status) == "pending", col(MailMessage.next_attempt_at) <= func.now())
        .order_by(col(MailMessage.next_attempt_at))
        .limit(limit)
        .with_for_update(of=MailMessage, skip_locked=True)  # type: ignore[arg-type]
    )
    found = (await session.exec(statement)).all()
    out = []
    for m, n, a, r in found:
        # Verification mail is rare (a few per human): looked up one by one.
        v = await session.get(EmailVerification, m.verification_id) if m.verification_id else None
        out.append(Outgoing(m, n, v, a, r))
    return out


async def set_verification_token(
    session: AsyncSession, verification_id: uuid.UUID, token_hash: bytes
) -> None:
    """Store the keyed hash of the token about to be mailed (a retry replaces
    it: only the token of the message that went out can be used)."""
    await session.exec(
        update(EmailVerification)
        .where(col(EmailVerification.id) == verification_id)
        .values(token_hash=token_hash)
    )


async def mail_sent(session: AsyncSession, ids: list[uuid.UUID]) -> None:
    if ids:
        await session.exec(
            update(MailMessage)
            .where(col(MailMessage.id).in_(ids))
            .values(
                status="sent",
                sent_at=utcnow(),
                attempts=col(MailMessage.attempts) + 1,
                last_error=None,
            )
        )


async def unwanted_mail(session: AsyncSession, message_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Those of ``message_ids`` (notification mail) that may no longer be sent:
    the recipient was deactivated, or turned that kind of mail off, after the
    message was queued (a retry can wait an hour). Address verification mail
    is always wanted."""
    if not message_ids:
        return set()
    rows = await _sql(
        session,
        text(
            f"""
            SELECT o.id FROM mail_outbox o
            JOIN notifications m ON m.id = o.notification_id
            JOIN agents r ON r.id = o.recipient_id
            LEFT JOIN email_preferences p ON p.agent_id = r.id
            WHERE o.id = ANY(:ids) AND NOT (r.is_active AND {_ALLOWED})
            """  # noqa: S608 - every part is ours
        ).bindparams(ids=message_ids),
    )
    return {row[0] for row in rows}


async def mail_failed(
    session: AsyncSession, message: MailMessage, error: str, retry_in: timedelta | None
) -> None:
    """Record a failed attempt: due again after ``retry_in``, or failed for good (None)."""
    values: dict[str, Any] = {"attempts": message.attempts + 1, "last_error": error[:500]}
    if retry_in is None:
        values["status"] = "failed"
    else:
        values["next_attempt_at"] = utcnow() + retry_in
    await session.exec(
        update(MailMessage).where(col(MailMessage.id) == message.id).values(**values)
    )


async def queue_stats(session: AsyncSession) -> dict[str, int]:
    """How much work is waiting: fan-out jobs and mail by state."""
    result = await _sql(
        session,
        text(
            """
            SELECT
              (SELECT count(*) FROM fanout_jobs WHERE status = 'pending'),
              (SELECT coalesce(sum(greatest(followers - delivered, 0)), 0)
                 FROM fanout_jobs WHERE status = 'pending'),
              (SELECT count(*) FROM mail_outbox WHERE status = 'pending'),
              (SELECT count(*) FROM mail_outbox WHERE status = 'failed')
            """
        ),
    )
    jobs, followers, pending, failed = result.one()
    return {
        "fanout_jobs_pending": int(jobs),
        "fanout_followers_pending": int(followers),
        "mail_pending": int(pending),
        "mail_failed": int(failed),
    }
