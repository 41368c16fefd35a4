"""SQL for collections and the patterns they hold."""

from __future__ import annotations

import uuid

from sqlalchemy import delete, func
from sqlalchemy.sql.elements import Label
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.access import PUBLIC_PATTERN as _VISIBLE_PATTERN
from storage.models import Agent, Category, Collection, CollectionPattern, Pattern
from storage.repositories import rows


def _pattern_count() -> Label[int]:
    """How many public patterns a collection holds (hidden ones are not shown)."""
    return (
        select(func.count())
        .select_from(CollectionPattern)
        .join(Pattern, col(Pattern.id) == col(CollectionPattern.pattern_id))
        .where(col(CollectionPattern.collection_id) == col(Collection.id), _VISIBLE_PATTERN)
        .correlate(Collection)
        .scalar_subquery()
        .label("pattern_count")
    )


async def insert_collection(session: AsyncSession, collection: Collection) -> Collection:
    session.add(collection)
    await session.flush()
    return collection


async def get(
    session: AsyncSession, collection_id: uuid.UUID, *, for_update: bool = False
) -> Collection | None:
    return await rows.by_id(session, Collection, collection_id, for_update=for_update)


async def with_count(
    session: AsyncSession, collection_id: uuid.UUID
) -> tuple[Collection, Agent, int] | None:
    row = (
        await session.exec(
            select(Collection, Agent, _pattern_count())
            .join(Agent, col(Agent.id) == col(Collection.owner_id))
            .where(col(Collection.id) == collection_id)
        )
    ).first()
    return (row[0], row[1], int(row[2])) if row else None


async def listing(
    session: AsyncSession, page: int, limit: int, owner_id: uuid.UUID | None
) -> tuple[list[tuple[Collection, Agent, int]], int]:
    """Public collections, or all of one owner's, newest first, with pattern counts."""
    where = (
        col(Collection.owner_id) == owner_id
        if owner_id is not None
        else col(Collection.is_public).is_(True)
    )
    total = (await session.exec(select(func.count()).select_from(Collection).where(where))).one()
    rows = (
        await session.exec(
            select(Collection, Agent, _pattern_count())
            .join(Agent, col(Agent.id) == col(Collection.owner_id))
            .where(where)
            .order_by(col(Collection.created_at).desc(), col(Collection.id))
            .offset((page - 1) * limit)
            .limit(limit)
        )
    ).all()
    return [(r[0], r[1], int(r[2])) for r in rows], int(total)


async def patterns_of(
    session: AsyncSession, collection_id: uuid.UUID
) -> list[tuple[Pattern, Agent, Category | None, CollectionPattern]]:
    """The collection's public patterns in the order they were added."""
    rows = (
        await session.exec(
            select(Pattern, Agent, Category, CollectionPattern)
            .join(CollectionPattern, col(CollectionPattern.pattern_id) == col(Pattern.id))
            .join(Agent, col(Agent.id) == col(Pattern.author_id))
            .outerjoin(Category, col(Category.id) == col(Pattern.category_id))
            .where(col(CollectionPattern.collection_id) == collection_id, _VISIBLE_PATTERN)
            .order_by(col(CollectionPattern.added_at), col(Pattern.id))
        )
    ).all()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


async def stored_count(session: AsyncSession, collection_id: uuid.UUID) -> int:
    """Every pattern row of the collection, hidden ones included (for the cap)."""
    result = await session.exec(
        select(func.count())
        .select_from(CollectionPattern)
        .where(col(CollectionPattern.collection_id) == collection_id)
    )
    return int(result.one())


async def add_pattern(
    session: AsyncSession, collection_id: uuid.UUID, pattern_id: uuid.UUID
) -> bool:
    """True if the pattern was not in the collection yet."""
    return await rows.insert_new(
        session, CollectionPattern, collection_id=collection_id, pattern_id=pattern_id
    )


async def holds(session: AsyncSession, collection_id: uuid.UUID, pattern_id: uuid.UUID) -> bool:
    """Whether the pattern is in the collection."""
    return await rows.exists_matching(
        session, CollectionPattern, collection_id=collection_id, pattern_id=pattern_id
    )


async def remove_pattern(
    session: AsyncSession, collection_id: uuid.UUID, pattern_id: uuid.UUID
) -> bool:
    return await rows.delete_matching(
        session, CollectionPattern, collection_id=collection_id, pattern_id=pattern_id
    )


async def delete_collection(session: AsyncSession, collection_id: uuid.UUID) -> None:
    await session.exec(delete(Collection).where(col(Collection.id) == collection_id))
