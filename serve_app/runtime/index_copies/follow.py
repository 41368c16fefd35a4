"""An index held in this process and kept in step with Postgres through the
change log (``search_changes``): the base of the Api processes' BM25 index
(``serve_app/runtime/index_copies/lexical.py``) and their copy of the vector index
(``serve_app/runtime/index_copies/vectors.py``).

- **Build**: in the background, from a scan of Postgres. The oldest
  transaction still running is noted first: every change of an older one is
  in the scan.
- **Follow**: a change is logged with its transaction id, by the triggers
  (row changes) or by the search worker (vector changes), in the writing
  transaction. ``refresh`` reads the changes of the transactions its last
  read had not seen finish, and the subclass re-reads those rows and updates
  its index. Applying a change twice does no harm (the row is re-read as it
  is now), so a rebuild that swaps in while changes keep arriving simply
  reads again from its own start.
- A follower that has not read the log for nearly as long as the log keeps
  changes (an hour) rebuilds instead; until it is built again ``ready`` is
  false and the routes use what they used before it was built.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.repositories import search as repo

log = logging.getLogger("cairn.search")

PRUNE_EVERY_S = 300.0


class Follower(ABC):
    """``name`` for the log; ``vectors``: which changes this index follows."""

    name = "index"
    vectors = False
    RETRY_S = 5.0

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine,
        refresh_s: float = 1.0,
    ) -> None:
        self._sessions = sessions
        self._engine = engine
        self.refresh_s = refresh_s
        self.ready = False
        self._xmin: int | None = None
        self._applied: set[int] = set()
        self._read_at = 0.0
        self._read_began = 0.0  # when the last read of the change log began
        self._pruned_at = 0.0
        self._failed_at = -float("inf")
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.counters: dict[str, float] = {
            "build_s": 0.0,
            "changes": 0,
            "rebuilds": 0,
            "failed_builds": 0,
            "reads": 0,
        }
        # The type of the last failed build's error (the text goes to the log).
        self.last_error: str | None = None

    # --- what a subclass supplies ------------------------------------------

    @abstractmethod
    async def _load(self) -> Any:
        """A new index (of whatever shape) scanned from Postgres."""

    @abstractmethod
    def _install(self, built: Any) -> None:
        """Make ``built`` the live index (under the follower's lock)."""

    @abstractmethod
    async def _update(self, session: AsyncSession, ids: dict[str, set[int]]) -> None:
        """Re-read these rows (search ids by kind) and update the live index."""

    async def _outdated(self, session: AsyncSession) -> bool:
        """Whether the live index must be rebuilt (read with each refresh)."""
        return False

    async def _open(self) -> None:
        """Make the index ready when it is not (at start, and when it has
        not read the log for too long): by default a ``build``; a subclass
        may take up an index built elsewhere instead."""
        await self.build()

    # --- build --------------------------------------------------------------

    def start(self) -> None:
        """Build the index in the background (once at a time; after a failed
        build, not again for ``RETRY_S``)."""
        if self._task is None and time.monotonic() - self._failed_at >= self.RETRY_S:
            self._task = asyncio.get_running_loop().create_task(self._build_logged())

    async def _build_logged(self) -> None:
        try:
            await self._open()
        except Exception as exc:
            self._failed_at = time.monotonic()
            self.counters["failed_builds"] += 1
            self.last_error = type(exc).__name__
            log.exception("%s: build failed; retried in %.0fs", self.name, self.RETRY_S)
        finally:
            self._task = None

    async def build(self) -> None:
        """(Re)build the index from Postgres and swap it in."""
        t0 = time.perf_counter()
        async with self._sessions() as session:
            xmin = await repo.snapshot_xmin(session)
        built = await self._load()
        async with self._lock:
            self._install(built)
            self._xmin, self._applied = xmin, set()
            self._read_at = time.monotonic()
            self.ready = True
        self.counters["build_s"] = round(time.perf_counter() - t0, 3)
        self.counters["rebuilds"] += 1
        log.info("%s built in %.1fs", self.name, self.counters["build_s"])

    async def close(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --- follow -------------------------------------------------------------

    async def refresh(self, force: bool = False) -> int:
        """Apply the changes logged since the last read; the number applied.
        Without ``force``, only when the last read is older than ``refresh_s``
        and no other search is reading already; with ``refresh_s`` 0, always,
        unless a read that began after this call finishes first: a search
        sees every write committed before it began."""
        if not self.ready:
            return 0
        if (
            not force
            and self.refresh_s > 0
            and (time.monotonic() - self._read_at < self.refresh_s or self._lock.locked())
        ):
            # Stale by less than refresh_s, or being refreshed: use it as it is.
            return 0
        asked = time.monotonic()
        async with self._lock:
            if self._read_began >= asked:
                # A read that began after this call has finished while it
                # waited: it saw every write committed before the call.
                # Concurrent searches share one read instead of queueing one
                # each.
                return 0
            self._read_began = time.monotonic()
            if time.monotonic() - self._read_at > 0.9 * repo.CHANGES_KEPT_S:
                # Changes are pruned an hour after their transaction began:
                # some this index has not read may be gone.
                self.ready = False
                self.start()
                return 0
            return await self._apply()

    async def _apply(self) -> int:
        assert self._xmin is not None
        self.counters["reads"] += 1
        async with self._sessions() as session:
            xmin = await repo.snapshot_xmin(session)
            changes = await repo.changes_since(session, self._xmin, vectors=self.vectors)
            fresh = [c for c in changes if c[0] not in self._applied]
            ids: dict[str, set[int]] = {}
            for _, kind, sid in fresh:
                ids.setdefault(kind, set()).add(sid)
            if ids:
                await self._update(session, ids)
            if await self._outdated(session) and self._task is None:
                # Rebuilt in the background; this index answers meanwhile.
                self.start()
            if time.monotonic() - self._pruned_at > PRUNE_EVERY_S:
                await repo.prune_changes(session)
                await session.commit()
                self._pruned_at = time.monotonic()
        self._xmin, self._applied = xmin, {c[0] for c in changes}
        self._read_at = time.monotonic()
        self.counters["changes"] += len(fresh)
        return len(fresh)

    def lag_s(self) -> float:
        """Seconds since this copy last read the change log (-1 while it is
        not built): it is at most that far behind what Postgres logged."""
        if not self.ready:
            return -1.0
        return time.monotonic() - self._read_at

    def follow_stats(self) -> dict[str, Any]:
        return {"ready": self.ready, "counters": dict(self.counters), "last_error": self.last_error}
