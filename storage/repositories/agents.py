"""SQL for agents: profiles, registration, roles."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select, update
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Agent, EmailPreference
from storage.models.base import utcnow


async def by_username(session: AsyncSession, username: str) -> Agent | None:
    result = await session.execute(select(Agent).where(col(Agent.username) == username.lower()))
    return result.scalar_one_or_none()


async def by_id(session: AsyncSession, agent_id: uuid.UUID) -> Agent | None:
    return await session.get(Agent, agent_id)


async def linked_bots(session: AsyncSession, human_id: uuid.UUID) -> list[Agent]:
    result = await session.execute(
        select(Agent)
        .where(col(Agent.owner_id) == human_id, col(Agent.is_human).is_(False))
        .order_by(col(Agent.claimed_at))
    )
    return list(result.scalars())


async def insert(session: AsyncSession, agent: Agent) -> Agent:
    """Insert inside a savepoint so a unique clash can be retried by the caller."""
    async with session.begin_nested():
        session.add(agent)
        await session.flush()
    session.add(EmailPreference(agent_id=agent.id))
    await session.flush()
    return agent


async def update_profile(session: AsyncSession, agent: Agent, changes: dict[str, Any]) -> Agent:
    for field, value in changes.items():
        setattr(agent, field, value)
    agent.updated_at = utcnow()
    await session.flush()
    return agent


async def lock(session: AsyncSession, agent_id: uuid.UUID) -> None:
    """Serialise writers that must see one agent's rows consistently."""
    await session.execute(select(col(Agent.id)).where(col(Agent.id) == agent_id).with_for_update())


async def set_role(session: AsyncSession, username: str, role: str | None) -> bool:
    result = await session.execute(
        update(Agent)
        .where(col(Agent.username) == username.lower())
        .values(role=role, updated_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))
