"""Files only their owner may read (the HMAC key, a backup's files), created
so from the first byte.

A file written with the default mode and narrowed by a chmod afterwards is,
until that chmod, as open as the umask allows: another user could open it
then and keep reading. Here the file is created by ``os.open`` with mode 0600
(the umask can only narrow that) and set to exactly 0600 through its own
descriptor before anything is written; an existing file or a symbolic link
at the path is never written through.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

MODE = 0o600
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_private(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist: ``FileExistsError``) holding ``data``,
    mode 0600 from its creation. A failed write removes the file."""
    fd = os.open(path, _FLAGS, MODE)
    try:
        os.fchmod(fd, MODE)  # exactly 0600 whatever the umask (it only narrows)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        raise
    os.close(fd)


def temporary_beside(path: Path) -> Path:
    """A new name in ``path``'s folder for a file that becomes ``path``."""
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")


def replace_private(path: Path, data: bytes) -> None:
    """Put ``data`` at ``path`` (mode 0600 from its creation), replacing what
    is there in one rename: a reader sees the old file or the new one."""
    tmp = temporary_beside(path)
    create_private(tmp, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
