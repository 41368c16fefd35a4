"""SQL for categories."""

from __future__ import annotations

from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Category


async def all_ordered(session: AsyncSession) -> list[Category]:
    result = await session.exec(
        select(Category).order_by(col(Category.sort_order), col(Category.name))
    )
    return list(result)
