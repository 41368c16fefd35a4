"""One BM25 index per node, in a folder every process on the node opens.

Each Api replica used to hold its own tantivy index in memory (+192 MiB at
100,000 patterns). Here the node keeps one on disk: every replica opens it
read-only, memory-mapped, so its pages are the node's page cache, shared by
all of them, and one replica at a time writes (docs/decisions/search-at-scale.md,
"One BM25 index per node").

Layout under ``root`` (``<state folder>/bm25/<host>`` by default)::

    <key>/                     one per database and index format (``store_key``)
        writer.lock            flock: held while a process changes the index or state.json
        build.lock             flock: held by the one process building a generation
        state.json             what the current index holds (``StoreState``)
        g-<time>-<pid>-<hex>/  a generation: one build and the updates since
            building.lock      flock: held by the process building it, until published
            pattern/ agent/ question/   tantivy folders, one per kind

- **One writer.** A process changes the current generation or ``state.json``
  only while it holds ``writer.lock`` (``NodeStore.writer_lock``), an
  advisory lock the kernel drops when its holder exits, however it exits: a
  writer that dies hands the lock on to whoever asks next. tantivy's own
  writer lock in each folder backs it up.
- **Crash safety.** A tantivy commit replaces the folder's ``meta.json``
  atomically after its segment files are synced; ``state.json`` is written to
  a temporary file, synced and renamed over the old one *after* the commit it
  describes. So the index is always at least as new as the state says, and
  applying a change twice does no harm (the follower re-reads the row).
- **Generations.** A rebuild writes a new generation beside the current one
  (holding ``build.lock``, so that processes starting together build once;
  the writer lock only to publish), then publishes it; the others are deleted
  (``sweep``) unless a live process is still building them. A process that
  still maps a deleted generation's files keeps reading them until it moves
  to the current one (the kernel frees them then).

This module knows nothing of Postgres: what the index follows is the
caller's (``serve_app/runtime/index_copies/lexical.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval.lexical import (
    DEFAULT_LEXICAL,
    MAX_TOKEN,
    STOPWORDS,
    LexicalIndex,
    LexicalParams,
)

log = logging.getLogger("cairn.search")

# Bump when what an index folder holds changes meaning (the schema, the
# tokenizer, FIELDS): folders of another format are never opened.
FORMAT = 1
STATE = "state.json"
WRITER_LOCK = "writer.lock"
BUILD_LOCK = "build.lock"
BUILDING_LOCK = "building.lock"
# A key folder nobody has recorded a read in for this long belongs to a
# database or format no process here follows any more: ``sweep_keys`` removes it.
STALE_KEY_S = 24 * 3600.0


def store_key(database: str, params: LexicalParams = DEFAULT_LEXICAL) -> str:
    """The folder name of ``database``'s index under ``params`` (and this
    module's format, tokenizer and stop words): a folder is only ever opened
    by processes that would have built the same index."""
    described = json.dumps(
        {
            "format": FORMAT,
            "database": database,
            "weights": sorted(params.weights.items()),
            "stopwords": sorted(STOPWORDS),
            "max_token": MAX_TOKEN,
        },
        sort_keys=True,
    )
    return hashlib.sha256(described.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class StoreState:
    """What the current index holds: every change of the followed log made
    by a transaction older than ``xmin``, and those of ``applied`` (change
    ids), as read at ``read_at`` (wall clock). ``generation`` names the
    current folder; ``version`` grows with every write of the state,
    ``commits`` with every one that changed the index (a reader reloads
    then)."""

    generation: str
    version: int
    xmin: int
    applied: frozenset[int] = field(default_factory=frozenset)
    read_at: float = 0.0
    commits: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "generation": self.generation,
            "version": self.version,
            "xmin": self.xmin,
            "applied": sorted(self.applied),
            "read_at": self.read_at,
            "commits": self.commits,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoreState:
        if data.get("format") != FORMAT:
            raise ValueError(f"state of format {data.get('format')!r}, not {FORMAT}")
        return cls(
            generation=str(data["generation"]),
            version=int(data["version"]),
            xmin=int(data["xmin"]),
            applied=frozenset(int(i) for i in data["applied"]),
            read_at=float(data["read_at"]),
            commits=int(data.get("commits", 0)),
        )


class FileLock:
    """An exclusive advisory lock (``flock``) on a file: one holder at a
    time, whether the others are in this process or another; released by
    ``release`` or when the holder's process ends. Not re-entrant: while
    held, ``acquire`` answers False, also to the holder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock if it is free (never waits); whether it was taken."""
        if self._fd is not None:
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        # Who holds it, for a person looking at the folder.
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # drops the flock


class Generation:
    """A generation being built: its folder and the lock that keeps ``sweep``
    away from it until ``release`` (or until this process ends)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name
        self._lock = FileLock(path / BUILDING_LOCK)
        if not self._lock.acquire():
            raise RuntimeError(f"{path} is being built by another process")

    def release(self) -> None:
        self._lock.release()


class NodeStore:
    """The folder of one database's BM25 indexes on this node (see the module
    docstring): its state, its writer lock and its generations."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        key: str,
        kinds: Sequence[str],
        params: LexicalParams = DEFAULT_LEXICAL,
    ) -> None:
        self.root = Path(root)
        self.dir = self.root / key
        self.kinds = tuple(kinds)
        self.params = params
        # One lock object per NodeStore: two stores of one folder (two
        # processes, or two in one process) exclude each other.
        self.writer_lock = FileLock(self.dir / WRITER_LOCK)
        # One build at a time: the replicas starting together on a node scan
        # Postgres once, not once each.
        self.build_lock = FileLock(self.dir / BUILD_LOCK)
        self._cached: tuple[tuple[int, int, int], StoreState] | None = None

    # --- state ------------------------------------------------------------

    def read(self, fresh: bool = False) -> StoreState | None:
        """The published state; None when there is none (or it cannot be
        read: the caller builds). Re-parsed only when the file looks changed
        (inode, mtime, size), or always with ``fresh``: two writes within the
        file system's clock tick may look alike, so whoever is about to write
        reads it ``fresh`` (under the writer lock)."""
        path = self.dir / STATE
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._cached = None
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if not fresh and self._cached is not None and self._cached[0] == stamp:
            return self._cached[1]
        try:
            state = StoreState.from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("lexical store: %s unreadable (%s); rebuilding", path, exc)
            return None
        self._cached = (stamp, state)
        return state

    def write(self, state: StoreState) -> None:
        """Publish ``state`` atomically (the caller holds ``writer_lock``)."""
        if not self.writer_lock.held:
            raise RuntimeError("state.json is written under the writer lock")
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{STATE}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(state.to_json(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / STATE)
        _sync_dir(self.dir)

    # --- generations ------------------------------------------------------

    def begin(self) -> Generation:
        """A new, empty generation, locked as being built by this process."""
        name = f"g-{time.time_ns()}-{os.getpid()}-{secrets.token_hex(3)}"
        path = self.dir / name
        path.mkdir(parents=True)
        return Generation(path)

    def open(
        self, generation: str, writer: bool = False, heap_bytes: int = 50_000_000
    ) -> dict[str, LexicalIndex]:
        """The generation's index of each kind (created where missing), read
        only unless ``writer`` (which takes each folder's writer lock)."""
        path = self.dir / generation
        if not path.is_dir():
            raise FileNotFoundError(f"no generation {generation} in {self.dir}")
        return {
            kind: LexicalIndex(self.params, heap_bytes, path=path / kind, writer=writer)
            for kind in self.kinds
        }

    def generations(self) -> list[str]:
        try:
            return sorted(p.name for p in self.dir.iterdir() if p.name.startswith("g-"))
        except FileNotFoundError:
            return []

    def sweep(self, keep: str) -> list[str]:
        """Delete the generations other than ``keep`` that no live process is
        building; the names deleted."""
        removed = []
        for name in self.generations():
            if name == keep:
                continue
            building = FileLock(self.dir / name / BUILDING_LOCK)
            if not building.acquire():
                continue
            try:
                shutil.rmtree(self.dir / name, ignore_errors=True)
            finally:
                building.release()
            removed.append(name)
        if removed:
            log.info("lexical store: removed generations %s", ", ".join(removed))
        return removed

    def sweep_keys(self, older_than_s: float = STALE_KEY_S) -> list[str]:
        """Delete the other key folders under ``root`` (other databases,
        older formats) in which no read has been recorded for
        ``older_than_s`` and no process is writing; the names deleted."""
        removed = []
        now = time.time()
        try:
            siblings = [p for p in self.root.iterdir() if p.is_dir() and p != self.dir]
        except FileNotFoundError:
            return []
        for path in siblings:
            with contextlib.suppress(OSError):
                state = path / STATE
                seen = (state if state.exists() else path).stat().st_mtime
                if now - seen < older_than_s:
                    continue
                lock = FileLock(path / WRITER_LOCK)
                if not lock.acquire():
                    continue
                try:
                    shutil.rmtree(path, ignore_errors=True)
                finally:
                    lock.release()
                removed.append(path.name)
        if removed:
            log.info("lexical store: removed stale folders %s", ", ".join(removed))
        return removed


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
