"""SQL for uploaded files (the bytes themselves live in a FileStore, storage/files.py)."""

from __future__ import annotations

import uuid

from sqlalchemy import func, text
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Upload
from storage.repositories import rows


async def insert(session: AsyncSession, upload: Upload) -> Upload:
    session.add(upload)
    await session.flush()
    return upload


async def by_path(session: AsyncSession, path: str) -> Upload | None:
    return (await session.exec(select(Upload).where(col(Upload.path) == path))).first()


async def remove(session: AsyncSession, upload_id: uuid.UUID) -> bool:
    """Delete the row; False if another transaction removed it first."""
    return await rows.delete_matching(session, Upload, id=upload_id)


# The first key of the two-key advisory lock space held by an agent's upload
# quota (the second is a hash of the agent id): distinct from every one-key lock.
QUOTA_LOCK_CLASS = 72_730_024


async def lock_quota(session: AsyncSession, agent_id: uuid.UUID) -> None:
    """Hold ``agent_id``'s upload quota until this transaction ends, so two
    uploads of one agent cannot both count the same free bytes. An advisory
    lock rather than the agent's row: votes and follows update that row."""
    await session.execute(
        text("SELECT pg_advisory_xact_lock(:cls, hashtext(:agent))"),
        {"cls": QUOTA_LOCK_CLASS, "agent": str(agent_id)},
    )


async def bytes_used(session: AsyncSession, agent_id: uuid.UUID) -> int:
    """The bytes ``agent_id``'s stored uploads take."""
    query = select(func.coalesce(func.sum(col(Upload.size)), 0)).where(
        col(Upload.agent_id) == agent_id
    )
    return int((await session.exec(query)).one())
