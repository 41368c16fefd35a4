"""The lexical (BM25) side of search as the routes see it: ``LexicalSearch``.

Each Api process searches a BM25 index (``retrieval.lexical.LexicalIndex``)
per kind, so full-text search, and the fallback when the Embedder or the
VectorIndex cannot answer, need nothing but this node and Postgres
(docs/decisions/search.md, "Lexical ranking and fusion (issue 23)", "One
BM25 index per node").

Where the index lives (``CAIRN_SEARCH_LEXICAL_STORE``):

- **disk** (the default): one index per node and database, in a folder
  every Api process on the node opens memory-mapped
  (``retrieval.lexical_store.NodeStore``): its pages are the node's page
  cache, not each process's heap. A process starting finds it built and
  current and takes it up at once; otherwise it builds a new generation
  beside the current one and publishes it. Whichever process first finds a
  change not yet in the index applies it, holding the node's writer lock;
  the others see the commit on their next search (they re-read the folder's
  ``state.json`` and reload). Should the folder fail (a disk error, a lock
  never released), this process falls back to its own index in memory, and
  says so in ``stats``.
- **memory**: this process's own index in memory, built and followed by it
  alone (as before issue 36).

In both:

- **Build**: in the background, from every row that may be found
  (``storage.repositories.search.scan_lexical``). Until it is done ``search``
  answers None and the routes use Postgres full text, as before.
- **Follow** (``serve_app.runtime.index_copies.follow.Follower``): the triggers log every change
  of a searchable row in ``search_changes`` with its transaction id
  (migration 0015). A search (with ``refresh_s`` > 0: one finding the index
  older than that) first reads the changes of the transactions the index's
  last read had not seen finish, re-reads those rows and updates the index.
  An index whose log nobody has read for nearly as long as the log keeps
  changes (an hour) is rebuilt instead.

Hits are re-read from Postgres by the search service before they are shown,
so a row hidden a moment ago never appears even before the index catches up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.memory import release_freed_memory
from retrieval.lexical import FIELDS, LexicalIndex
from retrieval.lexical_store import (
    FileLock,
    NodeStore,
    StoreState,
    store_key,
)
from serve_app.runtime.index_copies.follow import PRUNE_EVERY_S, Follower
from storage.repositories import search as repo

log = logging.getLogger("cairn.search")

T = TypeVar("T")

# How long a search that found changes not yet in the node's index waits for
# the writer lock (the holder applies a few changes in milliseconds; a build
# publishing its generation in well under a second) before it answers from
# the index as it is.
LOCK_WAIT_S = 5.0
# How long a build waits for the lock to publish its generation.
PUBLISH_WAIT_S = 60.0
# A search finding state.json's last recorded read older than this records
# a new one (when the lock is free): a process starting later can tell the
# index is current even when nothing has changed for an hour.
KEEP_FRESH_S = 60.0
# The writer's memory budget while building (tantivy's arena).
BUILD_HEAP = 50_000_000
# How often a process waiting for another's build looks again.
BUILD_POLL_S = 0.5
# After falling back to memory, how long before a (re)build tries the node's
# folder again (an explicit ``build`` always does).
DISK_RETRY_S = 300.0


@dataclass(frozen=True)
class LexicalHits:
    """One kind's BM25 hits (search_id, score) best first, and the query's
    scale (``LexicalIndex.scale``) that the fusion divides them by."""

    hits: list[tuple[int, float]]
    scale: float | None = None


Hits = dict[str, LexicalHits]


class StoreError(Exception):
    """The node's index folder failed (disk, tantivy, a lock not released)."""


class LexicalSearch(Follower):
    name = "lexical index"

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine,
        kinds: Sequence[str] = ("pattern", "agent", "question"),
        refresh_s: float = 1.0,
        store_root: str | Path | None = None,
        lock_wait_s: float = LOCK_WAIT_S,
    ) -> None:
        """``store_root``: the folder of the node's shared indexes (None:
        this process's own, in memory)."""
        super().__init__(sessions, engine, refresh_s)
        self.kinds = tuple(kinds)
        self.indexes: dict[str, LexicalIndex] = {}
        self.store_root = Path(store_root) if store_root is not None else None
        self.lock_wait_s = lock_wait_s
        self.store: NodeStore | None = None
        self.store_error: str | None = None
        self._state: StoreState | None = None  # what this process's readers hold
        self._fell_back_at = float("-inf")
        self._store_made = asyncio.Lock()
        self.counters.update(
            {
                "documents": 0,
                "adopted": 0,
                "writes": 0,
                "reloads": 0,
                "lock_timeouts": 0,
                "fallbacks": 0,
            }
        )

    @property
    def shared(self) -> bool:
        """Whether this process searches the node's index on disk."""
        return self.store_root is not None and self.store_error is None

    # --- in memory (CAIRN_SEARCH_LEXICAL_STORE=memory, or the fallback) -----

    async def _load(self) -> dict[str, LexicalIndex]:
        indexes: dict[str, LexicalIndex] = {}
        n = 0
        async with self._engine.connect() as conn:
            for kind in self.kinds:
                index = indexes[kind] = LexicalIndex()
                n += await _fill(conn, kind, index)
        self.counters["documents"] = n
        return indexes

    def _install(self, built: dict[str, LexicalIndex]) -> None:
        self.indexes = built
        self._state = None

    async def _update(self, session: AsyncSession, ids: dict[str, set[int]]) -> None:
        for kind, changed in ids.items():
            index = self.indexes.get(kind)
            if index is None:
                continue
            found = await repo.lexical_rows(session, kind, sorted(changed))
            await asyncio.to_thread(_write, index, changed - {sid for sid, _ in found}, found)

    # --- the node's index on disk -------------------------------------------

    async def _open(self) -> None:
        if time.monotonic() - self._fell_back_at >= DISK_RETRY_S:
            self._retry_disk()
        if self.shared:
            try:
                await self._open_shared()
                return
            except StoreError as exc:
                self._fall_back(exc)
        await super().build()

    def _retry_disk(self) -> None:
        """After a fallback, search the node's folder again from the next
        build on: what failed (a full disk, a generation swept mid-reload)
        may have passed."""
        if self.store_root is not None and self.store_error is not None:
            log.info("%s: trying the node's index again (%s)", self.name, self.store_error)
            self.store_error = None

    async def _open_shared(self) -> None:
        """Take up the node's index, waiting while another process builds
        it; build it when there is none to take up."""
        store = await self._store()
        waited = False
        while not await self._adopt():
            if await self._take_build_lock(0.0):
                try:
                    if not await self._adopt():  # published just before
                        await self._build_shared()
                finally:
                    store.build_lock.release()
                return
            if not waited:
                log.info("%s: another process is building the node's index; waiting", self.name)
                waited = True
            await asyncio.sleep(BUILD_POLL_S)

    async def build(self) -> None:
        """(Re)build the index from Postgres and make it the one searched:
        on disk, a new generation published for the whole node (also after
        a fallback to memory: a rebuild tries the folder again)."""
        self._retry_disk()
        if self.shared:
            try:
                store = await self._store()
                await self._take_build_lock(None)
                try:
                    await self._build_shared()
                finally:
                    store.build_lock.release()
                return
            except StoreError as exc:
                self._fall_back(exc)
        await super().build()

    async def _take_build_lock(self, wait_s: float | None) -> bool:
        """The node's build lock, waiting up to ``wait_s`` (None: as long as
        another process builds)."""
        assert self.store is not None
        return await _take(self.store.build_lock, "build lock", wait_s, BUILD_POLL_S, BUILD_POLL_S)

    async def _store(self) -> NodeStore:
        """The node's folder of this database, made once: the first build
        and a background open may ask together (the app's start and a first
        rebuild), and two stores would mean two writer locks, one taken and
        the other checked ('state.json is written under the writer lock')."""
        async with self._store_made:
            if self.store is None:
                assert self.store_root is not None
                async with self._sessions() as session:
                    identity = await repo.database_identity(session)
                store = NodeStore(self.store_root, store_key(identity), self.kinds)
                # Folders of databases (or formats) nobody has followed for a day.
                await _disk(store.sweep_keys)
                self.store = store
            return self.store

    async def _adopt(self) -> bool:
        """Take up the node's index if it is current enough to follow (the
        change log still holds every change it may lack); whether it was."""
        store = await self._store()
        state = await _disk(store.read)
        if state is None or time.time() - state.read_at > 0.9 * repo.CHANGES_KEPT_S:
            return False
        async with self._sessions() as session:
            if state.xmin > await repo.snapshot_xmin(session):
                # Transaction ids from the future: a restored database.
                return False
        try:
            indexes = await _disk(store.open, state.generation)
        except StoreError:
            # Swept by a newer build meanwhile: build (or adopt) again.
            return False
        async with self._lock:
            self.indexes, self._state = indexes, state
            self._read_at = time.monotonic() - max(0.0, time.time() - state.read_at)
            self.ready = True
        self.counters["adopted"] += 1
        self.counters["documents"] = sum(len(i) for i in indexes.values())
        log.info(
            "%s: took up the node's index %s (%d documents)",
            self.name,
            state.generation,
            self.counters["documents"],
        )
        return True

    async def _build_shared(self) -> None:
        t0 = time.perf_counter()
        store = await self._store()
        async with self._sessions() as session:
            xmin = await repo.snapshot_xmin(session)
        generation = await _disk(store.begin)
        try:
            indexes = await _disk(store.open, generation.name, True, BUILD_HEAP)
            n = 0
            async with self._engine.connect() as conn:
                for kind, index in indexes.items():
                    n += await _fill(conn, kind, index)
            for index in indexes.values():
                await _disk(index.close_writer)
            await asyncio.to_thread(release_freed_memory)
            # Publish: catch up with what changed during the scan, under the lock.
            if not await self._acquire(PUBLISH_WAIT_S):
                raise StoreError(f"writer lock held for over {PUBLISH_WAIT_S:.0f}s")
            try:
                previous = await _disk(store.read, True)
                base = StoreState(
                    generation=generation.name,
                    version=previous.version if previous is not None else 0,
                    xmin=xmin,
                )
                async with self._sessions() as session:
                    state, _ = await self._catch_up(session, base, indexes)
            finally:
                self._release()
            await _disk(store.sweep, generation.name)
        finally:
            generation.release()
        async with self._lock:
            self.indexes, self._state = indexes, state
            self._read_at = time.monotonic()
            self.ready = True
        self.counters["documents"] = n
        self.counters["build_s"] = round(time.perf_counter() - t0, 3)
        self.counters["rebuilds"] += 1
        log.info(
            "%s: built the node's index %s in %.1fs",
            self.name,
            generation.name,
            self.counters["build_s"],
        )

    async def _apply(self) -> int:
        if not self.shared:
            return await super()._apply()
        try:
            return await self._apply_shared()
        except StoreError as exc:
            self._fall_back(exc)
            self.start()  # the index in memory, built in the background
            return 0

    async def _apply_shared(self) -> int:
        self.counters["reads"] += 1
        state = await self._follow()
        if state is None:
            # The folder was emptied under this process: build again.
            self.ready = False
            self.start()
            return 0
        applied = 0
        async with self._sessions() as session:
            changes = await repo.changes_since(session, state.xmin)
            fresh = any(c[0] not in state.applied for c in changes)
            if fresh or time.time() - state.read_at > KEEP_FRESH_S:
                # Changes nobody has applied: apply them, unless another
                # process is at it (then wait for it, and apply what it left).
                # A state not written for a while: record this read, if the
                # lock is free.
                if await self._acquire(self.lock_wait_s if fresh else 0.0):
                    try:
                        state = await self._follow(fresh=True)
                        if state is not None:
                            state, applied = await self._catch_up(session, state, self.indexes)
                    finally:
                        self._release()
                elif fresh:
                    self.counters["lock_timeouts"] += 1
                    log.warning(
                        "%s: the node's writer lock was held for over %.1fs; "
                        "searching the index as it is",
                        self.name,
                        self.lock_wait_s,
                    )
            if time.monotonic() - self._pruned_at > PRUNE_EVERY_S:
                await repo.prune_changes(session)
                await session.commit()
                self._pruned_at = time.monotonic()
        self._read_at = time.monotonic()
        self.counters["changes"] += applied
        return applied

    async def _follow(self, fresh: bool = False) -> StoreState | None:
        """The node's state now, this process's readers moved up to it
        (another generation opened, or the current one reloaded); ``fresh``:
        the state file re-read whatever its stat says (under the lock)."""
        assert self.store is not None
        for _ in range(3):
            state = self.store.read(fresh)  # a stat; parsed only when it changed
            if state is None:
                return None
            held = self._state
            if held is not None and held.generation == state.generation:
                if held.commits != state.commits:
                    try:
                        await _disk(_reload, list(self.indexes.values()))
                    except StoreError:
                        continue  # replaced and swept while reloading: read the state again
                    self.counters["reloads"] += 1
                self._state = state
                return state
            try:
                self.indexes = await _disk(self.store.open, state.generation)
            except StoreError:
                continue  # replaced and swept meanwhile: read the state again
            self.counters["reloads"] += 1
            self._state = state
            return state
        raise StoreError("the node's index kept changing while it was opened")

    async def _catch_up(
        self, session: AsyncSession, base: StoreState, indexes: dict[str, LexicalIndex]
    ) -> tuple[StoreState, int]:
        """Apply to ``indexes`` (of ``base``'s generation) the changes logged
        since ``base`` and publish the new state (under the writer lock); the
        state and the number of changes applied."""
        assert self.store is not None
        read_at = time.time()
        xmin = await repo.snapshot_xmin(session)
        changes = await repo.changes_since(session, base.xmin)
        ids: dict[str, set[int]] = {}
        fresh = 0
        for change_id, kind, sid in changes:
            if change_id not in base.applied:
                ids.setdefault(kind, set()).add(sid)
                fresh += 1
        for kind, changed in ids.items():
            index = indexes.get(kind)
            if index is None:
                continue
            found = await repo.lexical_rows(session, kind, sorted(changed))
            await _disk(_write, index, changed - {sid for sid, _ in found}, found)
        state = StoreState(
            generation=base.generation,
            version=base.version + 1,
            xmin=xmin,
            applied=frozenset(c[0] for c in changes),
            read_at=read_at,
            commits=base.commits + (1 if ids else 0),
        )
        await _disk(self.store.write, state)
        if ids:
            self.counters["writes"] += 1
        self._state = state if indexes is self.indexes else self._state
        return state, fresh

    async def _acquire(self, wait_s: float) -> bool:
        """Take the node's writer lock, waiting up to ``wait_s``."""
        assert self.store is not None
        return await _take(self.store.writer_lock, "writer lock", wait_s, 0.002, 0.05)

    def _release(self) -> None:
        if self.store is not None:
            self.store.writer_lock.release()

    def _fall_back(self, exc: Exception) -> None:
        """The folder failed: this process keeps its own index in memory
        from now on (the caller builds it; Postgres full text meanwhile).
        The writer lock is left to whoever holds it (their ``finally``
        releases it): releasing it here let another coroutine of this
        process, mid-publish, write the state without it."""
        self.store_error = f"{type(exc).__name__}: {exc}"[:300]
        self._fell_back_at = time.monotonic()
        self.counters["fallbacks"] += 1
        self.ready = False
        self._state = None
        log.error(
            "%s: the node's index failed (%s); this process falls back to its own in memory",
            self.name,
            self.store_error,
        )

    # --- search -----------------------------------------------------------

    async def search(
        self, kinds: Sequence[str], query: str, k: int, fresh: bool = False
    ) -> Hits | None:
        """Per kind, the ``k`` best (search_id, BM25 score); None while the
        indexes are not built (or the change log cannot be read). ``fresh``:
        read the change log first, whatever the refresh period, so every write
        committed before this call is in the ranking."""
        if not self.ready:
            self.start()
            return None
        try:
            await self.refresh(force=fresh)
        except Exception as exc:
            log.warning("lexical index: change log unreadable (%s)", type(exc).__name__)
            return None
        indexes = self.indexes
        return {
            kind: LexicalHits(indexes[kind].search(query, k), indexes[kind].scale(query))
            for kind in kinds
            if kind in indexes
        }

    def stats(self) -> dict[str, Any]:
        state = self._state
        store: dict[str, Any] = {"kind": "disk" if self.shared else "memory"}
        if self.store_root is not None:
            store["folder"] = str(self.store.dir) if self.store is not None else None
            store["error"] = self.store_error
        if self.shared and state is not None:
            store.update(
                generation=state.generation,
                version=state.version,
                state_age_s=round(max(0.0, time.time() - state.read_at), 3),
            )
        return {
            **self.follow_stats(),
            "store": store,
            "indexes": {k: len(v) for k, v in self.indexes.items()},
        }

    async def close(self) -> None:
        await super().close()
        self._release()


async def _take(lock: FileLock, what: str, wait_s: float | None, pause: float, most: float) -> bool:
    """Take a node lock without blocking the event loop: try, then sleep
    ``pause`` (doubling up to ``most``) until ``wait_s`` has passed (None:
    for as long as it takes); False when it has."""
    deadline = None if wait_s is None else time.monotonic() + wait_s
    while True:
        try:
            if lock.acquire():
                return True
        except OSError as exc:
            raise StoreError(f"{what}: {exc}") from exc
        if deadline is not None and time.monotonic() >= deadline:
            return False
        await asyncio.sleep(pause)
        pause = min(pause * 2, most)


async def _fill(conn: Any, kind: str, index: LexicalIndex) -> int:
    """Add every findable row of ``kind`` to ``index`` and commit; how many."""
    n = 0
    async for part in repo.scan_lexical(conn, kind):
        # Tokenizing is CPU work: off the event loop.
        n += await _disk(index.add, _docs(part))
    await _disk(index.commit)
    return n


def _write(index: LexicalIndex, removed: set[int], found: list[repo.LexicalRow]) -> None:
    """Remove and (re)add documents and commit: with the index's writer if it
    has one (in memory), else with one opened for this update (on disk)."""
    opened = not index.writable
    if opened:
        index.open_writer()
    try:
        index.remove(removed)
        index.add(_docs(found))
        index.commit()
    finally:
        if opened:
            index.close_writer()


def _reload(indexes: list[LexicalIndex]) -> None:
    for index in indexes:
        index.reload()


async def _disk(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread; what fails there is the folder's failure."""
    try:
        return await asyncio.to_thread(fn, *args)
    except Exception as exc:
        raise StoreError(f"{type(exc).__name__}: {exc}") from exc


def _docs(rows: list[repo.LexicalRow]) -> list[tuple[int, dict[str, str | None]]]:
    return [(sid, dict(zip(FIELDS, fields, strict=True))) for sid, fields in rows]
