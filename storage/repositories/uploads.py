"""SQL for uploaded files (the bytes themselves live in a FileStore, storage/files.py)."""

from __future__ import annotations

import uuid

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
