"""SQL for idempotency keys (serve_app/services/idempotency.py holds the rule)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import IdempotencyKey

# The first key of the two-key advisory lock space held by a request running
# under an Idempotency-Key (the second is 32 bits of the key's hash): distinct
# from every one-key lock and from the upload quota's class (72_730_024).
LOCK_CLASS = 72_730_019

# Expired rows removed by each keyed write (see ``sweep``).
SWEEP_BATCH = 100


def _lock_key(key_hash: bytes) -> int:
    return int.from_bytes(key_hash[:4], "big", signed=True)


async def try_lock(session: AsyncSession, key_hash: bytes) -> bool:
    """Take the key's lock until this transaction ends; False at once when
    another transaction holds it (a copy of the request is still running).
    Two keys share a lock only when 32 bits of their hashes collide: the
    later one then reads as "in progress" for the moment the first runs."""
    result = await session.execute(
        text("SELECT pg_try_advisory_xact_lock(:cls, :key)"),
        {"cls": LOCK_CLASS, "key": _lock_key(key_hash)},
    )
    return bool(result.scalar_one())


async def live(session: AsyncSession, key_hash: bytes, now: datetime) -> IdempotencyKey | None:
    """The stored answer under ``key_hash``, unless it has expired."""
    query = select(IdempotencyKey).where(
        col(IdempotencyKey.key_hash) == key_hash, col(IdempotencyKey.expires_at) > now
    )
    return (await session.exec(query)).first()


async def save(session: AsyncSession, row: IdempotencyKey) -> None:
    """Store ``row``; an expired row still under the same hash is replaced
    (the caller holds the key's lock, so nothing else writes it meanwhile)."""
    values = {
        "key_hash": row.key_hash,
        "request_hash": row.request_hash,
        "status_code": row.status_code,
        "response": row.response,
        "created_at": row.created_at,
        "expires_at": row.expires_at,
    }
    statement = insert(IdempotencyKey).values(**values)
    statement = statement.on_conflict_do_update(
        index_elements=[col(IdempotencyKey.key_hash)],
        set_={k: v for k, v in values.items() if k != "key_hash"},
    )
    await session.execute(statement)


async def sweep(session: AsyncSession, now: datetime, limit: int = SWEEP_BATCH) -> int:
    """Delete up to ``limit`` expired rows (of any caller), skipping rows that
    another transaction holds; returns how many went. Every keyed write calls
    it, so expired rows never outnumber the writes that could remove them."""
    result = await session.execute(
        text(
            "DELETE FROM idempotency_keys WHERE key_hash IN ("
            " SELECT key_hash FROM idempotency_keys WHERE expires_at <= :now"
            " ORDER BY expires_at LIMIT :limit FOR UPDATE SKIP LOCKED)"
        ),
        {"now": now, "limit": limit},
    )
    return int(getattr(result, "rowcount", 0) or 0)
