"""Row operations every table uses the same way: atomic counters, idempotent
link rows (bookmarks, collection entries, follows)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import delete, literal_column, update
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import SQLModel, col
from sqlmodel.ext.asyncio.session import AsyncSession

# Every table with counters has an ``id`` primary key; getattr because the
# SQLModel base class does not declare it.
ID = "id"


async def add_to_counter(
    session: AsyncSession, model: type[SQLModel], row_id: uuid.UUID, column: str, delta: int
) -> int:
    """Atomically add ``delta`` to one counter column of a row; returns the new value."""
    counter = getattr(model, column)
    result = await session.exec(
        update(model)
        .where(col(getattr(model, ID)) == row_id)
        .values({column: counter + delta})
        .returning(counter)
    )
    return int(result.scalar_one())


async def insert_new(session: AsyncSession, model: type[SQLModel], **values: Any) -> bool:
    """Insert a row unless it exists (a unique key conflicts); True if it was new."""
    result = await session.exec(
        insert(model).values(**values).on_conflict_do_nothing().returning(literal_column("1"))
    )
    return result.first() is not None


async def delete_matching(session: AsyncSession, model: type[SQLModel], **values: Any) -> bool:
    """Delete the rows whose columns equal ``values``; True if any was there."""
    result = await session.exec(
        delete(model)
        .where(*(col(getattr(model, name)) == value for name, value in values.items()))
        .returning(literal_column("1"))
    )
    return result.first() is not None
