"""FaissIndex: one FAISS index with stable int64 ids, exact while small and
approximate beyond a size.

- Up to ``flat_max`` vectors: ``IndexIDMap2(IndexFlatIP)``, exact inner
  product (cosine: the vectors are normalised).
- Beyond it: ``IndexIVFScalarQuantizer`` (IVF, 8-bit scalar quantiser,
  inner product), ``nlist`` ≈ 4·√n lists, ``nprobe`` lists searched. It can
  remove ids (HNSW cannot), and stores 1 byte per dimension instead of 4.
  Recall against the exact index is measured in docs/benchmarks.md.

``add`` replaces vectors whose ids are present (upsert). Not thread-safe:
the owner calls it from one thread (the VectorIndex's event loop).
"""

from __future__ import annotations

import math
from typing import Any

import faiss
import numpy as np

from embeddings.config import IndexConfig

FLAT = "flat"
IVF = "ivf-sq8"


def _ids(ids: np.ndarray | list[int]) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(ids, dtype=np.int64))


def _vectors(vectors: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(vectors, dtype=np.float32)


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
        """An index over these vectors, flat or IVF by their number."""
        index = cls(dim, config)
        if len(ids) > index.config.flat_max:
            index._to_ivf(_ids(ids), _vectors(vectors))
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
        if self.kind == FLAT and len(self) > self.config.flat_max:
            all_ids, all_vectors = self._flat_contents()
            self._to_ivf(all_ids, all_vectors)

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
        # 1 byte per dimension + int64 id per entry, plus the centroids.
        ivf = faiss.extract_index_ivf(self._index)
        return n * (self.dim + 8) + int(ivf.nlist) * self.dim * 4

    def _flat_contents(self) -> tuple[np.ndarray, np.ndarray]:
        ids = faiss.vector_to_array(self._index.id_map).astype(np.int64)
        vectors = self._index.index.reconstruct_n(0, len(ids))
        return ids, vectors

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
