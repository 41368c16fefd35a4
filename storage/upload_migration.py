"""Move uploads from the local-disk store (``STATE_DIR/uploads``) into Postgres.

One transaction per file: its upload row is locked, its chunks written, the
transaction committed, and only then the file is removed. So the move can
stop at any moment and run again: a file whose chunks are already in the
database (a stop between the commit and the removal) is just removed. A file
without a row (left by a crash before its row was written, never served) or
whose size differs from its row stays where it is and is reported.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from storage.db import make_engine, make_sessionmaker
from storage.files import CHUNK_BYTES, LocalFileStore
from storage.repositories import uploads as repo

log = logging.getLogger("cairn.uploads")

Progress = Callable[["MoveReport"], None]


@dataclass
class MoveReport:
    total: int = 0  # files found in the folder
    moved: int = 0  # written into Postgres by this run
    already: int = 0  # in Postgres before (a resumed move): the file was only removed
    bytes_moved: int = 0
    skipped: list[str] = field(default_factory=list)  # "path: why", left on disk

    @property
    def done(self) -> int:
        return self.moved + self.already + len(self.skipped)

    def line(self) -> str:
        return (
            f"{self.done}/{self.total} files: {self.moved} moved "
            f"({self.bytes_moved / 1048576:.1f} MiB), {self.already} already in Postgres, "
            f"{len(self.skipped)} left on disk"
        )


async def move_to_postgres(
    database_url: str,
    root: Path,
    *,
    chunk_bytes: int = CHUNK_BYTES,
    progress: Progress | None = None,
    every_s: float = 1.0,
) -> MoveReport:
    """Move every file under ``root`` into Postgres; ``progress`` is called
    about every ``every_s`` seconds and once at the end."""
    store = LocalFileStore(root)
    paths = store.paths()
    report = MoveReport(total=len(paths))
    if not paths:
        return report
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    sessions = make_sessionmaker(engine)
    last = time.monotonic()
    try:
        for path in paths:
            data = await asyncio.to_thread(store.read, path)
            if data is None:  # gone meanwhile
                report.skipped.append(f"{path}: vanished")
                continue
            async with sessions() as session:
                upload = await repo.lock_row(session, path)
                if upload is None:
                    report.skipped.append(f"{path}: no upload row")
                    continue
                if await repo.has_chunks(session, upload.id):
                    outcome = "already"
                elif upload.size != len(data):
                    report.skipped.append(f"{path}: {len(data)} bytes, its row says {upload.size}")
                    continue
                else:
                    await repo.save_chunks(session, upload.id, data, chunk_bytes)
                    outcome = "moved"
                await session.commit()
            await asyncio.to_thread(store.delete, path)
            if outcome == "moved":
                report.moved += 1
                report.bytes_moved += len(data)
            else:
                report.already += 1
            if progress is not None and time.monotonic() - last >= every_s:
                last = time.monotonic()
                progress(report)
    finally:
        await engine.dispose()
    await asyncio.to_thread(store.remove_empty_folders)
    for skipped in report.skipped:
        log.warning("upload left on disk: %s", skipped)
    if progress is not None:
        progress(report)
    return report
