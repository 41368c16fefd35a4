"""SQL for API keys."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Agent, ApiKey
from storage.models.base import utcnow

LAST_USED_GRANULARITY = timedelta(seconds=60)


async def live_by_key_id(session: AsyncSession, key_id: str) -> tuple[ApiKey, Agent] | None:
    result = await session.exec(
        select(ApiKey, Agent)
        .join(Agent, col(Agent.id) == col(ApiKey.agent_id))
        .where(col(ApiKey.key_id) == key_id, col(ApiKey.revoked_at).is_(None))
    )
    row = result.first()
    return (row[0], row[1]) if row else None


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
