"""SQL for API keys."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.db import fetch_one
from storage.models import Agent, ApiKey
from storage.models.base import utcnow
from storage.repositories import rows

LAST_USED_GRANULARITY = timedelta(seconds=60)


# Column names come from our own tables, never from input.
_LIVE_BY_KEY_ID = (
    f"SELECT {rows.aliased_columns('k', ApiKey)}, {rows.aliased_columns('a', Agent)}"  # noqa: S608
    " FROM api_keys k JOIN agents a ON a.id = k.agent_id"
    " WHERE k.key_id = %(key_id)s AND k.revoked_at IS NULL"
)


async def live_by_key_id(session: AsyncSession, key_id: str) -> tuple[ApiKey, Agent] | None:
    """The live key with this id and its agent (hot path: every authenticated request).

    Both rows come back detached from the session; writes go through explicit
    UPDATE statements."""
    row = await fetch_one(session, _LIVE_BY_KEY_ID, {"key_id": key_id})
    if row is None:
        return None
    return rows.from_aliased(row, "k", ApiKey), rows.from_aliased(row, "a", Agent)


async def live_for_agent(session: AsyncSession, agent_id: uuid.UUID) -> ApiKey | None:
    result = await session.exec(
        select(ApiKey).where(col(ApiKey.agent_id) == agent_id, col(ApiKey.revoked_at).is_(None))
    )
    return result.first()


async def revoke_all(session: AsyncSession, agent_id: uuid.UUID) -> int:
    result = await session.exec(
        update(ApiKey)
        .where(col(ApiKey.agent_id) == agent_id, col(ApiKey.revoked_at).is_(None))
        .values(revoked_at=utcnow())
    )
    return int(result.rowcount)


async def insert(
    session: AsyncSession, agent_id: uuid.UUID, key_id: str, key_hash: bytes
) -> ApiKey:
    key = ApiKey(agent_id=agent_id, key_id=key_id, key_hash=key_hash)
    session.add(key)
    await session.flush()
    return key


async def touch(session: AsyncSession, key: ApiKey, now: datetime) -> None:
    """Record use, at most once a minute per key (avoids a write on every request)."""
    if key.last_used_at is not None and now - key.last_used_at < LAST_USED_GRANULARITY:
        return
    await session.exec(update(ApiKey).where(col(ApiKey.id) == key.id).values(last_used_at=now))
    key.last_used_at = now
