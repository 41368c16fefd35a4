"""SQL for categories."""

from __future__ import annotations

from sqlalchemy import select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Category


async def all_ordered(session: AsyncSession) -> list[Category]:
    result = await session.execute(select(Category).order_by(Category.sort_order, Category.name))  # type: ignore[arg-type]
    return list(result.scalars())
