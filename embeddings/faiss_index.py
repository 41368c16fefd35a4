"""FaissIndex: one FAISS index with stable int64 ids, exact while small and
approximate beyond a size.

- Up to ``flat_max`` vectors: ``IndexIDMap2(IndexFlatIP)``, exact inner
  product (cosine: the vectors are normalised). A search reads every vector:
  about 7 ms per 100,000 on one core, so this is for small indexes.
- Up to ``hnsw_max``: ``IndexHNSWFlat`` (a graph over the float vectors;
  ``IndexHNSWSQ`` over 8-bit codes, a quarter of the memory, where
  ``IndexConfig.hnsw_codes`` is ``sq8``: the Api replicas' copies,
  ``M`` links a node, ``ef_search`` candidates explored a query): well under
  a millisecond a query at 100,000 with the exact top 10 in measured runs
  (docs/benchmarks.md), the scores still exact inner products. FAISS's HNSW
  cannot remove a vector, so ``_Graph`` keeps its own ids: a replaced or
  removed vector's node is marked dead and filtered out of every search,
  and once a fifth of it is dead the graph is rebuilt from the live vectors
  in the background.
- Beyond it: ``IndexIVFScalarQuantizer`` (IVF, 8-bit scalar quantiser,
  inner product), ``nlist`` ≈ 4·√n lists, ``nprobe`` lists searched. It
  stores 1 byte per dimension instead of 4, for indexes too large to hold as
  floats. Recall against the exact index is measured in docs/benchmarks.md.

``add`` replaces vectors whose ids are present (upsert). Not thread-safe:
the owner calls it from one thread (the VectorIndex's event loop).
"""

from __future__ import annotations

import logging
import math
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import faiss
import numpy as np

from embeddings.config import IndexConfig

log = logging.getLogger("cairn.search")

FLAT = "flat"
HNSW = "hnsw"
IVF = "ivf-sq8"
# A graph is rebuilt from its live vectors once this share of its nodes is dead.
DEAD_SHARE = 0.2
# A graph's vectors as 8-bit codes (IndexConfig.hnsw_codes): the Api replicas'
# copies (docs/decisions/search-at-scale.md, "Replica memory at a million patterns").
SQ8 = "sq8"
FLOAT = "float"
# Vectors an 8-bit graph's ranges are trained on at least; with fewer (the
# first adds of an empty graph) every dimension gets [-SQ8_RANGE, SQ8_RANGE]:
# the components of normalised 384-d sentence vectors stay well inside it.
SQ8_TRAIN_MIN = 1000
SQ8_RANGE = 0.5


def _ids(ids: np.ndarray | list[int]) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(ids, dtype=np.int64))


def _vectors(vectors: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vectors, dtype=np.float32)


def ef_for(config: IndexConfig, nodes: int, k: int) -> int:
    """Candidates a graph search explores: the configured breadth, at least
    ``k``, and at least one per ``hnsw_nodes_per_ef`` nodes of the graph."""
    return max(config.hnsw_ef_search, k, -(-nodes // max(1, config.hnsw_nodes_per_ef)))


def nlist_for(n: int) -> int:
    """About 4·√n lists, but at least 39 training vectors per list (FAISS's minimum)."""
    return max(1, min(int(4 * math.sqrt(max(n, 1))), n // 39))


class FaissIndex:
    def __init__(self, dim: int, config: IndexConfig | None = None) -> None:
        self.dim = dim
        self.config = config or IndexConfig()
        self._index: Any = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self.kind = FLAT

    @classmethod
    def build(
        cls, dim: int, ids: np.ndarray, vectors: np.ndarray, config: IndexConfig | None = None
    ) -> FaissIndex:
        """An index over these vectors, flat, HNSW or IVF by their number."""
        index = cls(dim, config)
        if len(ids) > index.config.hnsw_max:
            index._to_ivf(_ids(ids), _vectors(vectors))
        elif len(ids) > index.config.flat_max:
            index._to_hnsw(_ids(ids), _vectors(vectors))
        elif len(ids):
            index._index.add_with_ids(_vectors(vectors), _ids(ids))
        return index

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, ids: np.ndarray | list[int], vectors: np.ndarray) -> None:
        """Insert or replace."""
        if len(ids) == 0:
            return
        ids = _ids(ids)
        self._index.remove_ids(ids)
        self._index.add_with_ids(_vectors(vectors), ids)
        if self.kind != IVF and len(self) > self.config.hnsw_max:
            self._to_ivf(*self._contents())
        elif self.kind == FLAT and len(self) > self.config.flat_max:
            self._to_hnsw(*self._contents())

    def remove(self, ids: np.ndarray | list[int]) -> int:
        if len(ids) == 0:
            return 0
        return int(self._index.remove_ids(_ids(ids)))

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest ids with their inner products, best first."""
        if k <= 0 or len(self) == 0:
            return []
        query = _vectors(vector).reshape(1, self.dim)
        scores, ids = self._index.search(query, min(k, len(self)))
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]

    def search_many(self, vectors: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        """``search`` for each row of ``vectors`` in one FAISS call: an exact
        index is scanned once for all of them (the scan, not the arithmetic,
        is what a flat search costs)."""
        n = len(vectors)
        if k <= 0 or len(self) == 0 or n == 0:
            return [[] for _ in range(n)]
        queries = _vectors(vectors).reshape(n, self.dim)
        scores, ids = self._index.search(queries, min(k, len(self)))
        return [
            [(int(i), float(s)) for i, s in zip(row_ids, row_scores, strict=True) if i >= 0]
            for row_ids, row_scores in zip(ids, scores, strict=True)
        ]

    def memory_bytes(self) -> int:
        """What the index holds in memory, by the formula of its kind."""
        n = len(self)
        if self.kind == FLAT:
            # float32 vectors + the id map (int64 list + hash map entry ≈ 16 B).
            return n * (4 * self.dim + 8 + 16)
        if self.kind == HNSW:
            graph: _Graph = self._index
            return graph.memory_bytes()
        # 1 byte per dimension + int64 id per entry, plus the centroids.
        ivf = faiss.extract_index_ivf(self._index)
        return n * (self.dim + 8) + int(ivf.nlist) * self.dim * 4

    def _contents(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of a flat or graph index."""
        if self.kind == HNSW:
            graph: _Graph = self._index
            return graph.contents()
        ids = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        vectors = self._index.index.reconstruct_n(0, len(ids))
        return ids, vectors

    def _to_hnsw(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self._index = _Graph(self.dim, self.config)
        self._index.add_with_ids(vectors, ids)
        self.kind = HNSW

    def _to_ivf(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        nlist = nlist_for(len(ids))
        quantizer = faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFScalarQuantizer(
            quantizer, self.dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
        sample = min(len(ids), nlist * self.config.train_per_list)
        rng = np.random.default_rng(0)
        chosen = rng.choice(len(ids), size=sample, replace=False) if sample < len(ids) else None
        index.train(vectors if chosen is None else vectors[np.sort(chosen)])
        index.add_with_ids(vectors, ids)
        index.nprobe = self.config.nprobe
        # The quantiser is owned by the Python object; keep it alive with the index.
        self._quantizer = quantizer
        self._index = index
        self.kind = IVF


class _Graph:
    """``IndexHNSWFlat`` under stable int64 ids, with the calls FaissIndex
    makes of an ``IndexIDMap2``: ``ntotal`` (live vectors), ``add_with_ids``,
    ``remove_ids`` and ``search``.

    A node's label is its position in the graph; ``_GraphState`` maps labels
    to ids and ids to their live label. Replacing or removing a vector
    marks its node dead: it stays in the graph (FAISS cannot take it out) but
    a selector of the live labels keeps it out of every result.

    Once dead nodes are ``DEAD_SHARE`` of the graph, a new graph is built
    from the live vectors in a background thread (at 100,000 vectors that
    takes tens of seconds; FAISS releases the GIL), while this one keeps
    answering and every change is also logged. The owner's next call after
    the build swaps the new graph in, replaying the log on it first. Not
    thread-safe otherwise: one owner thread calls it, as FaissIndex's."""

    def __init__(self, dim: int, config: IndexConfig) -> None:
        self.dim = dim
        self.config = config
        self._state = _GraphState.empty(dim, config)
        self._selector: Any = None  # live labels; None: all are
        self._bitmap = np.zeros(0, dtype=np.uint8)
        self._building: Future[_GraphState] | None = None
        self._log: list[tuple[np.ndarray, np.ndarray | None]] = []  # (ids, vectors or None)
        self.rebuilds = 0

    @property
    def ntotal(self) -> int:
        self._swap_if_built()
        return self._state.live

    @property
    def dead(self) -> int:
        self._swap_if_built()
        return self._state.dead

    def add_with_ids(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        self._swap_if_built()
        self._state.add(ids, vectors)
        if self._building is not None:
            self._log.append((ids.copy(), vectors.copy()))
        self._changed()

    def remove_ids(self, ids: np.ndarray) -> int:
        self._swap_if_built()
        removed = self._state.remove(ids)
        if removed and self._building is not None:
            self._log.append((ids.copy(), None))
        if removed:
            self._changed()
        return removed

    def _changed(self) -> None:
        state = self._state
        if self._building is None and state.dead > DEAD_SHARE * state.nodes:
            ids, vectors = state.contents()
            self._building = _builder().submit(_GraphState.of, self.dim, self.config, ids, vectors)
            self._log = []
        self._select()

    def _select(self) -> None:
        self._selector = None
        if self._state.dead:
            # Kept on self: FAISS holds a pointer into this array, not a copy.
            self._bitmap = np.packbits(self._state.alive, bitorder="little")
            self._selector = faiss.IDSelectorBitmap(
                len(self._state.alive), faiss.swig_ptr(self._bitmap)
            )

    def _swap_if_built(self) -> None:
        if self._building is None or not self._building.done():
            return
        building, self._building = self._building, None
        try:
            built = building.result()
        except Exception:
            # This graph stays (its dead nodes still filtered); the next
            # change tries again.
            log.exception("HNSW rebuild failed; the current graph keeps answering")
            self._log = []
            return
        for ids, vectors in self._log:
            if vectors is None:
                built.remove(ids)
            else:
                built.add(ids, vectors)
        self._state, self._log = built, []
        self.rebuilds += 1
        self._changed()

    def wait_for_rebuild(self, timeout: float | None = None) -> None:
        """Block until a rebuild under way is swapped in (tests, benchmarks)."""
        if self._building is not None:
            self._building.result(timeout)
        self._swap_if_built()

    def contents(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of the live nodes."""
        self._swap_if_built()
        return self._state.contents()

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self._swap_if_built()
        params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
        state = self._state
        # At least k candidates, or a deep page would come back short; and a
        # breadth that grows with the graph (IndexConfig.hnsw_nodes_per_ef).
        params.efSearch = ef_for(self.config, state.nodes, k)
        if self._selector is not None:
            params.sel = self._selector
        scores, labels = state.graph.search(queries, k, params=params)
        found = labels >= 0
        ids = np.where(found, state.ids[np.where(found, labels, 0)], -1)
        return scores, ids

    def memory_bytes(self) -> int:
        """The float vectors and level-0 links (2·M int32) of every node
        (live or dead), FAISS's per-node level and offset, and our id
        arrays; the upper levels (1/M of the nodes) are left out. A rebuild
        under way holds a second graph of the live nodes for its duration."""
        links = 2 * self.config.hnsw_m * 4
        code = self.dim if self.config.hnsw_codes == SQ8 else 4 * self.dim
        # FAISS's level (4) and offset (8); ids, sorted ids, their labels, alive.
        return self._state.nodes * (code + links + 4 + 8 + 8 + 8 + 8 + 1)


# Nodes added since the id arrays were made that are looked up in a dict, at
# most (or an eighth of the arrays, if more); beyond, the arrays are made anew.
FOLD_MIN = 4096


class _GraphState:
    """One HNSW graph and its id maps (see ``_Graph``)."""

    def __init__(self, graph: Any, ids: np.ndarray) -> None:
        self.graph = graph
        self.ids = ids
        self.alive = np.ones(len(ids), dtype=bool)
        self.live = len(ids)
        # Id -> live label. Most nodes are found by binary search over their
        # ids, sorted (12 bytes a node; a dict of a million Python ints took
        # 101 MiB a copy); the few added since the arrays were last made, in
        # a dict. An id has at most one live label: ``add`` removes first.
        self._sorted = np.zeros(0, dtype=np.int64)
        self._order = np.zeros(0, dtype=np.int64)
        self._added: dict[int, int] = {}
        self._fold()

    def _fold(self) -> None:
        """Make the sorted arrays of every live node's id anew (the dict empties)."""
        live = np.flatnonzero(self.alive)
        ids = self.ids[live]
        order = np.argsort(ids, kind="stable")
        self._sorted = ids[order]
        self._order = live[order]
        self._added = {}

    @staticmethod
    def new_graph(dim: int, config: IndexConfig) -> Any:
        graph: Any
        if config.hnsw_codes == SQ8:
            graph = faiss.IndexHNSWSQ(
                dim,
                faiss.ScalarQuantizer.QT_8bit,  # type: ignore[arg-type]
                config.hnsw_m,
                faiss.METRIC_INNER_PRODUCT,
            )
        else:
            graph = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = config.hnsw_ef_construction
        return graph

    @staticmethod
    def train(graph: Any, vectors: np.ndarray) -> None:
        """8-bit codes need each dimension's range: from the vectors when
        there are enough of them (a build from Postgres, a rebuild), else
        ``SQ8_RANGE`` around 0 (the first few adds); values outside it are
        clipped."""
        if graph.is_trained:
            return
        if len(vectors) < SQ8_TRAIN_MIN:
            edge = np.full((1, graph.d), SQ8_RANGE, dtype=np.float32)
            vectors = np.vstack([edge, -edge])
        graph.train(vectors)

    @classmethod
    def empty(cls, dim: int, config: IndexConfig) -> _GraphState:
        return cls(cls.new_graph(dim, config), np.zeros(0, dtype=np.int64))

    @classmethod
    def of(cls, dim: int, config: IndexConfig, ids: np.ndarray, vectors: np.ndarray) -> _GraphState:
        graph = cls.new_graph(dim, config)
        cls.train(graph, vectors)
        graph.add(vectors)
        return cls(graph, ids)

    @property
    def nodes(self) -> int:
        return int(self.graph.ntotal)

    @property
    def dead(self) -> int:
        return self.nodes - self.live

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        self.remove(ids)
        start = self.nodes
        self.train(self.graph, vectors)
        self.graph.add(vectors)
        self.ids = np.concatenate([self.ids, ids])
        self.alive = np.concatenate([self.alive, np.ones(len(ids), dtype=bool)])
        self.live += len(ids)
        if len(self._added) + len(ids) > max(FOLD_MIN, len(self._sorted) // 8):
            self._fold()  # a build (one large add) never fills the dict
        else:
            self._added.update(zip(ids.tolist(), range(start, start + len(ids)), strict=True))

    def remove(self, ids: np.ndarray) -> int:
        """Mark the live nodes of these ids dead; how many there were."""
        labels = [label for i in ids.tolist() if (label := self._added.pop(i, None)) is not None]
        if len(self._sorted):
            wanted = np.unique(np.asarray(ids, dtype=np.int64))
            pos = np.minimum(np.searchsorted(self._sorted, wanted), len(self._sorted) - 1)
            built = self._order[pos[self._sorted[pos] == wanted]]
            labels.extend(built[self.alive[built]].tolist())
        if labels:
            self.alive[labels] = False
            self.live -= len(labels)
        return len(labels)

    def contents(self) -> tuple[np.ndarray, np.ndarray]:
        labels = np.flatnonzero(self.alive)
        if not len(labels):
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.graph.d), dtype=np.float32)
        vectors = self.graph.reconstruct_n(0, self.nodes)[labels]
        return self.ids[labels].copy(), np.ascontiguousarray(vectors)


_BUILDER: ThreadPoolExecutor | None = None


def _builder() -> ThreadPoolExecutor:
    """One thread for graph rebuilds (they are rare, and each uses FAISS's own threads)."""
    global _BUILDER
    if _BUILDER is None:
        _BUILDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hnsw-rebuild")
    return _BUILDER
