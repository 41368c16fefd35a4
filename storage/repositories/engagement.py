"""SQL for bookmarks and flags on patterns."""

from __future__ import annotations

import uuid

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage import access
from storage.models import Agent, Bookmark, Category, Flag, Pattern
from storage.repositories import rows


async def add_bookmark(session: AsyncSession, agent_id: uuid.UUID, pattern_id: uuid.UUID) -> bool:
    """True if the bookmark is new (adding twice is harmless)."""
    return await rows.insert_new(session, Bookmark, agent_id=agent_id, pattern_id=pattern_id)


async def remove_bookmark(
    session: AsyncSession, agent_id: uuid.UUID, pattern_id: uuid.UUID
) -> bool:
    return await rows.delete_matching(session, Bookmark, agent_id=agent_id, pattern_id=pattern_id)


async def bookmarks_of(
    session: AsyncSession, agent_id: uuid.UUID, page: int, limit: int
) -> tuple[list[tuple[Pattern, Agent, Category | None, Bookmark]], int]:
    """The agent's bookmarks, newest first; hidden patterns are left out
    unless the agent wrote them."""
    where = (col(Bookmark.agent_id) == agent_id) & access.pattern_visible_to_sql(agent_id)
    total = (
        await session.exec(
            select(func.count())
            .select_from(Bookmark)
            .join(Pattern, col(Pattern.id) == col(Bookmark.pattern_id))
            .where(where)
        )
    ).one()
    rows = (
        await session.exec(
            select(Pattern, Agent, Category, Bookmark)
            .join(Bookmark, col(Bookmark.pattern_id) == col(Pattern.id))
            .join(Agent, col(Agent.id) == col(Pattern.author_id))
            .outerjoin(Category, col(Category.id) == col(Pattern.category_id))
            .where(where)
            .order_by(col(Bookmark.created_at).desc(), col(Pattern.id))
            .offset((page - 1) * limit)
            .limit(limit)
        )
    ).all()
    return [(r[0], r[1], r[2], r[3]) for r in rows], int(total)


async def add_flag(
    session: AsyncSession,
    agent_id: uuid.UUID,
    pattern_id: uuid.UUID,
    reason: str,
    details: str | None,
) -> Flag | None:
    """The new flag, or None if this agent had already flagged the pattern."""
    result = await session.exec(
        insert(Flag)
        .values(
            id=uuid.uuid4(),
            agent_id=agent_id,
            pattern_id=pattern_id,
            reason=reason,
            details=details,
        )
        .on_conflict_do_nothing(constraint="uq_flags_pattern_agent")
        .returning(col(Flag.id))
    )
    flag_id = result.first()
    return await session.get(Flag, flag_id[0]) if flag_id else None


async def has_bookmark(session: AsyncSession, agent_id: uuid.UUID, pattern_id: uuid.UUID) -> bool:
    return await rows.exists_matching(session, Bookmark, agent_id=agent_id, pattern_id=pattern_id)


async def open_flags(session: AsyncSession, pattern_id: uuid.UUID) -> int:
    """The pattern's flags no moderator has settled yet (``moderation.settle_flags``)."""
    found = await session.exec(
        select(func.count())
        .select_from(Flag)
        .where(col(Flag.pattern_id) == pattern_id, col(Flag.status) == "open")
    )
    return int(found.one())


async def flag_of(session: AsyncSession, agent_id: uuid.UUID, pattern_id: uuid.UUID) -> Flag | None:
    result = await session.exec(
        select(Flag).where(col(Flag.agent_id) == agent_id, col(Flag.pattern_id) == pattern_id)
    )
    return result.first()
