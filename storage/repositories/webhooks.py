"""SQL of webhooks (docs/decisions/events.md, "Webhooks"): the agents'
subscriptions, and the deliverer's work: the outbox read past its durable
cursor, one delivery row per (event, subscription), due deliveries claimed
with SKIP LOCKED and their outcomes."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, text, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models.webhooks import Webhook, WebhookDelivery
from storage.repositories import events as events_repo

# --- subscriptions ------------------------------------------------------------------


async def count_for(session: AsyncSession, agent_id: uuid.UUID) -> int:
    found = await session.exec(
        select(func.count()).select_from(Webhook).where(col(Webhook.agent_id) == agent_id)
    )
    return int(found.one())


async def add(session: AsyncSession, hook: Webhook) -> Webhook:
    """Store a new subscription; it is delivered events after the outbox's
    head now."""
    hook.since_position = await events_repo.head(session)
    session.add(hook)
    await session.flush()
    return hook


async def list_for(session: AsyncSession, agent_id: uuid.UUID) -> list[Webhook]:
    found = await session.exec(
        select(Webhook)
        .where(col(Webhook.agent_id) == agent_id)
        .order_by(col(Webhook.created_at), col(Webhook.id))
    )
    return list(found.all())


async def get_for(
    session: AsyncSession, agent_id: uuid.UUID, hook_id: uuid.UUID, *, lock: bool = False
) -> Webhook | None:
    query = select(Webhook).where(col(Webhook.id) == hook_id, col(Webhook.agent_id) == agent_id)
    if lock:
        query = query.with_for_update()
    return (await session.exec(query)).first()


async def delete(session: AsyncSession, hook: Webhook) -> None:
    await session.delete(hook)
    await session.flush()


async def add_delivery(session: AsyncSession, delivery: WebhookDelivery) -> WebhookDelivery:
    """A delivery of no outbox event (a ping); the deliverer is woken at commit."""
    session.add(delivery)
    await session.flush()
    await wake_at_commit(session)
    return delivery


async def wake_at_commit(session: AsyncSession) -> None:
    conn = await session.connection()
    await conn.execute(text("SELECT pg_notify(:c, '')"), {"c": events_repo.CHANNEL})


async def deliveries_for(
    session: AsyncSession, hook_id: uuid.UUID, limit: int
) -> list[WebhookDelivery]:
    found = await session.exec(
        select(WebhookDelivery)
        .where(col(WebhookDelivery.webhook_id) == hook_id)
        .order_by(col(WebhookDelivery.created_at).desc(), col(WebhookDelivery.id).desc())
        .limit(limit)
    )
    return list(found.all())


async def get_delivery(
    session: AsyncSession, hook_id: uuid.UUID, delivery_id: uuid.UUID
) -> WebhookDelivery | None:
    found = await session.exec(
        select(WebhookDelivery)
        .where(col(WebhookDelivery.id) == delivery_id, col(WebhookDelivery.webhook_id) == hook_id)
        .with_for_update()
    )
    return found.first()


# --- the deliverer --------------------------------------------------------------------


@dataclass(frozen=True)
class OutboxEvent:
    position: int
    id: uuid.UUID
    type: str
    kind: str
    subject_id: uuid.UUID
    actor_id: uuid.UUID | None
    payload: dict[str, Any]
    created_at: datetime


_CURSOR = text("SELECT position FROM webhook_cursor WHERE id = 1 FOR UPDATE")
_CURSOR_MAKE = text(
    "INSERT INTO webhook_cursor (id, position) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
)
_EVENTS_AFTER = text(
    """
    SELECT position, id, type, kind, subject_id, actor_id, payload, created_at
    FROM events WHERE position > :after ORDER BY position LIMIT :limit
    """
)


async def lock_cursor(session: AsyncSession) -> int:
    """The deliverer's cursor, locked for this transaction (one matcher at a
    time, however many deliverers run)."""
    conn = await session.connection()
    await conn.execute(_CURSOR_MAKE)
    return int((await conn.execute(_CURSOR)).scalar_one())


async def move_cursor(session: AsyncSession, position: int) -> None:
    conn = await session.connection()
    await conn.execute(
        text("UPDATE webhook_cursor SET position = :p, updated_at = now() WHERE id = 1"),
        {"p": position},
    )


async def events_after(session: AsyncSession, after: int, limit: int) -> list[OutboxEvent]:
    conn = await session.connection()
    found = await conn.execute(_EVENTS_AFTER, {"after": after, "limit": limit})
    return [OutboxEvent(*row) for row in found]


async def active_hooks(session: AsyncSession) -> list[Webhook]:
    found = await session.exec(select(Webhook).where(col(Webhook.active)))
    return list(found.all())


async def followed_by(
    session: AsyncSession, agent_ids: list[uuid.UUID]
) -> dict[uuid.UUID, set[str]]:
    """The agents each of ``agent_ids`` follows (ids as text)."""
    conn = await session.connection()
    found = await conn.execute(
        text("SELECT follower_id, followee_id::text FROM follows WHERE follower_id = ANY(:ids)"),
        {"ids": agent_ids},
    )
    out: dict[uuid.UUID, set[str]] = {a: set() for a in agent_ids}
    for follower, followee in found:
        out[follower].add(followee)
    return out


async def question_authors(session: AsyncSession, question_ids: list[str]) -> dict[str, str]:
    conn = await session.connection()
    found = await conn.execute(
        text(
            "SELECT id::text, author_id::text FROM questions WHERE id = ANY(CAST(:ids AS uuid[]))"
        ),
        {"ids": question_ids},
    )
    return {q: a for q, a in found}


async def public_state(
    session: AsyncSession, kind: str, first: int, last: int
) -> dict[str, dict[str, Any]]:
    """The public state of the subjects of ``kind`` that events ``first`` to
    ``last`` are about (absent: not public now), as the change feed shows it."""
    if kind not in events_repo.FEED_KINDS:
        return {}
    return await events_repo.public_state(session, kind, first, last)


# One statement whatever the number of rows (its text never changes, so it
# is compiled once and prepared by psycopg): a multi-row VALUES was compiled
# anew for every batch size, most of the matcher's time under a steady load.
_ADD_DELIVERIES = text(
    """
    INSERT INTO webhook_deliveries (id, webhook_id, event_id, position, type, body)
    SELECT * FROM unnest(
        CAST(:ids AS uuid[]), CAST(:hooks AS uuid[]), CAST(:events AS uuid[]),
        CAST(:positions AS bigint[]), CAST(:types AS text[]), CAST(:bodies AS text[]))
    ON CONFLICT ON CONSTRAINT uq_webhook_deliveries_event DO NOTHING
    """
)


async def add_deliveries(session: AsyncSession, rows: list[dict[str, Any]]) -> None:
    """Delivery rows (``webhook_id``, ``event_id``, ``position``, ``type``,
    ``body``); one that exists already for its (subscription, event) is kept.
    The rest of a row is its columns' defaults: pending, due now."""
    if not rows:
        return
    conn = await session.connection()
    await conn.execute(
        _ADD_DELIVERIES,
        {
            "ids": [str(row.get("id") or uuid.uuid4()) for row in rows],
            "hooks": [str(row["webhook_id"]) for row in rows],
            "events": [str(row["event_id"]) for row in rows],
            "positions": [row.get("position") for row in rows],
            "types": [row["type"] for row in rows],
            "bodies": [row["body"] for row in rows],
        },
    )


@dataclass(frozen=True)
class Due:
    id: uuid.UUID
    webhook_id: uuid.UUID
    event_id: uuid.UUID
    body: str
    attempts: int
    created_at: datetime
    url: str
    secret: str
    previous_secret: str | None
    previous_until: datetime | None


# Claimed by pushing next_attempt_at past the lease: a deliverer that dies
# mid-try leaves the row to be tried again when the lease ends. Each endpoint
# gives at most its free slots (``room``; ``concurrency`` for one with none in
# flight), its oldest due rows first, so nothing is claimed that cannot start
# at once. The endpoints with pending rows are found by skipping through
# ix_webhook_deliveries_pending (one index descent an endpoint, however long
# its backlog), so a backlog of a busy endpoint is never read past and never
# holds up another's rows.
_CLAIM = text(
    """
    WITH RECURSIVE pending(webhook_id) AS (
        (SELECT webhook_id FROM webhook_deliveries WHERE state = 'pending'
         ORDER BY webhook_id LIMIT 1)
        UNION ALL
        SELECT (SELECT d.webhook_id FROM webhook_deliveries d
                WHERE d.state = 'pending' AND d.webhook_id > p.webhook_id
                ORDER BY d.webhook_id LIMIT 1)
        FROM pending p WHERE p.webhook_id IS NOT NULL
    ),
    room AS (
        SELECT w.id, COALESCE(r.free, :concurrency) AS free
        FROM pending p
        JOIN webhooks w ON w.id = p.webhook_id AND w.active
        LEFT JOIN unnest(CAST(:ids AS uuid[]), CAST(:free AS int[])) AS r(id, free)
          ON r.id = w.id
    ),
    due AS (
        SELECT c.id, c.next_attempt_at FROM room
        CROSS JOIN LATERAL (
            SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
            WHERE d.webhook_id = room.id AND d.state = 'pending'
              AND d.next_attempt_at <= now()
            ORDER BY d.next_attempt_at
            LIMIT room.free
            FOR UPDATE SKIP LOCKED
        ) c
        WHERE room.free > 0
        ORDER BY c.next_attempt_at
        LIMIT :limit
    )
    UPDATE webhook_deliveries d
    SET next_attempt_at = now() + make_interval(secs => :lease_s)
    FROM due, webhooks w
    WHERE d.id = due.id AND w.id = d.webhook_id
    RETURNING d.id, d.webhook_id, d.event_id, d.body, d.attempts, d.created_at,
              w.url, w.secret, w.previous_secret, w.previous_until
    """
)


async def claim_due(
    session: AsyncSession,
    limit: int,
    lease_s: float,
    concurrency: int,
    in_flight: dict[uuid.UUID, int] | None = None,
) -> list[Due]:
    """Up to ``limit`` due deliveries of active subscriptions, each leased
    for ``lease_s``: at most ``concurrency`` less its tries ``in_flight``
    of each endpoint."""
    used = in_flight or {}
    conn = await session.connection()
    found = await conn.execute(
        _CLAIM,
        {
            "limit": limit,
            "lease_s": lease_s,
            "concurrency": concurrency,
            "ids": [str(h) for h in used],
            "free": [max(0, concurrency - n) for n in used.values()],
        },
    )
    return [Due(*row) for row in found]


async def next_due_in(session: AsyncSession) -> float | None:
    """Seconds until the next pending delivery is due (None: nothing pending)."""
    conn = await session.connection()
    found = await conn.execute(
        text(
            "SELECT extract(epoch FROM min(next_attempt_at) - now()) "
            "FROM webhook_deliveries WHERE state = 'pending'"
        )
    )
    value = found.scalar_one_or_none()
    return None if value is None else max(0.0, float(value))


# Many tries' outcomes in one statement (the deliverer records them in
# batches). Each applies only to the row still at the try count it was
# claimed with: an outcome written twice (a COMMIT whose answer was lost, then
# the batch written again) or after another deliverer recorded a later try
# of the row (the lease ran out meanwhile) changes nothing.
_ATTEMPTS = text(
    """
    UPDATE webhook_deliveries d SET state = v.state, attempts = d.attempts + 1,
        last_attempt_at = now(), last_status = v.status, last_latency_ms = v.latency_ms,
        last_error = v.error,
        next_attempt_at = CASE WHEN v.retry_s IS NULL THEN d.next_attempt_at
                          ELSE now() + make_interval(secs => v.retry_s) END
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS v(
        id uuid, attempts int, state text, status int, latency_ms int, error text,
        retry_s float8)
    WHERE d.id = v.id AND d.attempts = v.attempts
    RETURNING d.id
    """
)


@dataclass(frozen=True)
class Attempt:
    """One try's outcome; ``attempts``: the row's count when it was claimed."""

    delivery_id: uuid.UUID
    attempts: int
    state: str
    status: int | None
    latency_ms: int
    error: str | None
    retry_in_s: float | None


async def record_attempts(session: AsyncSession, attempts: list[Attempt]) -> set[uuid.UUID]:
    """The outcomes of many tries in one statement; the ids of the rows they
    applied to (an outcome already written, or overtaken, applies to none)."""
    if not attempts:
        return set()
    rows = [
        {
            "id": str(a.delivery_id),
            "attempts": a.attempts,
            "state": a.state,
            "status": a.status,
            "latency_ms": a.latency_ms,
            "error": a.error[:500] if a.error else None,
            "retry_s": a.retry_in_s,
        }
        for a in attempts
    ]
    conn = await session.connection()
    found = await conn.execute(_ATTEMPTS, {"rows": json.dumps(rows)})
    return {row[0] for row in found}


async def reset_failures(session: AsyncSession, hook_ids: list[uuid.UUID]) -> None:
    """A delivery succeeded for each of ``hook_ids``: their runs of failures end."""
    if hook_ids:
        await session.exec(
            update(Webhook)
            .where(col(Webhook.id).in_(hook_ids), col(Webhook.failures) != 0)
            .values(failures=0)
        )


async def succeeded(session: AsyncSession, hook_id: uuid.UUID) -> None:
    await session.exec(
        update(Webhook)
        .where(col(Webhook.id) == hook_id, col(Webhook.failures) != 0)
        .values(failures=0)
    )


async def failed(session: AsyncSession, hook_id: uuid.UUID) -> int:
    """One more delivery out of tries in a row; the new count."""
    conn = await session.connection()
    found = await conn.execute(
        text("UPDATE webhooks SET failures = failures + 1 WHERE id = :h RETURNING failures"),
        {"h": hook_id},
    )
    value = found.scalar_one_or_none()
    return int(value) if value is not None else 0


async def disable(
    session: AsyncSession, hook_id: uuid.UUID, reason: str
) -> tuple[uuid.UUID, str] | None:
    """Stop a subscription and cancel its pending deliveries: its owner and
    URL, or None when it was already stopped or is gone."""
    conn = await session.connection()
    found = await conn.execute(
        text(
            "UPDATE webhooks SET active = false, disabled_reason = :r, updated_at = now() "
            "WHERE id = :h AND active RETURNING agent_id, url"
        ),
        {"h": hook_id, "r": reason},
    )
    row = found.first()
    if row is None:
        return None
    await conn.execute(
        text(
            "UPDATE webhook_deliveries SET state = 'cancelled' "
            "WHERE webhook_id = :h AND state = 'pending'"
        ),
        {"h": hook_id},
    )
    return row[0], row[1]


# Per subscription, the created_at of its ``keep``-th newest delivery (the
# log's index, newest first); older finished rows past the age go, a batch
# at a time. Subscriptions with fewer than ``keep`` rows lose nothing.
_PRUNE = text(
    """
    WITH bounds AS (
        SELECT w.id AS webhook_id, kept.created_at AS keep_from
        FROM webhooks w
        CROSS JOIN LATERAL (
            SELECT created_at FROM webhook_deliveries
            WHERE webhook_id = w.id
            ORDER BY created_at DESC OFFSET :skip LIMIT 1
        ) kept
    ), doomed AS (
        SELECT d.id FROM bounds
        CROSS JOIN LATERAL (
            SELECT id FROM webhook_deliveries
            WHERE webhook_id = bounds.webhook_id
              AND created_at < LEAST(bounds.keep_from,
                                     now() - make_interval(secs => :age_s))
              AND state <> 'pending'
            LIMIT :batch
        ) d
        LIMIT :batch
    )
    DELETE FROM webhook_deliveries d USING doomed WHERE d.id = doomed.id
    """
)


async def prune_deliveries(session: AsyncSession, age_s: float, keep: int, batch: int) -> int:
    """Delete up to ``batch`` finished deliveries older than ``age_s``
    seconds, keeping each subscription's newest ``keep``; how many went."""
    conn = await session.connection()
    found = await conn.execute(_PRUNE, {"skip": max(keep - 1, 0), "age_s": age_s, "batch": batch})
    return int(found.rowcount)


async def username(session: AsyncSession, agent_id: uuid.UUID) -> str:
    conn = await session.connection()
    found = await conn.execute(text("SELECT username FROM agents WHERE id = :a"), {"a": agent_id})
    return str(found.scalar_one_or_none() or "")
