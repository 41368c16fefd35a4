"""Tuned model versions in Postgres (docs/decisions/tuning.md): a version is
its sentence-transformers folder as one tar archive, stored in chunks in
``model_chunks`` beside its card in ``model_versions``. Any process that
reaches the database (a reembed actor, an Embedder replica, on any node)
unpacks it once into its model cache, under the archive's SHA-256, and loads
it from there as it loads the packaged model; the ONNX export of it is
cached by the weights' hash (``embeddings.onnx_model.cache_key``).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.config import TUNED_PREFIX
from storage.repositories import tuning as repo

# Bytes per model_chunks row: a 90 MB model is 23 rows; a reader holds the
# archive (it is hashed before it is unpacked) plus one row.
CHUNK_BYTES = 4 * 1024 * 1024
PREFIX = TUNED_PREFIX


class ModelStoreError(Exception):
    """A version that does not exist, is incomplete, or does not read back
    as it was stored."""


def is_version(model: str) -> bool:
    """Does ``model`` name a stored tuned version (not the packaged model or
    a path)?"""
    return model.startswith(PREFIX)


def version_name(sha256: str, at: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(at if at is not None else time.time()))
    return f"{PREFIX}{stamp}-{sha256[:8]}"


def pack(folder: Path) -> bytes:
    """The model folder as an uncompressed tar archive (the weights do not
    compress), members sorted and their times zeroed, so the same files give
    the same bytes and hash."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(folder)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    return out.getvalue()


def split(data: bytes, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at : at + size]


@dataclass(frozen=True)
class Stored:
    name: str
    sha256: str
    size: int
    chunks: int


async def store(
    sessions: async_sessionmaker[AsyncSession],
    folder: Path,
    base: str,
    accepted: bool,
    card: dict[str, Any],
) -> Stored:
    """Store the model in ``folder`` as a new version, in one transaction."""
    data = pack(folder)
    digest = hashlib.sha256(data).hexdigest()
    name = version_name(digest)
    async with sessions() as session:
        n = await repo.add_version(
            session, name, base, digest, len(data), split(data), accepted, {**card, "name": name}
        )
        await session.commit()
    return Stored(name, digest, len(data), n)


def _safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for m in members:
        if not m.isfile() or m.name.startswith("/") or ".." in Path(m.name).parts:
            raise ModelStoreError(f"the archive holds an unexpected entry {m.name!r}")
    return members


async def local_copy(sessions: async_sessionmaker[AsyncSession], name: str, cache: Path) -> Path:
    """The folder of version ``name`` on this node, unpacked from the
    database on first use under ``cache/versions/<sha256>``;
    ``ModelStoreError`` if it does not exist, is incomplete, or reads back
    with another hash."""
    async with sessions() as session:
        row = await repo.version(session, name)
        if row is None:
            raise ModelStoreError(f"no model version named {name!r} (cairn models list)")
        if not row.complete:
            raise ModelStoreError(f"model version {name!r} was not stored completely")
        target = cache / "versions" / row.sha256
        if (target / "modules.json").is_file():
            return target
        parts = await repo.chunks(session, name)
        await session.rollback()
    data = b"".join(parts)
    got = hashlib.sha256(data).hexdigest()
    if got != row.sha256 or len(data) != row.size:
        raise ModelStoreError(
            f"model version {name!r} reads back as {len(data)} bytes with SHA-256 "
            f"{got[:12]}…, stored as {row.size} bytes with {row.sha256[:12]}…"
        )
    unpack(data, target)
    return target


def unpack(data: bytes, target: Path) -> None:
    """Unpack an archive into ``target``, once per node: beside it first,
    then renamed, under a lock other processes wait on."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "modules.json").is_file():
            return
        aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
                tar.extractall(aside, members=_safe_members(tar), filter="data")
            if target.exists():
                shutil.rmtree(target)
            os.replace(aside, target)
        finally:
            shutil.rmtree(aside, ignore_errors=True)


def folder_for(model: str, database_url: str, cache: Path) -> str:
    """What an encoder loads for ``model``: a stored version's local copy
    (read from the database at ``database_url`` on first use;
    ``ModelStoreError`` where it cannot be), else the name itself (the
    packaged model, a path). Blocking: its own thread and event loop, so it
    may be called where a loop runs (an async actor's constructor)."""
    if not is_version(model):
        return model
    if not database_url:
        raise ModelStoreError(f"{model!r} is a stored version, and no database is configured")
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from storage.db import make_engine, make_sessionmaker

    async def fetch() -> str:
        engine = make_engine(database_url, pool_size=1, max_overflow=0)
        try:
            return str(await local_copy(make_sessionmaker(engine), model, cache))
        finally:
            await engine.dispose()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fetch()).result()
