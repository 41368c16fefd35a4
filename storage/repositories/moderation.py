"""SQL for moderation: the decision log and the flags a decision settles."""

from __future__ import annotations

import uuid

from sqlalchemy import update
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Flag


async def settle_flags(session: AsyncSession, pattern_id: uuid.UUID, status: str) -> int:
    """Close the pattern's open flags (``resolved`` on reject, ``dismissed`` on approve)."""
    result = await session.exec(
        update(Flag)
        .where(col(Flag.pattern_id) == pattern_id, col(Flag.status) == "open")
        .values(status=status)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]
