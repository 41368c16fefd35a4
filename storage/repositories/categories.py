"""SQL for categories."""

from __future__ import annotations

import uuid

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Category


async def all_ordered(session: AsyncSession) -> list[Category]:
    result = await session.exec(
        select(Category).order_by(col(Category.sort_order), col(Category.name))
    )
    return list(result)


async def exists(session: AsyncSession, category_id: uuid.UUID) -> bool:
    result = await session.exec(select(col(Category.id)).where(col(Category.id) == category_id))
    return result.first() is not None


async def by_id(session: AsyncSession, category_id: uuid.UUID | None) -> Category | None:
    return await session.get(Category, category_id) if category_id is not None else None
