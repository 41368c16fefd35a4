"""SQL for uploaded files: their rows, and their bytes when Postgres stores them
(``upload_chunks``; the other store is a FileStore, storage/files.py)."""

from __future__ import annotations

import uuid

from sqlalchemy import LargeBinary, bindparam, func, text
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Upload, UploadChunk
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


# --- the bytes, in the Postgres store (upload_chunks) -----------------------

_INSERT_CHUNK = text(
    "INSERT INTO upload_chunks (upload_id, seq, data) VALUES (:upload_id, :seq, :data)"
).bindparams(bindparam("data", type_=LargeBinary))


async def save_chunks(
    session: AsyncSession, upload_id: uuid.UUID, data: bytes, chunk_bytes: int
) -> int:
    """Store ``data`` as ``upload_id``'s chunks 0, 1, … of ``chunk_bytes`` at
    most (in the caller's transaction); returns how many."""
    view = memoryview(data)
    rows = [
        {"upload_id": upload_id, "seq": seq, "data": view[start : start + chunk_bytes]}
        for seq, start in enumerate(range(0, len(data), chunk_bytes))
    ]
    if rows:
        await session.execute(_INSERT_CHUNK, rows)
    return len(rows)


async def chunk(session: AsyncSession, upload_id: uuid.UUID, seq: int) -> bytes | None:
    """Chunk ``seq`` of an upload's bytes, or None past the last (or when gone)."""
    query = select(UploadChunk.data).where(
        col(UploadChunk.upload_id) == upload_id, col(UploadChunk.seq) == seq
    )
    data = (await session.exec(query)).first()
    return None if data is None else bytes(data)


async def chunks(
    session: AsyncSession, upload_id: uuid.UUID, first: int, count: int
) -> list[bytes]:
    """Chunks ``first`` to ``first + count - 1`` of an upload's bytes, in
    order (fewer past the last, none when gone)."""
    query = (
        select(UploadChunk.data)
        .where(
            col(UploadChunk.upload_id) == upload_id,
            col(UploadChunk.seq) >= first,
            col(UploadChunk.seq) < first + count,
        )
        .order_by(col(UploadChunk.seq))
    )
    return [bytes(data) for data in (await session.exec(query)).all()]


async def has_chunks(session: AsyncSession, upload_id: uuid.UUID) -> bool:
    query = select(UploadChunk.seq).where(col(UploadChunk.upload_id) == upload_id).limit(1)
    return (await session.exec(query)).first() is not None


async def lock_row(session: AsyncSession, path: str) -> Upload | None:
    """The upload at ``path``, locked until this transaction ends (moving its
    file into the database: two movers cannot both write its chunks)."""
    query = select(Upload).where(col(Upload.path) == path).with_for_update()
    return (await session.exec(query)).first()
