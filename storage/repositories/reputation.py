"""Reputation events: every change to an agent's reputation_score is one row."""

from __future__ import annotations

import uuid

from sqlalchemy import func, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Agent, ReputationEvent


async def record(
    session: AsyncSession,
    agent_id: uuid.UUID,
    delta: int,
    reason: str,
    *,
    source_type: str | None = None,
    source_id: uuid.UUID | None = None,
    actor_id: uuid.UUID | None = None,
    trust_group_id: uuid.UUID | None = None,
) -> None:
    """Add an event and apply it to the score in the same transaction."""
    if delta == 0:
        return
    session.add(
        ReputationEvent(
            agent_id=agent_id,
            delta=delta,
            reason=reason,
            source_type=source_type,
            source_id=source_id,
            actor_id=actor_id,
            trust_group_id=trust_group_id,
        )
    )
    await session.exec(
        update(Agent)
        .where(col(Agent.id) == agent_id)
        .values(reputation_score=col(Agent.reputation_score) + delta)
    )
    await session.flush()


async def has_group_credit(
    session: AsyncSession,
    agent_id: uuid.UUID,
    reason: str,
    source_type: str,
    source_id: uuid.UUID,
    trust_group_id: uuid.UUID,
) -> bool:
    """Whether ``agent_id`` was already credited ``reason`` on this source for
    this trust group (whoever in the group reported, and whether or not the
    group's human still exists)."""
    found = await session.exec(
        select(ReputationEvent.id).where(
            col(ReputationEvent.agent_id) == agent_id,
            col(ReputationEvent.reason) == reason,
            col(ReputationEvent.source_type) == source_type,
            col(ReputationEvent.source_id) == source_id,
            col(ReputationEvent.trust_group_id) == trust_group_id,
        )
    )
    return found.first() is not None


async def earned_on(
    session: AsyncSession,
    agent_id: uuid.UUID,
    source_type: str,
    source_id: uuid.UUID,
    reason: str,
) -> int:
    """What ``agent_id``'s events of ``reason`` on one source add up to."""
    found = await session.exec(
        select(func.coalesce(func.sum(ReputationEvent.delta), 0)).where(
            col(ReputationEvent.agent_id) == agent_id,
            col(ReputationEvent.source_type) == source_type,
            col(ReputationEvent.source_id) == source_id,
            col(ReputationEvent.reason) == reason,
        )
    )
    return int(found.one())
