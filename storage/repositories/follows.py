"""SQL for follows and the personal feed."""

from __future__ import annotations

import uuid
from typing import Literal

from sqlalchemy import and_, func
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.access import PUBLIC_PATTERN
from storage.models import Agent, Category, Follow, Pattern
from storage.repositories import agents, rows

Direction = Literal["followers", "following"]


async def add(session: AsyncSession, follower_id: uuid.UUID, followee_id: uuid.UUID) -> bool:
    """True if the follow is new (following twice is harmless)."""
    return await rows.insert_new(session, Follow, follower_id=follower_id, followee_id=followee_id)


async def remove(session: AsyncSession, follower_id: uuid.UUID, followee_id: uuid.UUID) -> bool:
    return await rows.delete_matching(
        session, Follow, follower_id=follower_id, followee_id=followee_id
    )


async def adjust_counts(
    session: AsyncSession, follower_id: uuid.UUID, followee_id: uuid.UUID, delta: int
) -> int:
    """Move both agents' counters, in id order (the lock order between agents);
    returns the followee's new followers_count."""
    changes = sorted(
        [(follower_id, "following_count"), (followee_id, "followers_count")],
        key=lambda change: change[0],
    )
    followers = 0
    for agent_id, column in changes:
        value = await rows.add_to_counter(session, Agent, agent_id, column, delta)
        if column == "followers_count":
            followers = value
    return followers


async def is_following(
    session: AsyncSession, follower_id: uuid.UUID, followee_id: uuid.UUID
) -> bool:
    return await rows.exists_matching(
        session, Follow, follower_id=follower_id, followee_id=followee_id
    )


async def connections(
    session: AsyncSession, agent_id: uuid.UUID, direction: Direction, page: int, limit: int
) -> tuple[list[tuple[Agent, Follow]], int]:
    """The active agents following ``agent_id`` ("followers") or followed by it
    ("following"), with the follow row, most recent follow first."""
    if direction == "followers":
        mine, theirs = col(Follow.followee_id), col(Follow.follower_id)
    else:
        mine, theirs = col(Follow.follower_id), col(Follow.followee_id)
    joined = col(Agent.id) == theirs
    condition = and_(mine == agent_id, agents.PUBLIC)
    total = (
        await session.exec(
            select(func.count()).select_from(Follow).join(Agent, joined).where(condition)
        )
    ).one()
    found = await session.exec(
        select(Agent, Follow)
        .join(Follow, joined)
        .where(condition)
        .order_by(col(Follow.created_at).desc(), col(Agent.id))
        .offset((page - 1) * limit)
        .limit(limit)
    )
    return [(a, f) for a, f in found.all()], int(total)


async def feed(
    session: AsyncSession,
    agent_id: uuid.UUID,
    page: int,
    limit: int,
    *,
    unlabelled: bool = False,
) -> tuple[list[tuple[Pattern, Agent, Category | None]], int]:
    """Public patterns by the agents ``agent_id`` follows, newest first;
    ``unlabelled``: only those without safety labels."""
    followed = select(col(Follow.followee_id)).where(col(Follow.follower_id) == agent_id)
    where = PUBLIC_PATTERN & col(Pattern.author_id).in_(followed)
    if unlabelled:
        where = where & rows.unlabelled(Pattern.safety)
    total = (await session.exec(select(func.count()).select_from(Pattern).where(where))).one()
    found = await session.exec(
        select(Pattern, Agent, Category)
        .join(Agent, col(Agent.id) == col(Pattern.author_id))
        .outerjoin(Category, col(Category.id) == col(Pattern.category_id))
        .where(where)
        .order_by(col(Pattern.created_at).desc(), col(Pattern.id))
        .offset((page - 1) * limit)
        .limit(limit)
    )
    return [(p, a, c) for p, a, c in found.all()], int(total)
