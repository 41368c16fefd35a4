"""The Indexer: the FAISS indexes of every searchable kind, kept in step with
Postgres, and the worker that embeds what changed.

- **Start**: the active model is read (the configured one on a new
  database); each kind's index is built from the vectors stored under that
  model (no re-embedding); rows whose vector is missing or was made from other
  text are queued.
- **Work**: the triggers of migration 0008 queue a ``search_jobs`` row, in the
  writing transaction, for every change that can alter a row's text or its
  visibility, and NOTIFY ``cairn_search``. The worker takes jobs in batches
  (``FOR UPDATE SKIP LOCKED``), embeds only texts whose hash has no vector
  under the model yet, stores the vectors and deletes the jobs in one
  transaction, then updates the indexes. A crash before the commit leaves
  the jobs queued; after it, the vectors are stored, so nothing is lost and
  nothing is embedded twice.
- **Search**: the query is embedded with the active model and looked up.
- **Copies**: in the transaction that stores the vectors, the worker logs
  the index entries it changes (``search_changes``, migration 0016); the Api
  processes' copies of the indexes (``serve_app/runtime/index_copies/vectors.py``) follow that log.
- **Swap**: ``activate(model)`` builds new indexes from the vectors stored
  under ``model`` (the re-embedding job wrote them) and replaces the live ones
  in one step; searches keep using the old ones until then.

A plain class: tests drive it in process; ``embeddings.deployments`` runs
it inside the VectorIndex deployment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.config import IndexerConfig
from embeddings.encoder import from_bytes, to_bytes
from embeddings.faiss_index import FaissIndex
from embeddings.memory import release_freed_memory
from storage.db import libpq_url
from storage.repositories import search as repo
from telemetry import metrics

log = logging.getLogger("cairn.search")

# (texts, model) -> (len(texts), dim) normalised float32 vectors
EmbedFn = Callable[[list[str], str], Awaitable[np.ndarray]]
# (query, model) -> (dim,) vector
QueryFn = Callable[[str, str], Awaitable[np.ndarray]]
# How one index is searched for one query vector (the VectorIndex batches them).
IndexSearchFn = Callable[[FaissIndex, np.ndarray, int], Awaitable[list[tuple[int, float]]]]

CHANNEL = "cairn_search"


async def load_indexes(
    engine: AsyncEngine, config: IndexerConfig, model: str, dim: int | None
) -> dict[str, FaissIndex]:
    """Each kind's FAISS index from the vectors stored under ``model`` (the
    VectorIndex's, and the Api replicas' copies). With ``dim`` None, each
    kind's is read from its stored vectors, and a kind with none gets no
    index (a copy makes it with the kind's first vectors)."""
    indexes = {}
    async with engine.connect() as conn:
        for kind in config.kinds:
            # Each part becomes an array at once: a million vectors held as
            # Python bytes until the end cost 1.5 GB of small heap blocks
            # that glibc keeps after they are freed (an Api replica stayed
            # 2.5 GB after building its copy at a million patterns).
            ids: list[np.ndarray] = []
            parts: list[np.ndarray] = []
            kind_dim = dim
            async for part in repo.scan_vectors(conn, kind, model):
                if not part:
                    continue
                if kind_dim is None:
                    kind_dim = len(part[0][1]) // 4
                ids.append(np.fromiter((r[0] for r in part), dtype=np.int64, count=len(part)))
                vectors = from_bytes([r[1] for r in part], kind_dim)
                if vectors.shape[1] != kind_dim:
                    raise RuntimeError(f"stored {kind} vectors are not {kind_dim}-d for {model!r}")
                parts.append(vectors)
            if kind_dim is None:
                continue
            all_ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
            data = np.concatenate(parts) if parts else np.zeros((0, kind_dim), dtype=np.float32)
            del ids, parts
            indexes[kind] = await asyncio.to_thread(
                FaissIndex.build, kind_dim, all_ids, data, config.index
            )
            del all_ids, data
    await asyncio.to_thread(release_freed_memory)
    return indexes


async def reread_rows(
    session: AsyncSession,
    indexes: dict[str, FaissIndex],
    config: IndexerConfig,
    model: str,
    changed: dict[str, set[int]],
) -> None:
    """Put ``indexes`` right for the rows ``changed`` (search ids per kind), as
    they are now: a row that may be found, with a vector under ``model``,
    is (re)placed; any other leaves. A kind without an index gets one with its
    first vectors. (The Api replicas' copies follow the change log with it;
    ``Indexer.activate`` catches up what changed while it built.)"""
    for kind, ids in changed.items():
        if kind not in config.kinds:
            continue
        found = await repo.vector_rows(session, kind, sorted(ids), model)
        index = indexes.get(kind)
        if index is None:
            if not found:
                continue
            index = indexes[kind] = FaissIndex(len(found[0][1]) // 4, config.index)
        index.remove(sorted(ids - {sid for sid, _ in found}))
        index.add([sid for sid, _ in found], from_bytes([v for _, v in found], index.dim))


class NotReady(RuntimeError):
    """The indexes are not loaded yet (or the model cannot be reached)."""


class Indexer:
    def __init__(
        self,
        config: IndexerConfig,
        embed: EmbedFn,
        sessions: async_sessionmaker[AsyncSession],
        engine: AsyncEngine,
        embed_query: QueryFn | None = None,
        search_index: IndexSearchFn | None = None,
    ) -> None:
        self.config = config
        self._embed = embed
        self._embed_query = embed_query
        self._search_index = search_index
        self._sessions = sessions
        self._engine = engine
        self.model: str | None = None
        # Models this index has reported searching with (their gauge series).
        self._models_reported: set[str] = set()
        self.dim: int | None = None
        self.indexes: dict[str, FaissIndex] = {}
        self.ready = False
        self._start_lock = asyncio.Lock()
        self._drain_lock = asyncio.Lock()
        self._wakeup = asyncio.Event()
        self.started = time.time()
        self.counters = {
            "jobs": 0,
            "embedded": 0,
            "reused": 0,
            "removed": 0,
            "batches": 0,
            "errors": 0,
            "load_s": 0.0,
        }
        # When the worker last failed, and whether its latest round did: the
        # exception text goes to the log only (it can carry SQL or paths),
        # never into /api/health.
        self.last_error_at: float | None = None
        self.failing = False

    # --- start ------------------------------------------------------------

    async def start(self) -> None:
        """Load the indexes and queue stale rows (once; later calls return)."""
        async with self._start_lock:
            if self.ready:
                return
            t0 = time.perf_counter()
            async with self._sessions() as session:
                model = await repo.ensure_active_model(session, self.config.model)
                await session.commit()
            if model != self.config.model:
                log.warning(
                    "search uses model %r (the database's active model), not the configured "
                    "%r; `cairn reembed --model %s` switches it",
                    model,
                    self.config.model,
                    self.config.model,
                )
            indexes = await self._load(model)
            async with self._sessions() as session:
                queued = 0
                for kind in self.config.kinds:
                    queued += await repo.enqueue_stale(session, kind, model)
                await session.commit()
            self.model, self.indexes, self.ready = model, indexes, True
            self.counters["load_s"] = round(time.perf_counter() - t0, 3)
            log.info(
                "search indexes loaded in %.1fs (%s); %d rows queued for embedding",
                self.counters["load_s"],
                ", ".join(f"{k}: {len(v)} {v.kind}" for k, v in indexes.items()),
                queued,
            )
            if queued:
                self.wake()

    async def _dim(self, model: str) -> int:
        vector = await self._embed(["dimension probe"], model)
        return int(vector.shape[1])

    async def _load(self, model: str) -> dict[str, FaissIndex]:
        """Indexes of every kind from the vectors stored under ``model``."""
        dim = await self._dim(model)
        indexes = await load_indexes(self._engine, self.config, model, dim)
        self.dim = dim
        return indexes

    async def activate(self, model: str) -> dict[str, int]:
        """Build indexes from ``model``'s stored vectors, then make it the live model.

        The build takes minutes at scale, and the worker goes on meanwhile
        (against the old model's indexes). So, under the drain lock before
        the swap, every row whose change the build may not have seen (logged
        in ``search_changes`` by a transaction not finished when the build
        began) is read again and put right in the new indexes: a row hidden
        or deleted meanwhile leaves them, one shown or re-embedded enters."""
        async with self._sessions() as session:
            since = await repo.snapshot_xmin(session)
        indexes = await self._load(model)
        async with self._drain_lock:
            async with self._sessions() as session:
                changed: dict[str, set[int]] = {}
                for vectors in (False, True):
                    for _, kind, sid in await repo.changes_since(session, since, vectors=vectors):
                        changed.setdefault(kind, set()).add(sid)
                await reread_rows(session, indexes, self.config, model, changed)
                await repo.set_active_model(session, model)
                queued = sum([await repo.enqueue_stale(session, k, model) for k in indexes])
                await session.commit()
            self.model, self.indexes, self.ready = model, indexes, True
        log.info("search switched to model %r; %d rows queued", model, queued)
        self.wake()
        return {kind: len(index) for kind, index in indexes.items()}

    # --- the worker -------------------------------------------------------

    def wake(self) -> None:
        self._wakeup.set()

    async def drain(self) -> int:
        """Work off every queued job; the number of jobs done."""
        await self.start()
        done = 0
        async with self._drain_lock:
            while True:
                n = await self._batch()
                done += n
                if n == 0:
                    return done

    async def _batch(self) -> int:
        model = self.model
        assert model is not None
        async with self._sessions() as session:
            jobs = await repo.claim_jobs(session, self.config.batch_size)
            if not jobs:
                return 0
            changes: list[tuple[str, list[int], np.ndarray, list[int]]] = []
            for kind in sorted({j.kind for j in jobs}):
                of_kind = [j for j in jobs if j.kind == kind]
                change = await self._refresh(session, kind, of_kind, model)
                # The Api processes' copies of the index follow this log.
                await repo.log_vector_changes(session, kind, change[1] + change[3])
                changes.append(change)
            await repo.delete_jobs(session, [j.id for j in jobs])
            await session.commit()
        # Committed: the indexes follow. (Were this process to die here, the
        # next start rebuilds them from what was just stored.)
        for kind, upsert_ids, vectors, remove_ids in changes:
            index = self.indexes.get(kind)
            if index is None:
                continue
            index.remove(remove_ids)
            index.add(upsert_ids, vectors)
            self.counters["removed"] += len(remove_ids)
        self.counters["jobs"] += len(jobs)
        self.counters["batches"] += 1
        return len(jobs)

    async def _refresh(
        self, session: AsyncSession, kind: str, jobs: Sequence[repo.Job], model: str
    ) -> tuple[str, list[int], np.ndarray, list[int]]:
        """Store vectors for this kind's changed rows; what the index must
        then add (ids, vectors) and remove (ids)."""
        found = {
            i.item_id: i for i in await repo.items(session, kind, [j.item_id for j in jobs], model)
        }
        gone = sorted({j.item_id for j in jobs if j.item_id not in found}, key=str)
        await repo.forget(session, kind, gone)
        remove = sorted({j.search_id for j in jobs if j.item_id not in found})
        remove += [i.search_id for i in found.values() if not i.visible]
        shown = [i for i in found.values() if i.visible]
        # Embed each distinct new text once; reuse what is stored.
        todo = sorted({i.text_hash: i.text for i in shown if not i.current}.items())
        fresh: dict[bytes, np.ndarray] = {}
        if todo:
            vectors = await asyncio.wait_for(
                self._embed([t for _, t in todo], model), self.config.embed_timeout_s
            )
            fresh = {h: v for (h, _), v in zip(todo, vectors, strict=True)}
            await repo.store_embeddings(
                session,
                kind,
                model,
                [
                    (i.item_id, i.text_hash, to_bytes(fresh[i.text_hash]))
                    for i in shown
                    if not i.current
                ],
            )
            self.counters["embedded"] += len(todo)
        self.counters["reused"] += sum(1 for i in shown if i.current)
        ids = [i.search_id for i in shown]
        rows = [
            fresh[i.text_hash] if not i.current else from_bytes([i.stored_vector or b""])[0]
            for i in shown
        ]
        dim = self.dim or (rows[0].shape[0] if rows else 0)
        matrix = np.vstack(rows) if rows else np.zeros((0, dim), dtype=np.float32)
        return kind, ids, matrix, remove

    async def drain_safely(self) -> None:
        try:
            await self.drain()
        except Exception:
            self._failed()
            log.exception("search worker failed; the jobs stay queued")
        else:
            self.failing = False

    def _failed(self) -> None:
        self.counters["errors"] += 1
        self.last_error_at = time.time()
        self.failing = True

    async def run(self) -> None:
        """Forever: start, drain, then wait for a NOTIFY or ``poll_s``. Jobs
        that fail stay queued and are retried at the next round."""
        listener = asyncio.get_running_loop().create_task(self._listen())
        try:
            backoff = 1.0
            while True:
                self._wakeup.clear()
                try:
                    await self.start()
                    await self.drain()
                    backoff = 1.0
                    self.failing = False
                except Exception as exc:
                    self._failed()
                    log.warning(
                        "search worker: %s: %s (retrying in %.0fs)",
                        type(exc).__name__,
                        exc,
                        backoff,
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 60.0)
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self.config.poll_s)
        finally:
            listener.cancel()

    async def _listen(self) -> None:
        """Wake the worker on the triggers' NOTIFY (the poll covers lost ones)."""
        import psycopg

        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    libpq_url(self.config.database_url), autocommit=True
                )
                async with conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    async for _ in conn.notifies():
                        self.wake()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("search worker: LISTEN failed (%s); polling only for 10s", exc)
                await asyncio.sleep(10.0)

    # --- search -----------------------------------------------------------

    async def search(
        self, kinds: Sequence[str], query: str, k: int
    ) -> dict[str, list[tuple[int, float]]]:
        """The ``k`` nearest rows of each kind to the query, best first."""
        if not self.ready or self.model is None:
            raise NotReady("the search indexes are still loading")
        model, indexes = self.model, self.indexes
        if self._embed_query is not None:
            pending = self._embed_query(query, model)
        else:
            pending = self._first(self._embed([query], model))
        t0 = time.perf_counter()
        vector = await asyncio.wait_for(pending, self.config.query_timeout_s)
        t1 = time.perf_counter()
        metrics.SEARCH_STAGE_SECONDS.labels("query_embedding").observe(t1 - t0)
        if self._search_index is not None:
            search = self._search_index
            found = {
                kind: await search(indexes[kind], vector, k) for kind in kinds if kind in indexes
            }
        else:
            found = {kind: indexes[kind].search(vector, k) for kind in kinds if kind in indexes}
        metrics.SEARCH_STAGE_SECONDS.labels("vector_search").observe(time.perf_counter() - t1)
        return found

    @staticmethod
    async def _first(vectors: Awaitable[np.ndarray]) -> np.ndarray:
        return (await vectors)[0]

    async def record_metrics(self) -> None:
        """Set the index's gauges (telemetry/metrics.py): vectors by kind, how
        far it is behind Postgres (queued rows, the oldest one's age), and the
        model it searches with."""
        async with self._sessions() as session:
            rows, age_s = await repo.queue_lag(session)
        metrics.INDEX_LAG_ROWS.set(rows)
        metrics.INDEX_LAG_SECONDS.set(age_s)
        for kind, index in list(self.indexes.items()):
            metrics.INDEX_VECTORS.labels(kind).set(len(index))
        model = self.model
        if model is not None:
            # One series at 1, the model searched with now; those of earlier
            # models (a rollback's, a tuned version's) go to 0.
            for earlier in self._models_reported - {model}:
                metrics.SEARCH_MODEL.labels(earlier).set(0)
            metrics.SEARCH_MODEL.labels(model).set(1)
            self._models_reported.add(model)

    async def stats(self) -> dict[str, Any]:
        async with self._sessions() as session:
            pending = await repo.pending_jobs(session)
        return {
            "ready": self.ready,
            "model": self.model,
            "dim": self.dim,
            "pending_jobs": pending,
            "indexes": {
                k: {"size": len(v), "kind": v.kind, "memory_bytes": v.memory_bytes()}
                for k, v in self.indexes.items()
            },
            "counters": dict(self.counters),
            "state": "failing" if self.failing else "ok",
            "last_error_at": self.last_error_at,
            "started": self.started,
        }
