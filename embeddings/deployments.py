"""The search deployments: Embedder (the model, batched, CPU or GPU replicas,
autoscaled) and VectorIndex (the FAISS indexes and the embedding worker).

Bound in ``serve_app.launch.deployments``, each with a config object built from the
deploying process's settings; configs/serve.yaml sets their replicas,
autoscaling bounds and ``ray_actor_options`` (``num_gpus: 1`` for GPU
replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
from ray import serve

from embeddings.autoscaling import QUEUED
from embeddings.coalesce import Coalescer
from embeddings.config import TUNED_PREFIX, EmbedderConfig, IndexerConfig
from embeddings.encoder import Encoder, ray_device
from embeddings.querycache import QueryVectors
from replicas.loopback import bind_replica_grpc_to_node
from telemetry import metrics

log = logging.getLogger("cairn.search")

# Queries waiting together are encoded as one batch of at most this many
# (``embeddings.coalesce``; the config's ``max_batch_size`` replaces it).
MAX_BATCH_SIZE = 64
# embed_many calls of at least this many texts are bulk: on the CPU they get
# the replica's bulk threads; smaller ones, and queries, one thread.
BULK_MIN = 16
# How often the VectorIndex sets its gauges (vectors, lag).
METRICS_EVERY_S = 5.0


def bulk_threads(configured: int) -> int:
    """Torch threads of a CPU replica's bulk calls: ``configured``, or with 0
    every core this process may run on."""
    import os

    return configured or max(1, len(os.sched_getaffinity(0)))


@serve.deployment(name="Embedder", max_ongoing_requests=256)
class Embedder:
    """The model (ONNX Runtime on the CPU, PyTorch on a GPU) behind three
    calls: ``embed_queries`` (queries, each from the replica's cache of recent
    queries or encoded with the queries waiting with it,
    ``embeddings.coalesce``), ``embed`` (one query, the same way) and
    ``embed_many`` (a list, the worker's batches).

    On the CPU, queries run on one thread: it is the fastest for a few
    short texts and leaves the other cores to the API and Postgres under load.
    Bulk calls use ``bulk_threads`` (docs/benchmarks.md, "Embedder
    throughput")."""

    def __init__(self, config: EmbedderConfig) -> None:
        bind_replica_grpc_to_node()
        self._device = ray_device(config.device)
        self._bulk = bulk_threads(config.threads)
        self._config = config
        self._encoders: dict[str, Encoder] = {}
        self._default = config.model
        self._encoder(self._default)
        # Queries that wait while a batch encodes go together in the next,
        # one batch at a time: nothing waits on purpose.
        self._batches: dict[str, Coalescer[str, np.ndarray]] = {}
        # Recent queries, shared by every caller of this replica (the Api
        # replicas ask here directly): a query asked again is not encoded again.
        self._queries = QueryVectors(self._encode_query, where="embedder")
        # Calls waiting or encoding here (the autoscaler's signal, docs/operations.md).
        self._queued = 0
        metrics.EMBEDDER_REPLICAS.set(1)
        metrics.EMBEDDER_QUEUE.set(0)
        log.info("Embedder ready: %s", self.describe())

    def record_autoscaling_stats(self) -> dict[str, float]:
        """What the Embedder's autoscaling policy counts (``embeddings.autoscaling``):
        the queries and bulk calls waiting or encoding here. Serve asks each
        replica for it every few seconds."""
        return {QUEUED: float(self._queued)}

    def _queue_moved(self, by: int) -> None:
        self._queued += by
        metrics.EMBEDDER_QUEUE.set(self._queued)

    def _encoded(self, call: str, n: int, t0: float) -> None:
        metrics.EMBEDDER_BATCH.labels(call).observe(n)
        metrics.EMBEDDER_ENCODE_SECONDS.labels(call).observe(time.perf_counter() - t0)

    def _encoder(self, model: str) -> Encoder:
        encoder = self._encoders.get(model)
        if encoder is None:
            # During a switch of models both are held; older ones are dropped.
            if len(self._encoders) >= 2:
                self._encoders.pop(next(m for m in self._encoders if m != self._default))
            folder = model
            if model.startswith(TUNED_PREFIX):
                # A tuned version: its copy in this node's model cache, read
                # from the database on first use (imported only then: the
                # replica stays without SQLAlchemy otherwise).
                from embeddings.modelstore import folder_for
                from embeddings.onnx_model import default_cache

                cache = Path(self._config.cache_dir) if self._config.cache_dir else default_cache()
                folder = folder_for(model, self._config.database_url, cache)
            encoder = self._encoders[model] = Encoder(
                folder,
                self._device,
                backend=self._config.backend,
                cache_dir=self._config.cache_dir or None,
                precision=self._config.precision,
            )
        return encoder

    def _batch(self, model: str) -> Coalescer[str, np.ndarray]:
        batch = self._batches.get(model)
        if batch is None:

            async def encode(texts: list[str]) -> list[np.ndarray]:
                t0 = time.perf_counter()
                vectors = await asyncio.to_thread(self._encoder(model).encode, texts, threads=1)
                self._encoded("query", len(texts), t0)
                return list(vectors)

            batch = self._batches[model] = Coalescer(
                encode, max_batch=self._config.max_batch_size or MAX_BATCH_SIZE
            )
        return batch

    def threads_for(self, n: int) -> int | None:
        """Torch threads of a call encoding ``n`` texts (None off the CPU)."""
        if self._device != "cpu":
            return None
        return self._bulk if n >= BULK_MIN else 1

    def describe(self) -> dict[str, Any]:
        """The replica's model, device, backend and threads per kind of call."""
        threads = {"query": self.threads_for(1), "bulk": self.threads_for(BULK_MIN)}
        backend = self._encoders[self._default].backend
        return {
            "model": self._default,
            "device": self._device,
            "backend": backend,
            "threads": threads,
        }

    async def embed(self, text: str, model: str | None = None) -> np.ndarray:
        """One query's vector: from this replica's cache of recent queries,
        else encoded with the queries waiting with it."""
        return await self._queries.get(text, model or self._default)

    async def embed_queries(self, texts: list[str], model: str | None = None) -> np.ndarray:
        """``embed`` for several queries in one call (an Api replica's queries
        that waited together, ``EmbedderQueries``): their vectors, one row each."""
        model = model or self._default
        vectors = await asyncio.gather(*(self._queries.get(text, model) for text in texts))
        if not vectors:
            return np.zeros((0, self._encoder(model).dim), dtype=np.float32)
        return np.stack(vectors)

    async def _encode_query(self, text: str, model: str) -> np.ndarray:
        self._queue_moved(1)
        try:
            return await self._batch(model)(text)
        finally:
            self._queue_moved(-1)

    async def embed_many(self, texts: list[str], model: str | None = None) -> np.ndarray:
        encoder = self._encoder(model or self._default)
        self._queue_moved(1)
        t0 = time.perf_counter()
        try:
            return await asyncio.to_thread(
                encoder.encode, texts, threads=self.threads_for(len(texts))
            )
        finally:
            self._queue_moved(-1)
            self._encoded("bulk", len(texts), t0)

    async def info(self) -> dict[str, Any]:
        backends = {m: e.backend for m, e in self._encoders.items()}
        return {
            "models": list(self._encoders),
            "device": self._device,
            "backends": backends,
            "query_cache": self._queries.stats(),
            # Encode calls of waiting queries and the queries they carried.
            "query_batches": {m: b.stats() for m, b in self._batches.items()},
        }


class EmbedderQueries:
    """Query vectors from the Embedder deployment through its handle (its
    cache of recent queries, else encoded with the queries waiting there):
    what the VectorIndex and the Api replicas' copies of the index ask when a
    query is not in their own cache. The queries of one process that wait
    while its call is out go together in its next call
    (``embeddings.coalesce``): one handle call for all of them, which gives
    up after ``timeout_s`` (so a call that hangs holds none of the later
    queries longer than that). The Embedder therefore has few calls out at a
    time, whatever the load: it autoscales on the queries it holds
    (``record_autoscaling_stats``, ``embeddings.autoscaling``), not on calls."""

    def __init__(self, embedder: Any, timeout_s: float = 2.0) -> None:
        self._embedder = embedder
        self._timeout_s = timeout_s
        self._batches: dict[str, Coalescer[str, np.ndarray]] = {}

    async def embed_query(self, text: str, model: str) -> np.ndarray:
        batch = self._batches.get(model)
        if batch is None:

            async def ask(texts: list[str]) -> list[np.ndarray]:
                call = self._embedder.embed_queries.remote(texts, model)
                rows = await asyncio.wait_for(call, self._timeout_s)
                return list(np.asarray(rows, dtype=np.float32))

            batch = self._batches[model] = Coalescer(ask, max_batch=MAX_BATCH_SIZE)
        return await batch(text)


# How long the VectorIndex's stats wait for the Embedder to answer.
EMBEDDER_PROBE_S = 1.0


@serve.deployment(name="VectorIndex", num_replicas=1, max_ongoing_requests=512)
class VectorIndex:
    """The FAISS indexes and the worker (``embeddings.indexer.Indexer``).

    One replica: it is the single writer of its indexes, rebuilt from
    Postgres whenever Serve (re)starts it."""

    def __init__(self, config: IndexerConfig, embedder: Any) -> None:
        # Imported here, not with the module: the Embedder's replicas import
        # this module too, and FAISS, SQLAlchemy and psycopg would add about
        # 47 MiB to each (docs/benchmarks.md, "The Embedder replica's memory
        # under Serve").
        from embeddings.indexer import Indexer
        from embeddings.searchbatch import SearchBatcher
        from storage.db import make_engine, make_sessionmaker

        bind_replica_grpc_to_node()
        self._embedder = embedder
        # Its own searches (while the Api replicas' copies are not ready, or
        # without them): a repeated query skips the Embedder hop.
        queries = EmbedderQueries(embedder, timeout_s=config.query_timeout_s + 1.0)
        self._queries = QueryVectors(queries.embed_query, where="vector_index")
        engine = make_engine(config.database_url, pool_size=3, max_overflow=2)
        # Concurrent searches of an index share one FAISS scan.
        self._batcher = SearchBatcher()
        self.indexer = Indexer(
            config,
            self._embed,
            make_sessionmaker(engine),
            engine,
            embed_query=self._queries.get,
            search_index=self._batcher.search,
        )
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self.indexer.run())
        self._metrics = loop.create_task(self._record_metrics()) if metrics.enabled() else None

    async def _record_metrics(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.indexer.record_metrics()
            await asyncio.sleep(METRICS_EVERY_S)

    async def _embed(self, texts: list[str], model: str) -> np.ndarray:
        result: np.ndarray = await self._embedder.embed_many.remote(texts, model)
        return result

    async def search(self, kinds: list[str], query: str, k: int) -> dict[str, list[Any]]:
        return await self.indexer.search(kinds, query, k)

    async def activate(self, model: str) -> dict[str, int]:
        return await self.indexer.activate(model)

    async def drain(self) -> int:
        return await self.indexer.drain()

    async def stats(self) -> dict[str, Any]:
        # Whether the Embedder answers: with no replica (none could be
        # placed, its node is gone) the index is ready but no query can be
        # embedded, and /api/health must say so. Asked alongside the indexer.
        probe, stats = await asyncio.gather(
            asyncio.wait_for(self._embedder.info.remote(), EMBEDDER_PROBE_S),
            self.indexer.stats(),
            return_exceptions=True,
        )
        if isinstance(stats, BaseException):
            raise stats
        up = not isinstance(probe, BaseException)
        return {
            **stats,
            "running": not self._task.done(),
            "embedder": "ok" if up else "unavailable",
            # The answering Embedder replica's cache of recent queries.
            "embedder_query_cache": probe.get("query_cache") if up else None,
            "query_cache": self._queries.stats(),
            "search_batches": self._batcher.stats(),
        }

    def check_health(self) -> None:
        if self._task.done():
            raise RuntimeError("the search worker stopped")
