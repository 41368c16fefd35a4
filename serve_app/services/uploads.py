"""Image uploads: judge the bytes, store the file, record it; serve and delete.

In Postgres (the default store) the bytes are chunk rows written with the
upload's row in the request's transaction and deleted with it: they commit
or vanish together, and every node reads them. Serving streams the chunks,
each read on a short connection of its own, so a slow reader holds none.

On the local disk the file is written before its row; if the request's
transaction does not commit, an on-rollback hook removes the file again (once
the write has finished, even when the request was cancelled meanwhile). A
deleted upload's file goes once the deletion has committed. Serving asks the
database first, so a file without a row (a crash between the two) is never
served.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.kit import hooks, images
from serve_app.kit.errors import BadRequest, Forbidden, NotFound, PayloadTooLarge
from serve_app.kit.multipart import FilePart
from serve_app.services import views
from storage import files
from storage.models import Agent, Upload
from storage.repositories import uploads as repo

log = logging.getLogger("cairn.uploads")

# Writes run here rather than in asyncio's default pool so that an undo can
# wait for a write still in progress (a concurrent Future outlives the
# cancelled coroutine that awaited it).
_WRITERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="cairn-uploads")


def url(ctx: AppContext, path: str) -> str:
    return f"{ctx.settings.base_url}/uploads/{path}"


def _over_quota(ctx: AppContext, used: int) -> PayloadTooLarge:
    quota = ctx.settings.upload_quota_bytes
    return PayloadTooLarge(
        f"Upload quota exceeded: your images take {used} of {quota} bytes. "
        "Delete some (DELETE /api/upload) to make room.",
        error="upload_quota_exceeded",
    )


async def check_room(ctx: AppContext, db: AsyncSession, agent: Agent) -> None:
    """413 ``upload_quota_exceeded`` when ``agent``'s quota is already full:
    checked before the body is read (the exact check is in :func:`create`)."""
    used = await repo.bytes_used(db, agent.id)
    if used >= ctx.settings.upload_quota_bytes:
        raise _over_quota(ctx, used)


async def create(ctx: AppContext, db: AsyncSession, agent: Agent, part: FilePart) -> dict[str, Any]:
    """Store ``part`` as ``agent``'s image; the Upload result's ``data``.

    The image is judged first (a bounded decode, 503 when the replica is
    busy), then the agent's quota is taken under a lock held to the end of
    the transaction, so parallel uploads cannot overrun it together."""
    try:
        kind = await ctx.decodes.run(images.inspect, part.data)
    except images.Rejected as exc:
        raise BadRequest(exc.message, error=exc.error) from exc
    size = len(part.data)
    await repo.lock_quota(db, agent.id)
    used = await repo.bytes_used(db, agent.id)
    if used + size > ctx.settings.upload_quota_bytes:
        raise _over_quota(ctx, used)
    path = files.new_path(agent.id, kind.ext)
    upload = Upload(agent_id=agent.id, path=path, content_type=kind.content_type, size=size)
    store = ctx.files
    if isinstance(store, files.PostgresFileStore):
        await repo.insert(db, upload)
        await repo.save_chunks(db, upload.id, part.data, store.chunk_bytes)
    else:
        await _save_on_disk(db, store, path, part.data)
        await repo.insert(db, upload)
    return {
        "url": url(ctx, path),
        "path": path,
        "size": len(part.data),
        "contentType": kind.content_type,
    }


async def _save_on_disk(db: AsyncSession, store: files.FileStore, path: str, data: bytes) -> None:
    """Write the file, and remove it again if ``db``'s transaction does not commit."""
    saving: Future[None] = _WRITERS.submit(store.save, path, data)

    def undo() -> None:
        saving.add_done_callback(lambda _: _forget(store, path))

    hooks.on_rollback(db, undo)
    await asyncio.wrap_future(saving)


def _forget(store: files.FileStore, path: str) -> None:
    try:
        store.delete(path)
    except Exception:
        log.exception("could not remove %s after a rollback", path)


async def delete(ctx: AppContext, db: AsyncSession, agent: Agent, path: str) -> dict[str, Any]:
    """Delete the caller's upload at ``path``: the row now, the file after commit."""
    if not files.is_valid_path(path):
        raise BadRequest(
            "path must be a stored upload path: '<agent id>/<32 hex digits>.<ext>'.",
            error="invalid_path",
        )
    upload = await repo.by_path(db, path)
    if upload is None:
        raise NotFound(f"No upload at {path}.")
    if upload.agent_id != agent.id:
        raise Forbidden("Only the agent who uploaded a file can delete it.")
    if not await repo.remove(db, upload.id):
        raise NotFound(f"No upload at {path}.")
    store = ctx.files
    # In Postgres the chunks went with the row.
    if not isinstance(store, files.PostgresFileStore):
        hooks.after_commit(db, lambda: asyncio.to_thread(store.delete, path))
    return views.envelope("Upload deleted.")


@dataclass(frozen=True)
class Stored:
    """A stored upload to serve: its first bytes (all of them for a small
    image) and the rest as a stream of chunks (None when there is no rest)."""

    content_type: str
    size: int
    etag: str
    head: bytes
    rest: AsyncIterator[bytes] | None


def etag(path: str) -> str:
    """A stored path's bytes never change: its random name is a strong ETag."""
    return f'"{path.rsplit("/", 1)[-1].split(".", 1)[0]}"'


async def read(ctx: AppContext, db: AsyncSession, owner: str, name: str) -> Stored:
    """A stored upload to serve (404 when unknown)."""
    path = f"{owner}/{name}"
    missing = NotFound("No such upload.")
    if not files.is_valid_path(path):
        raise missing
    upload = await repo.by_path(db, path)
    if upload is None:
        raise missing
    if not isinstance(ctx.files, files.PostgresFileStore):
        data = await asyncio.to_thread(ctx.files.read, path)
        if data is None:
            log.warning("upload %s has a row but no file", path)
            raise missing
        return Stored(upload.content_type, len(data), etag(path), data, None)
    head = await repo.chunk(db, upload.id, 0)
    if head is None:
        log.warning(
            "upload %s has a row but no bytes in Postgres (files still on a disk? "
            "`cairn uploads migrate` moves them)",
            path,
        )
        raise missing
    rest = None if len(head) >= upload.size else _chunks(ctx, upload, len(head))
    return Stored(upload.content_type, upload.size, etag(path), head, rest)


# Chunks read per query while streaming: fewer round trips, and at most
# this many chunks (1 MiB) held per reader.
READ_AHEAD = 4


async def _chunks(ctx: AppContext, upload: Upload, sent: int) -> AsyncIterator[bytes]:
    """Chunks 1, 2, … of ``upload``, a few at a time, each few read on a
    short connection of its own."""
    seq = 1
    while sent < upload.size:
        async with ctx.read_sessions() as db:
            batch = await repo.chunks(db, upload.id, seq, READ_AHEAD)
        if not batch:
            # Deleted while being read: the body stops short of its
            # Content-Length, which the client sees as a broken transfer.
            log.info("upload %s went away while it was being served", upload.path)
            return
        for data in batch:
            yield data
            sent += len(data)
        seq += len(batch)


async def delete_owner(ctx: AppContext, agent_id: uuid.UUID) -> int:
    """Remove every file of ``agent_id`` from a disk store (their rows, and
    bytes stored in Postgres, go with the agent's row)."""
    if isinstance(ctx.files, files.PostgresFileStore):
        return 0
    return await asyncio.to_thread(ctx.files.delete_owner, agent_id)
