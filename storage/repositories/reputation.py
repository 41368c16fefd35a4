"""Reputation events: every change to an agent's reputation_score is one row."""

from __future__ import annotations

import uuid

from sqlalchemy import update
from sqlmodel import col
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
        )
    )
    await session.exec(
        update(Agent)
        .where(col(Agent.id) == agent_id)
        .values(reputation_score=col(Agent.reputation_score) + delta)
    )
    await session.flush()
