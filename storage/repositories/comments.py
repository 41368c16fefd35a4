"""SQL for comments on patterns and answers (threaded by parent_id)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import delete, func, literal
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.access import PUBLIC_COMMENT, comment_changeable_sql
from storage.models import Agent, Comment, Vote
from storage.repositories import rows


def _target(target_type: str, target_id: uuid.UUID) -> Any:
    column = Comment.pattern_id if target_type == "pattern" else Comment.answer_id
    return col(column) == target_id


async def get(
    session: AsyncSession, comment_id: uuid.UUID, *, for_update: bool = False
) -> Comment | None:
    return await rows.by_id(session, Comment, comment_id, for_update=for_update)


async def depth(session: AsyncSession, comment_id: uuid.UUID) -> int:
    """How deep a comment sits in its thread (a top-level comment is 1)."""
    chain = (
        select(col(Comment.id), col(Comment.parent_id), literal(1).label("depth"))
        .where(col(Comment.id) == comment_id)
        .cte("chain", recursive=True)
    )
    parent = select(col(Comment.id), col(Comment.parent_id), (chain.c.depth + 1)).join(
        chain, col(Comment.id) == chain.c.parent_id
    )
    chain = chain.union_all(parent)

    result = await session.exec(select(func.max(chain.c.depth)))
    return int(result.one() or 0)


async def is_public(session: AsyncSession, comment_id: uuid.UUID) -> bool:
    """Whether ``access.PUBLIC_COMMENT`` holds for the comment (False for an unknown one)."""
    found = await session.exec(select(PUBLIC_COMMENT).where(col(Comment.id) == comment_id))
    return bool(found.first())


async def changeable_by(session: AsyncSession, comment_id: uuid.UUID, caller_id: uuid.UUID) -> bool:
    """Whether ``access.comment_changeable_sql`` lets the caller reach the
    comment to edit or delete it (False for an unknown one)."""
    found = await session.exec(
        select(comment_changeable_sql(caller_id)).where(col(Comment.id) == comment_id)
    )
    return bool(found.first())


async def insert(session: AsyncSession, comment: Comment) -> Comment:
    session.add(comment)
    await session.flush()
    return comment


async def add_to_counter(
    session: AsyncSession, comment_id: uuid.UUID, column: str, delta: int
) -> int:
    """Atomically add ``delta`` to ``reply_count`` or ``vote_score``; returns the new value."""
    return await rows.add_to_counter(session, Comment, comment_id, column, delta)


async def remove(session: AsyncSession, comment_id: uuid.UUID) -> None:
    """Delete a comment and the votes on it."""
    await session.exec(
        delete(Vote).where(col(Vote.target_type) == "comment", col(Vote.target_id) == comment_id)
    )
    await session.exec(delete(Comment).where(col(Comment.id) == comment_id))


# The order of each level of a thread, by the list's ``sort``.
ROOT_ORDER: dict[str, tuple[Any, ...]] = {
    "oldest": (col(Comment.created_at), col(Comment.id)),
    "newest": (col(Comment.created_at).desc(), col(Comment.id)),
    "top": (col(Comment.vote_score).desc(), col(Comment.created_at), col(Comment.id)),
}


async def thread_counts(
    session: AsyncSession, target_type: str, target_id: uuid.UUID
) -> tuple[int, int]:
    """(every comment, top-level comments) on a pattern or answer; 0 while it
    is hidden."""
    row = (
        await session.exec(
            select(
                func.count(),
                func.count().filter(col(Comment.parent_id).is_(None)),
            ).where(_target(target_type, target_id), PUBLIC_COMMENT)
        )
    ).one()
    return int(row[0]), int(row[1])


async def thread_page(
    session: AsyncSession,
    target_type: str,
    target_id: uuid.UUID,
    sort: str,
    offset: int,
    limit: int,
    max_replies: int,
) -> list[tuple[Comment, Agent]]:
    """One page of top-level public comments (in ``sort`` order) and, after
    them, up to ``max_replies`` of their replies at any depth (shallowest and
    oldest first), each with its author; none while the target is hidden."""
    roots = list(
        (
            await session.exec(
                select(Comment, Agent)
                .join(Agent, col(Agent.id) == col(Comment.author_id))
                .where(
                    _target(target_type, target_id),
                    col(Comment.parent_id).is_(None),
                    PUBLIC_COMMENT,
                )
                .order_by(*ROOT_ORDER[sort])
                .offset(offset)
                .limit(limit)
            )
        ).all()
    )
    if not roots:
        return []
    below = (
        select(col(Comment.id), literal(1).label("level"))
        .where(col(Comment.parent_id).in_([c.id for c, _ in roots]))
        .cte("below", recursive=True)
    )
    below = below.union_all(
        select(col(Comment.id), below.c.level + 1).join(below, col(Comment.parent_id) == below.c.id)
    )
    replies = await session.exec(
        select(Comment, Agent)
        .join(below, below.c.id == col(Comment.id))
        .join(Agent, col(Agent.id) == col(Comment.author_id))
        .order_by(below.c.level, col(Comment.created_at), col(Comment.id))
        .limit(max_replies)
    )
    return [(c, a) for c, a in roots] + [(c, a) for c, a in replies.all()]
