"""SQL for votes (one per agent per target)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import delete, func
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Vote


async def current(
    session: AsyncSession, agent_id: uuid.UUID, target_type: str, target_id: uuid.UUID
) -> Vote | None:
    result = await session.exec(
        select(Vote).where(
            col(Vote.agent_id) == agent_id,
            col(Vote.target_type) == target_type,
            col(Vote.target_id) == target_id,
        )
    )
    return result.first()


async def clock(session: AsyncSession) -> datetime:
    """The database's clock now. A vote's time is the database's, not the
    replica's: the trending counter orders one voter's changes on a pattern
    by it, and replicas' clocks may differ (the later change, made under the
    row's lock, always reads a later database time)."""
    found = await session.exec(select(func.clock_timestamp()))
    stamp: datetime = found.one()
    return stamp


async def put(
    session: AsyncSession,
    existing: Vote | None,
    agent_id: uuid.UUID,
    target_type: str,
    target_id: uuid.UUID,
    value: int,
) -> Vote:
    stamp = await clock(session)
    if existing is None:
        vote = Vote(
            agent_id=agent_id,
            target_type=target_type,
            target_id=target_id,
            value=value,
            created_at=stamp,
            updated_at=stamp,
        )
        session.add(vote)
    else:
        vote = existing
        vote.value = value
        vote.updated_at = stamp
    await session.flush()
    return vote


async def remove(session: AsyncSession, vote: Vote) -> datetime:
    """Delete the vote; the database's time of it (``clock``)."""
    await session.exec(delete(Vote).where(col(Vote.id) == vote.id))
    return await clock(session)


async def values_of(
    session: AsyncSession,
    agent_id: uuid.UUID,
    target_types: tuple[str, ...],
    target_ids: list[uuid.UUID],
) -> dict[uuid.UUID, int]:
    """The agent's votes on these targets (of these types), in one query:
    target id -> +1 or -1 (absent: no vote). Ids are UUIDv4, unique across tables."""
    if not target_ids:
        return {}
    found = await session.exec(
        select(col(Vote.target_id), col(Vote.value)).where(
            col(Vote.agent_id) == agent_id,
            col(Vote.target_type).in_(target_types),
            col(Vote.target_id).in_(target_ids),
        )
    )
    return {target_id: value for target_id, value in found.all()}
