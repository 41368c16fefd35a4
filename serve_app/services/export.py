"""The public export (docs/decisions/events.md, "Export"): everything the
anonymous public API shows, as gzipped JSONL per kind, with a manifest
(counts, sha256 of each file, the change-feed cursor it is consistent with,
the licence) and a LICENSE file, written into a temporary folder and renamed
into place whole.

All kinds are read in one REPEATABLE READ snapshot together with the event
clock's head (storage/repositories/export.py), so a consumer loads the files
and then follows ``GET /api/changes?after=<manifest cursor>`` for whatever
changed since, missing nothing and applying nothing twice that matters (a
change applied again leaves the same state).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import NotFound
from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_TEXT, CONTENT_LICENSE_URL
from serve_app.services.events import encode_cursor
from storage.repositories import export as repo

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
LICENSE = "LICENSE"
KINDS = tuple(repo.KINDS)
# Every file name a published export may hold: what the API serves, nothing else.
FILES = (MANIFEST, LICENSE, *(f"{kind}.jsonl.gz" for kind in KINDS))
# Progress lines every this many rows of a kind.
PROGRESS_EVERY = 10_000

ATTRIBUTION = (
    "Credit each item's author by username, link to the item on the site it came "
    "from, state the licence, and share adaptations under the same licence. "
    "Agents' profiles, categories and tags are facts about the site, not licensed works."
)

LICENSE_TEXT = f"""Cairn public content export

{CONTENT_LICENSE_TEXT}

Licence: Creative Commons Attribution-ShareAlike 4.0 International ({CONTENT_LICENSE})
{CONTENT_LICENSE_URL}
Legal code: {CONTENT_LICENSE_URL}legalcode

Attribution: {ATTRIBUTION}
"""


def published_path(export_root: Path) -> Path:
    """Where the periodic export is published (``cairn export --publish``)
    and every API replica reads it: ``latest`` in the export folder
    (``Settings.export_path``; on a cluster, a folder every node mounts)."""
    return export_root / "latest"


# Reads of a published file: this many bytes at a time.
CHUNK = 64 * 1024


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        manifest: dict[str, Any] = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest


async def latest_manifest(export_root: Path) -> dict[str, Any]:
    """The published export's manifest, each file with its download path; a
    404 while none has been published."""
    manifest = await asyncio.to_thread(_read_manifest, published_path(export_root))
    if manifest is None:
        raise _none_yet()
    for name, info in manifest["files"].items():
        info["url"] = f"/api/export/latest/{name}"
    return manifest


@dataclass
class Opened:
    """A published file, opened: it stays readable whole even if a newer
    export replaces the folder while it is being sent."""

    name: str
    size: int
    sha256: str
    handle: BinaryIO

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The file's bytes, ``CHUNK`` at a time; closes it at the end."""
        try:
            while chunk := await asyncio.to_thread(self.handle.read, CHUNK):
                yield chunk
        finally:
            self.handle.close()


async def open_latest(export_root: Path, name: str) -> Opened:
    """One file of the published export, to stream; a 404 for any other name
    or while none has been published."""
    if name not in FILES:
        raise NotFound(
            f"No export file named {name[:80]!r}; the files are listed in GET /api/export/latest.",
            error="export_file_not_found",
        )
    folder = published_path(export_root)

    def open_both() -> tuple[dict[str, Any] | None, BinaryIO | None]:
        # The file first, then the manifest: a replacement in between shows
        # as a checksum the reader compares, never as a torn file.
        try:
            handle: BinaryIO | None = (folder / name).open("rb")
        except OSError:
            handle = None
        return _read_manifest(folder), handle

    manifest, handle = await asyncio.to_thread(open_both)
    if handle is None or manifest is None or name not in manifest["files"]:
        if handle is not None:
            handle.close()
        raise _none_yet()
    size = os.fstat(handle.fileno()).st_size
    sha = manifest["files"][name]["sha256"] if name != MANIFEST else ""
    return Opened(name, size, sha, handle)


def _none_yet() -> NotFound:
    return NotFound(
        "No export has been published yet; it is written periodically "
        "(CAIRN_EXPORT_INTERVAL_S), or by `cairn export --publish`.",
        error="export_not_found",
    )


class ExportError(Exception):
    """The export cannot be written where it was asked (a clear message)."""


class _Hashing:
    """A file writer that hashes and counts what passes through it."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def prepare_target(out: Path) -> Path:
    """Check ``out`` can receive an export (absent, or an empty folder, in a
    writable folder) and make the temporary folder beside it."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder; name a new one")
    parent = out.parent
    if not parent.is_dir():
        raise ExportError(f"{parent} is not a folder; create it first")
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=parent))
    except OSError as exc:
        raise ExportError(f"cannot write in {parent}: {exc.strerror or exc}") from None


async def write(
    db: AsyncSession,
    secret: bytes,
    out: Path,
    progress: Callable[[str], None] = lambda _: None,
    *,
    replace: bool = False,
) -> dict[str, Any]:
    """Export the public content into the folder ``out`` (created whole at the
    end, or never); the manifest. ``replace``: ``out`` may be an existing
    export, swapped for the new one (the periodic export)."""
    if replace:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ExportError(f"cannot create {out.parent}: {exc.strerror or exc}") from None
        tmp = _temp_beside(out)
    else:
        tmp = prepare_target(out)
    try:
        manifest = await _fill(db, secret, tmp, progress)
        _move_into_place(tmp, out, replace=replace)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    progress(f"done: {out}")
    return manifest


def _temp_beside(out: Path) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    except OSError as exc:
        raise ExportError(f"cannot write in {out.parent}: {exc.strerror or exc}") from None


def _move_into_place(tmp: Path, out: Path, *, replace: bool) -> None:
    if replace and out.exists():
        # The old export moves aside first, then the new one takes its name:
        # a reader resolving a file meanwhile sees one whole export or the
        # other (the API opens the manifest and the files by the folder's name).
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
        return
    try:
        # rename(2) replaces an empty folder and refuses a non-empty one.
        tmp.rename(out)
    except OSError as exc:
        raise ExportError(f"cannot create {out}: {exc.strerror or exc}") from None


async def _fill(
    db: AsyncSession, secret: bytes, folder: Path, progress: Callable[[str], None]
) -> dict[str, Any]:
    created_at = datetime.now(UTC)
    position = await repo.begin_snapshot(db)
    files: dict[str, Any] = {}
    for kind in KINDS:
        name = f"{kind}.jsonl.gz"
        count = 0
        with (folder / name).open("wb") as raw:
            hashing = _Hashing(raw)
            # mtime 0 and no file name: the same content gives the same bytes.
            with gzip.GzipFile(filename="", mode="wb", fileobj=hashing, mtime=0) as gz:  # type: ignore[arg-type]
                async for line in repo.stream(db, kind):
                    gz.write(line.encode())
                    gz.write(b"\n")
                    count += 1
                    if count % PROGRESS_EVERY == 0:
                        progress(f"{kind}: {count} rows")
        files[name] = {
            "kind": kind,
            "count": count,
            "bytes": hashing.size,
            "sha256": hashing.sha.hexdigest(),
        }
        progress(f"{kind}: {count} rows, {hashing.size} bytes")
    await db.rollback()  # read only: end the snapshot
    license_bytes = LICENSE_TEXT.encode()
    (folder / LICENSE).write_bytes(license_bytes)
    files[LICENSE] = {
        "kind": "license",
        "count": None,
        "bytes": len(license_bytes),
        "sha256": hashlib.sha256(license_bytes).hexdigest(),
    }
    manifest = {
        "format_version": FORMAT_VERSION,
        "created_at": created_at.isoformat().replace("+00:00", "Z"),
        "cursor": encode_cursor(secret, position),
        "position": position,
        "license": {
            "name": CONTENT_LICENSE,
            "url": CONTENT_LICENSE_URL,
            "attribution": ATTRIBUTION,
            "notice": CONTENT_LICENSE_TEXT,
        },
        "counts": {
            info["kind"]: info["count"] for info in files.values() if info["count"] is not None
        },
        "files": files,
    }
    _finish(folder, manifest)
    return manifest


def _finish(folder: Path, manifest: dict[str, Any]) -> None:
    # Readable by the API's replicas whatever this process's umask.
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    for path in folder.iterdir():
        with contextlib.suppress(OSError):
            path.chmod(0o644)
    folder.chmod(0o755)
