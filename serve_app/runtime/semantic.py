"""Semantic search as seen by the routes: ``nearest(kinds, query, k)``.

``LocalSearch`` runs an Indexer in this process over an in-process Encoder
(API tests, a single uvicorn); ``RaySearch`` asks the cluster's VectorIndex
deployment; ``serve_app.runtime.index_copies.vectors.ReplicaVectors`` searches a copy of its
indexes held in this process. Either answers None when it cannot (model or index not ready,
too slow, stopped): the routes then use full-text search alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.config import IndexerConfig
from embeddings.querycache import QueryVectors
from telemetry import metrics

log = logging.getLogger("cairn.search")

Hits = dict[str, list[tuple[int, float]]]


class SemanticSearch(Protocol):
    def start(self) -> None:
        """Begin whatever loads in the background (called at app start)."""
        ...

    async def nearest(self, kinds: list[str], query: str, k: int) -> Hits | None:
        """Per kind, the ``k`` nearest (search_id, cosine) best first; None
        when semantic search cannot answer now."""
        ...

    async def stats(self) -> dict[str, Any] | None: ...

    async def close(self) -> None: ...


# Builds a SemanticSearch from the app's sessions and engine.
SearchFactory = Callable[[async_sessionmaker[AsyncSession], AsyncEngine], SemanticSearch]


class NoSemanticSearch:
    """Semantic search switched off (CAIRN_SEARCH_SEMANTIC=false)."""

    def start(self) -> None:
        return None

    async def nearest(self, kinds: list[str], query: str, k: int) -> Hits | None:
        return None

    async def stats(self) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        return None


class LocalSearch:
    """An Indexer on this event loop, embedding with ``encoder`` in a thread.

    There is no background loop: ``settle()`` works off the queued jobs (the
    tests call it after writes), and the first search loads the indexes."""

    def __init__(
        self,
        config: IndexerConfig,
        encoder: Any,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine,
        query_cache: int = 0,
    ) -> None:
        from embeddings.indexer import Indexer

        self.encoder = encoder
        self.stopped = False
        # ``query_cache`` > 0: as in the VectorIndex deployment, a repeated
        # query is embedded once (benchmarks/uvicorn_app.py); 0 keeps every
        # search on the encoder (the API tests stop it to test the fallback).
        self.queries = QueryVectors(self._embed_query, size=query_cache, where="local")
        self.indexer = Indexer(config, self._embed, sessions, engine, embed_query=self.queries.get)

    async def _embed(self, texts: list[str], model: str) -> np.ndarray:
        if self.stopped:
            raise ConnectionError("the embedder is stopped")
        if model != self.encoder.model:
            raise LookupError(f"this process only holds {self.encoder.model!r}, not {model!r}")
        vectors: np.ndarray = await asyncio.to_thread(self.encoder.encode, texts)
        return vectors

    async def _embed_query(self, text: str, model: str) -> np.ndarray:
        vector: np.ndarray = (await self._embed([text], model))[0]
        return vector

    def start(self) -> None:
        return None

    async def settle(self) -> int:
        return await self.indexer.drain()

    async def nearest(self, kinds: list[str], query: str, k: int) -> Hits | None:
        try:
            await self.indexer.start()
            return await self.indexer.search(kinds, query, k)
        except Exception as exc:
            metrics.SEMANTIC_FAILURES.labels("local", metrics.failure_reason(exc)).inc()
            log.warning("semantic search unavailable: %s", exc)
            return None

    async def stats(self) -> dict[str, Any] | None:
        # The indexes load on first use here: asking for the state is a use.
        await self.indexer.start()
        return {**await self.indexer.stats(), "embedder": "stopped" if self.stopped else "ok"}

    async def close(self) -> None:
        return None


class RaySearch:
    """The VectorIndex deployment, through its handle, with a deadline."""

    def __init__(self, index: Any, timeout_s: float) -> None:
        self._index = index
        self._timeout_s = timeout_s

    def start(self) -> None:
        return None

    async def nearest(self, kinds: list[str], query: str, k: int) -> Hits | None:
        try:
            result: Hits = await asyncio.wait_for(
                self._index.search.remote(kinds, query, k), self._timeout_s
            )
            return result
        except Exception as exc:
            metrics.SEMANTIC_FAILURES.labels("vector_index", metrics.failure_reason(exc)).inc()
            log.warning("semantic search unavailable: %s", type(exc).__name__)
            return None

    async def stats(self) -> dict[str, Any] | None:
        try:
            result: dict[str, Any] = await asyncio.wait_for(
                self._index.stats.remote(), self._timeout_s
            )
            return result
        except Exception:
            return None

    async def close(self) -> None:
        return None
