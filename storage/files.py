"""Where uploaded files live: in Postgres (:class:`PostgresFileStore`, the
default: every node of a cluster reaches it), or behind the ``FileStore``
interface, whose store is a folder on the local disk (one machine, or a
shared file system).

A stored path is ``"{agent_id}/{32 hex}.{ext}"``: one folder per agent (so an
account's files go with :meth:`FileStore.delete_owner`), a random name, and an
extension from the detected type. Every path is checked against that exact
shape before it touches the disk, and the resolved file must lie inside the
store's root, so no path a client sends can reach anything else.

A ``FileStore``'s methods block (disk I/O): async callers run them in a
worker thread. The Postgres store has no methods of its own: its bytes are
rows (``upload_chunks``, storage/repositories/uploads.py) written and deleted
in the request's own transaction.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Protocol

EXTENSIONS = ("jpg", "png", "gif", "webp", "svg")
# Bytes per upload_chunks row: a 5 MiB image is 20 rows, and a reader holds
# at most one chunk (plus what the client has not taken yet) in memory.
CHUNK_BYTES = 256 * 1024

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
PATH_RE = re.compile(rf"^(?P<owner>{_UUID})/(?P<name>[0-9a-f]{{32}}\.(?:{'|'.join(EXTENSIONS)}))\Z")
_NAME_RE = re.compile(rf"^[0-9a-f]{{32}}\.(?:{'|'.join(EXTENSIONS)})\Z")


class InvalidPath(ValueError):
    """A path that is not of the form ``{agent_id}/{32 hex}.{ext}``."""


def is_valid_path(path: str) -> bool:
    return isinstance(path, str) and PATH_RE.match(path) is not None


def new_path(agent_id: uuid.UUID, ext: str) -> str:
    """A fresh, unguessable path in ``agent_id``'s folder."""
    if ext not in EXTENSIONS:
        raise InvalidPath(f"unknown extension {ext!r}")
    return f"{agent_id}/{uuid.uuid4().hex}.{ext}"


def owner_of(path: str) -> uuid.UUID:
    """The agent id a (valid) path starts with."""
    match = PATH_RE.match(path)
    if match is None:
        raise InvalidPath(path)
    return uuid.UUID(match.group("owner"))


class FileStore(Protocol):
    """Immutable blobs by path. ``save`` replaces atomically; ``read`` of an
    unknown path is None; deletes say whether anything was there."""

    def save(self, path: str, data: bytes) -> None: ...

    def read(self, path: str) -> bytes | None: ...

    def delete(self, path: str) -> bool: ...

    def delete_owner(self, agent_id: uuid.UUID) -> int: ...


class PostgresFileStore:
    """Uploads' bytes in Postgres, ``chunk_bytes`` per row: saved with the
    upload's row, deleted with it (and with its agent), read a chunk at a time."""

    def __init__(self, chunk_bytes: int = CHUNK_BYTES) -> None:
        if chunk_bytes < 1:
            raise ValueError("chunk_bytes must be positive")
        self.chunk_bytes = chunk_bytes


class LocalFileStore:
    """Files under ``root`` on the local disk (or any mounted file system)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _resolved_root(self) -> Path:
        return self.root.resolve()

    def _target(self, path: str) -> Path:
        if not is_valid_path(path):
            raise InvalidPath(f"not a stored file path: {path!r}")
        root = self._resolved_root()
        target = (root / path).resolve()
        # The pattern admits no "..", "/" or "\\"; this also refuses an agent
        # folder that is a symbolic link to somewhere else.
        if not target.is_relative_to(root) or target.parent.parent != root:
            raise InvalidPath(f"path leaves the store: {path!r}")
        return target

    def save(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path``: a temporary file in the same folder,
        flushed to disk, then renamed over the target, so a reader or a crash
        never sees half a file."""
        target = self._target(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as tmp:
                tmp.write(data)
                tmp.flush()
                os.fsync(tmp.fileno())
            os.chmod(tmp_name, 0o644)
            os.replace(tmp_name, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise
        _fsync_dir(target.parent)

    def read(self, path: str) -> bytes | None:
        target = self._target(path)
        try:
            return target.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def delete(self, path: str) -> bool:
        target = self._target(path)
        try:
            target.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def paths(self) -> list[str]:
        """Every stored path (valid shape, a plain file), sorted."""
        root = self._resolved_root()
        if not root.is_dir():
            return []
        found = []
        for folder in os.scandir(root):
            if not folder.is_dir(follow_symlinks=False):
                continue
            for entry in os.scandir(folder.path):
                path = f"{folder.name}/{entry.name}"
                if entry.is_file(follow_symlinks=False) and is_valid_path(path):
                    found.append(path)
        return sorted(found)

    def remove_empty_folders(self) -> int:
        """Remove agent folders left empty (after their files moved elsewhere)."""
        root = self._resolved_root()
        removed = 0
        if root.is_dir():
            for folder in os.scandir(root):
                if folder.is_dir(follow_symlinks=False):
                    with contextlib.suppress(OSError):  # not empty
                        os.rmdir(folder.path)
                        removed += 1
        return removed

    def delete_owner(self, agent_id: uuid.UUID) -> int:
        """Remove ``agent_id``'s whole folder; returns how many stored files it held."""
        root = self._resolved_root()
        folder = root / str(uuid.UUID(str(agent_id)))
        if folder.is_symlink():
            # Never follow it: only the link itself belongs to the store.
            folder.unlink()
            return 0
        if not folder.is_dir():
            return 0
        count = sum(
            1
            for entry in os.scandir(folder)
            if entry.is_file(follow_symlinks=False) and _NAME_RE.match(entry.name)
        )
        shutil.rmtree(folder)
        return count


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (best effort: not every file system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
