"""Semantic search from a copy of the vector index held in this Api process:
``ReplicaVectors``, a ``serve_app.runtime.semantic.SemanticSearch``.

A search through the VectorIndex deployment costs a handle call each way
(about 2 ms of CPU here, more than the FAISS search itself; docs/benchmarks.md,
"Where the time goes"). Each Api replica therefore holds its own copy of the
FAISS indexes, as it holds its own BM25 index:

- **Build**: in the background at start, from the vectors stored under the
  active model (``storage.repositories.search.scan_vectors``, as the
  VectorIndex builds its own). Until it is done, searches go to the
  VectorIndex (``RaySearch``), as before.
- **Follow** (``serve_app.runtime.index_copies.follow.Follower``): the VectorIndex's worker logs
  every index entry it adds, replaces or removes in ``search_changes``, in
  the transaction that stores the vectors (migration 0016). A search finding
  the copy's last read older than ``refresh_s`` first reads those changes and
  re-reads the rows' stored vectors, so the copy is at most ``refresh_s``
  behind the VectorIndex. When the active model changes (``cairn reembed``),
  the copy is rebuilt under the new one in the background and the old one
  answers until then.
- **Queries**: the vectors of the last ``query_cache`` queries are kept
  here; a query not among them is asked of the Embedder (``embed_query``:
  in Serve one handle call, ``EmbedderQueries``; the Embedder keeps the recent
  queries of every replica it serves).

Hits are re-read from Postgres by the search service before they are shown,
as with the VectorIndex's hits, so a hidden row never appears.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.config import IndexerConfig
from embeddings.faiss_index import FaissIndex
from embeddings.indexer import QueryFn, load_indexes, reread_rows
from embeddings.querycache import DEFAULT_SIZE, QueryVectors
from serve_app.runtime.index_copies.follow import Follower
from serve_app.runtime.semantic import Hits, SearchFactory, SemanticSearch
from serve_app.settings import Settings
from storage.repositories import search as repo
from telemetry import metrics

log = logging.getLogger("cairn.search")

# (model, indexes by kind)
Built = tuple[str, dict[str, FaissIndex]]


class ReplicaVectors(Follower):
    name = "vector index copy"
    vectors = True

    def __init__(
        self,
        embed_query: QueryFn,
        fallback: SemanticSearch,
        config: IndexerConfig,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine,
        refresh_s: float = 1.0,
        query_cache: int = DEFAULT_SIZE,
    ) -> None:
        """``embed_query``: a query's vector under a model (in Serve, the
        Embedder's, ``EmbedderQueries.embed_query``); ``fallback``: what answers until the
        copy is built and gives the index's state (in Serve, ``RaySearch``)."""
        super().__init__(sessions, engine, refresh_s)
        self.config = config
        self.remote = fallback
        self.queries = QueryVectors(embed_query, size=query_cache, where="replica")
        self.model: str | None = None
        self.indexes: dict[str, FaissIndex] = {}
        self.counters.update({"local": 0, "remote": 0, "failed": 0})

    # --- the follower -------------------------------------------------------

    async def _load(self) -> Built:
        async with self._sessions() as session:
            model = await repo.active_model(session)
        if model is None:
            # The VectorIndex sets it when it first starts.
            raise LookupError("no active search model yet")
        # A kind with nothing stored under the model yet gets its index with
        # the first vectors the worker stores.
        indexes = await load_indexes(self._engine, self.config, model, None)
        log.info(
            "vector index copy of %r: %s",
            model,
            ", ".join(f"{k}: {len(v)} {v.kind}" for k, v in indexes.items()) or "empty",
        )
        return model, indexes

    def _install(self, built: Built) -> None:
        self.model, self.indexes = built

    async def _update(self, session: AsyncSession, ids: dict[str, set[int]]) -> None:
        assert self.model is not None
        await reread_rows(session, self.indexes, self.config, self.model, ids)

    async def _outdated(self, session: AsyncSession) -> bool:
        model = await repo.active_model(session)
        return model is not None and model != self.model

    # --- SemanticSearch -----------------------------------------------------

    async def nearest(self, kinds: list[str], query: str, k: int) -> Hits | None:
        if not self.ready:
            self.start()
            self.counters["remote"] += 1
            return await self.remote.nearest(kinds, query, k)
        try:
            await self.refresh()
        except Exception as exc:
            # Searched as it is: at worst it misses the latest changes.
            log.warning("vector index copy: change log unreadable (%s)", type(exc).__name__)
        model, indexes = self.model, self.indexes
        assert model is not None
        t0 = time.perf_counter()
        try:
            vector = await asyncio.wait_for(
                self.queries.get(query, model), self.config.query_timeout_s + 1.0
            )
        except Exception as exc:
            self.counters["failed"] += 1
            metrics.SEMANTIC_FAILURES.labels("replica", metrics.failure_reason(exc)).inc()
            log.warning("semantic search unavailable: %s", type(exc).__name__)
            return None
        self.counters["local"] += 1
        t1 = time.perf_counter()
        metrics.SEARCH_STAGE_SECONDS.labels("query_embedding").observe(t1 - t0)
        found = {kind: indexes[kind].search(vector, k) if kind in indexes else [] for kind in kinds}
        metrics.SEARCH_STAGE_SECONDS.labels("vector_search").observe(time.perf_counter() - t1)
        return found

    async def stats(self) -> dict[str, Any] | None:
        """The index's state from the fallback (None when it does not
        answer), with this copy's under ``replica``."""
        stats = await self.remote.stats()
        if stats is None:
            return None
        return {**stats, "replica": self.replica_stats()}

    def replica_stats(self) -> dict[str, Any]:
        return {
            **self.follow_stats(),
            "model": self.model,
            "indexes": {k: len(v) for k, v in self.indexes.items()},
            "memory_bytes": sum(v.memory_bytes() for v in self.indexes.values()),
            "query_cache": self.queries.stats(),
        }


def replica_vectors(
    settings: Settings, embed_query: QueryFn, fallback: SemanticSearch
) -> SearchFactory:
    """The app's semantic search as a copy of the index, built with the app's
    sessions and engine (``create_app`` calls it)."""
    config = settings.indexer_config(settings.database_url or "")
    # The copies' graphs hold 8-bit codes: a quarter of the float vectors'
    # memory per replica (docs/decisions/search-at-scale.md, "Replica memory at a
    # million patterns"); the VectorIndex keeps the floats.
    config = replace(config, index=replace(config.index, hnsw_codes=settings.search_replica_codes))
    refresh_s = settings.search_replica_vectors_refresh_s

    def build(sessions: async_sessionmaker[AsyncSession], engine: AsyncEngine) -> ReplicaVectors:
        return ReplicaVectors(embed_query, fallback, config, sessions, engine, refresh_s=refresh_s)

    return build
