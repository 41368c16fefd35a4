"""The lexical (BM25) side of search as the routes see it: ``LexicalSearch``.

Each Api process holds its own ``embeddings.lexical.LexicalIndex`` per kind,
so full-text search, and the fallback when the Embedder or the VectorIndex
cannot answer, need nothing but this process and Postgres
(docs/decisions/search.md, "Lexical ranking and fusion (issue 23)").

- **Build**: at start, in the background, from every row that may be found
  (``storage.repositories.search.scan_lexical``). Until it is done ``search``
  answers None and the routes use Postgres full text, as before.
- **Follow** (``serve_app.runtime.index_copies.follow.Follower``): the triggers log every change
  of a searchable row in ``search_changes`` with its transaction id
  (migration 0015). A search (with ``refresh_s`` > 0: one finding the index
  older than that) first reads the changes of the transactions its last read
  had not seen finish, re-reads those rows and updates the index. One that
  has not read the log for nearly as long as the log keeps changes (an hour)
  rebuilds instead.

Hits are re-read from Postgres by the search service before they are shown,
so a row hidden a moment ago never appears even before the index catches up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.lexical import FIELDS, LexicalIndex
from serve_app.runtime.index_copies.follow import Follower
from storage.repositories import search as repo

log = logging.getLogger("cairn.search")


@dataclass(frozen=True)
class LexicalHits:
    """One kind's BM25 hits (search_id, score) best first, and the query's
    scale (``LexicalIndex.scale``) that the fusion divides them by."""

    hits: list[tuple[int, float]]
    scale: float | None = None


Hits = dict[str, LexicalHits]


class LexicalSearch(Follower):
    name = "lexical index"

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine,
        kinds: Sequence[str] = ("pattern", "agent", "question"),
        refresh_s: float = 1.0,
    ) -> None:
        super().__init__(sessions, engine, refresh_s)
        self.kinds = tuple(kinds)
        self.indexes: dict[str, LexicalIndex] = {}
        self.counters["documents"] = 0

    async def _load(self) -> dict[str, LexicalIndex]:
        indexes: dict[str, LexicalIndex] = {}
        n = 0
        async with self._engine.connect() as conn:
            for kind in self.kinds:
                index = indexes[kind] = LexicalIndex()
                async for part in repo.scan_lexical(conn, kind):
                    # Tokenizing is CPU work: off the event loop.
                    n += await asyncio.to_thread(index.add, _docs(part))
                await asyncio.to_thread(index.commit)
        self.counters["documents"] = n
        return indexes

    def _install(self, built: dict[str, LexicalIndex]) -> None:
        self.indexes = built

    async def _update(self, session: AsyncSession, ids: dict[str, set[int]]) -> None:
        for kind, changed in ids.items():
            index = self.indexes.get(kind)
            if index is None:
                continue
            found = await repo.lexical_rows(session, kind, sorted(changed))
            index.remove(changed - {sid for sid, _ in found})
            await asyncio.to_thread(index.add, _docs(found))
            await asyncio.to_thread(index.commit)

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
        return {**self.follow_stats(), "indexes": {k: len(v) for k, v in self.indexes.items()}}


def _docs(rows: list[repo.LexicalRow]) -> list[tuple[int, dict[str, str | None]]]:
    return [(sid, dict(zip(FIELDS, fields, strict=True))) for sid, fields in rows]
