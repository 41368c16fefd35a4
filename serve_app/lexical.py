"""The lexical (BM25) side of search as the routes see it: ``LexicalSearch``.

Each Api process holds its own ``embeddings.lexical.LexicalIndex`` per kind,
so full-text search, and the fallback when the Embedder or the VectorIndex
cannot answer, need nothing but this process and Postgres
(docs/decisions.md, "Lexical ranking and fusion (issue 23)").

- **Build**: at start, in the background, from every row that may be found
  (``storage.repositories.search.scan_lexical``). Until it is done ``search``
  answers None and the routes use Postgres full text, as before.
- **Follow**: the triggers log every change of a searchable row in
  ``search_changes`` with its transaction id (migration 0015). A search
  (with ``refresh_s`` > 0: one finding the index older than that) first reads
  the changes of the transactions its last read had not seen finish, re-reads
  those rows and updates the index. One that has not read the log for
  nearly as long as the log keeps changes (an hour) rebuilds instead.

Hits are re-read from Postgres by the search service before they are shown,
so a row hidden a moment ago never appears even before the index catches up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.lexical import FIELDS, LexicalIndex
from storage.repositories import search as repo

log = logging.getLogger("cairn.search")


@dataclass(frozen=True)
class LexicalHits:
    """One kind's BM25 hits (search_id, score) best first, and the query's
    scale (``LexicalIndex.scale``) that the fusion divides them by."""

    hits: list[tuple[int, float]]
    scale: float | None = None


Hits = dict[str, LexicalHits]
PRUNE_EVERY_S = 300.0


class LexicalSearch:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine,
        kinds: Sequence[str] = ("pattern", "agent", "question"),
        refresh_s: float = 1.0,
    ) -> None:
        self._sessions = sessions
        self._engine = engine
        self.kinds = tuple(kinds)
        self.refresh_s = refresh_s
        self.indexes: dict[str, LexicalIndex] = {}
        self.ready = False
        self._xmin: int | None = None
        self._applied: set[int] = set()
        self._read_at = 0.0
        self._read_began = 0.0  # when the last read of the change log began
        self._pruned_at = 0.0
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.counters = {"build_s": 0.0, "documents": 0, "changes": 0, "rebuilds": 0, "reads": 0}

    # --- build ------------------------------------------------------------

    def start(self) -> None:
        """Build the indexes in the background (once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._build_logged())

    async def _build_logged(self) -> None:
        try:
            await self.build()
        except Exception:
            log.exception("lexical index: build failed; full text uses Postgres until a retry")
            self._task = None

    async def build(self) -> None:
        """(Re)build every kind's index from Postgres and swap them in."""
        t0 = time.perf_counter()
        async with self._sessions() as session:
            xmin = await repo.snapshot_xmin(session)
        indexes: dict[str, LexicalIndex] = {}
        n = 0
        async with self._engine.connect() as conn:
            for kind in self.kinds:
                index = indexes[kind] = LexicalIndex()
                async for part in repo.scan_lexical(conn, kind):
                    # Tokenizing is CPU work: off the event loop.
                    n += await asyncio.to_thread(index.add, _docs(part))
                await asyncio.to_thread(index.commit)
        async with self._lock:
            self.indexes, self._xmin, self._applied = indexes, xmin, set()
            self._read_at = time.monotonic()
            self.ready = True
        self.counters["build_s"] = round(time.perf_counter() - t0, 3)
        self.counters["documents"] = n
        self.counters["rebuilds"] += 1
        log.info("lexical index built in %.1fs: %d documents", self.counters["build_s"], n)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    # --- follow -----------------------------------------------------------

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
                self.ready, self._task = False, None
                self.start()
                return 0
            return await self._apply()

    async def _apply(self) -> int:
        assert self._xmin is not None
        self.counters["reads"] += 1
        async with self._sessions() as session:
            xmin = await repo.snapshot_xmin(session)
            changes = await repo.changes_since(session, self._xmin)
            fresh = [c for c in changes if c[0] not in self._applied]
            ids: dict[str, set[int]] = {}
            for _, kind, sid in fresh:
                if kind in self.indexes:
                    ids.setdefault(kind, set()).add(sid)
            rows = {
                kind: await repo.lexical_rows(session, kind, sorted(s)) for kind, s in ids.items()
            }
            if time.monotonic() - self._pruned_at > PRUNE_EVERY_S:
                await repo.prune_changes(session)
                await session.commit()
                self._pruned_at = time.monotonic()
        for kind, found in rows.items():
            index = self.indexes[kind]
            shown = {sid for sid, _ in found}
            index.remove(ids[kind] - shown)
            await asyncio.to_thread(index.add, _docs(found))
            await asyncio.to_thread(index.commit)
        self._xmin, self._applied = xmin, {c[0] for c in changes}
        self._read_at = time.monotonic()
        self.counters["changes"] += len(fresh)
        return len(fresh)

    # --- search -----------------------------------------------------------

    async def search(self, kinds: Sequence[str], query: str, k: int) -> Hits | None:
        """Per kind, the ``k`` best (search_id, BM25 score); None while the
        indexes are not built (or the change log cannot be read)."""
        if not self.ready:
            self.start()
            return None
        try:
            await self.refresh()
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
        return {
            "ready": self.ready,
            "indexes": {k: len(v) for k, v in self.indexes.items()},
            "counters": dict(self.counters),
        }


def _docs(rows: list[repo.LexicalRow]) -> list[tuple[int, dict[str, str | None]]]:
    return [(sid, dict(zip(FIELDS, fields, strict=True))) for sid, fields in rows]
