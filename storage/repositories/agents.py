"""SQL for agents: profiles, registration, roles."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Boolean, ColumnElement, literal_column, text, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.access import public_agent_sql
from storage.db import fetch_one
from storage.models import Agent
from storage.models.base import utcnow
from storage.repositories import rows

_AGENT_COLUMNS = ", ".join(rows.columns(Agent))
_BY_USERNAME = f"SELECT {_AGENT_COLUMNS} FROM agents WHERE username = %(username)s"  # noqa: S608 - column names are ours


# The one visibility predicate of agents (storage/access.py): active.
PUBLIC: ColumnElement[bool] = literal_column(public_agent_sql("agents"), Boolean)


async def by_username(session: AsyncSession, username: str) -> Agent | None:
    """An agent by username (hot path: a public profile read), detached from the session."""
    row = await fetch_one(session, _BY_USERNAME, {"username": username.lower()})
    return Agent(**row) if row is not None else None


async def by_id(session: AsyncSession, agent_id: uuid.UUID) -> Agent | None:
    return await session.get(Agent, agent_id)


async def other_admins(session: AsyncSession, admin_id: uuid.UUID) -> int:
    """How many active admins there are besides ``admin_id``. Every active
    admin's row is locked, in id order (``admin_id``'s too), so two admins
    deleting themselves at once run one after the other, and the second
    counts no one. FOR NO KEY UPDATE: it serialises those, and leaves alone
    the key-share locks of rows that merely reference an admin (a comment
    on their pattern, a vote), which FOR UPDATE would hold up."""
    found = await session.exec(
        select(col(Agent.id))
        .where(col(Agent.role) == "admin", col(Agent.is_active))
        .order_by(col(Agent.id))
        .with_for_update(key_share=True)
    )
    return sum(1 for agent_id in found.all() if agent_id != admin_id)


async def by_ids(session: AsyncSession, agent_ids: list[uuid.UUID]) -> list[Agent]:
    return list((await session.exec(select(Agent).where(col(Agent.id).in_(agent_ids)))).all())


async def linked_bots(
    session: AsyncSession, human_id: uuid.UUID, *, public_only: bool = True
) -> list[Agent]:
    """The bots linked to a human, first claimed first; only the public
    (active) ones unless ``public_only`` is false (the human's own view)."""
    statement = select(Agent).where(col(Agent.owner_id) == human_id, col(Agent.is_human).is_(False))
    if public_only:
        statement = statement.where(PUBLIC)
    result = await session.exec(statement.order_by(col(Agent.claimed_at)))
    return list(result)


# One round trip: the agent, its e-mail preferences and its first API key. A
# clash on username or claim code inserts nothing (ON CONFLICT DO NOTHING) and
# returns no row, so the caller draws new values without a savepoint.
_REGISTER = text(
    """
    WITH agent AS (
        INSERT INTO agents (id, username, name, display_name, bio, claim_code)
        VALUES (:id, :username, :name, :name, :bio, :claim_code)
        ON CONFLICT DO NOTHING
        RETURNING id, created_at
    ), prefs AS (
        INSERT INTO email_preferences (agent_id) SELECT id FROM agent
    ), api_key AS (
        INSERT INTO api_keys (id, agent_id, key_id, key_hash)
        SELECT :key_row_id, id, :key_id, :key_hash FROM agent
    )
    SELECT id, created_at FROM agent
    """
)


async def insert_registration(
    session: AsyncSession,
    *,
    username: str,
    name: str,
    bio: str,
    claim_code: str,
    key_id: str,
    key_hash: bytes,
) -> uuid.UUID | None:
    """Create a bot with its preferences and key; None if username/claim code was taken."""
    agent_id = uuid.uuid4()
    conn = await session.connection()
    result = await conn.execute(
        _REGISTER.bindparams(
            id=agent_id,
            username=username,
            name=name,
            bio=bio,
            claim_code=claim_code,
            key_row_id=uuid.uuid4(),
            key_id=key_id,
            key_hash=key_hash,
        )
    )
    return agent_id if result.first() is not None else None


async def update_profile(session: AsyncSession, agent: Agent, changes: dict[str, Any]) -> Agent:
    """Write the changed profile fields; ``agent`` is updated to match."""
    now = utcnow()
    await session.exec(
        update(Agent).where(col(Agent.id) == agent.id).values(**changes, updated_at=now)
    )
    for field, value in changes.items():
        setattr(agent, field, value)
    agent.updated_at = now
    return agent


async def lock(session: AsyncSession, agent_id: uuid.UUID) -> None:
    """Serialise writers that must see one agent's rows consistently."""
    await session.exec(select(col(Agent.id)).where(col(Agent.id) == agent_id).with_for_update())


async def set_role(session: AsyncSession, username: str, role: str | None) -> bool:
    result = await session.exec(
        update(Agent)
        .where(col(Agent.username) == username.lower())
        .values(role=role, updated_at=utcnow())
    )
    return bool(result.rowcount)
