"""Image uploads: judge the bytes, store the file, record it; serve and delete.

The file is written before its row; if the request's transaction does not
commit, an on-rollback hook removes the file again (once the write has
finished, even when the request was cancelled meanwhile). A deleted upload's
file goes once the deletion has committed. Serving asks the database first,
so a file without a row (a crash between the two) is never served.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app import hooks, images
from serve_app.context import AppContext
from serve_app.errors import BadRequest, Forbidden, NotFound, PayloadTooLarge
from serve_app.multipart import FilePart
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
    store = ctx.files
    saving: Future[None] = _WRITERS.submit(store.save, path, part.data)

    def undo() -> None:
        saving.add_done_callback(lambda _: _forget(store, path))

    hooks.on_rollback(db, undo)
    await asyncio.wrap_future(saving)
    await repo.insert(
        db,
        Upload(agent_id=agent.id, path=path, content_type=kind.content_type, size=len(part.data)),
    )
    return {
        "url": url(ctx, path),
        "path": path,
        "size": len(part.data),
        "contentType": kind.content_type,
    }


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
    hooks.after_commit(db, lambda: asyncio.to_thread(store.delete, path))
    return {"message": "Upload deleted."}


async def read(ctx: AppContext, db: AsyncSession, owner: str, name: str) -> tuple[bytes, str]:
    """The bytes and content type of a stored upload (404 when unknown)."""
    path = f"{owner}/{name}"
    missing = NotFound("No such upload.")
    if not files.is_valid_path(path):
        raise missing
    upload = await repo.by_path(db, path)
    if upload is None:
        raise missing
    data = await asyncio.to_thread(ctx.files.read, path)
    if data is None:
        log.warning("upload %s has a row but no file", path)
        raise missing
    return data, upload.content_type


async def delete_owner(ctx: AppContext, agent_id: uuid.UUID) -> int:
    """Remove every file of ``agent_id`` (their rows go with the agent's)."""
    return await asyncio.to_thread(ctx.files.delete_owner, agent_id)
