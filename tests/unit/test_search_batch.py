"""SearchBatcher and FaissIndex.search_many: concurrent searches of one index
answered by one FAISS call, each exactly as a search of its own."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from embeddings.faiss_index import FaissIndex
from embeddings.searchbatch import SearchBatcher


def index_of(n: int = 500, dim: int = 16, seed: int = 1) -> tuple[FaissIndex, np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = FaissIndex(dim)
    index.add(np.arange(1000, 1000 + n), vectors)
    return index, vectors


def test_search_many_equals_one_search_per_row() -> None:
    index, vectors = index_of()
    queries = vectors[:7] + 0.01
    rows = index.search_many(queries, 5)
    assert rows == [index.search(q, 5) for q in queries]
    assert index.search_many(queries[:0], 5) == []
    assert index.search_many(queries[:2], 0) == [[], []]


async def test_concurrent_searches_share_one_call_with_their_own_k() -> None:
    index, vectors = index_of()
    batcher = SearchBatcher()
    ks = [1, 3, 10, 2, 5, 7, 4, 8]
    found = await asyncio.gather(*[batcher.search(index, vectors[i], k) for i, k in enumerate(ks)])
    assert found == [index.search(vectors[i], k) for i, k in enumerate(ks)]
    assert batcher.calls == 1 and batcher.searches == len(ks)
    # A lone search runs on its own, at once.
    assert await batcher.search(index, vectors[9], 3) == index.search(vectors[9], 3)
    assert batcher.calls == 2


async def test_each_index_and_the_batch_bound() -> None:
    first, vectors = index_of(seed=1)
    second, _ = index_of(seed=2)
    batcher = SearchBatcher(max_batch=4)
    asks = [batcher.search(first, vectors[i], 3) for i in range(6)]
    asks += [batcher.search(second, vectors[i], 3) for i in range(2)]
    found = await asyncio.gather(*asks)
    assert found[:6] == [first.search(vectors[i], 3) for i in range(6)]
    assert found[6:] == [second.search(vectors[i], 3) for i in range(2)]
    assert batcher.calls == 3  # 4 + 2 on the first index, 2 on the second


async def test_an_error_reaches_every_caller_of_the_batch() -> None:
    index, vectors = index_of()
    batcher = SearchBatcher()
    wrong = np.zeros(3, dtype=np.float32)  # not the index's dimension
    results = await asyncio.gather(
        batcher.search(index, vectors[0], 3),
        batcher.search(index, wrong, 3),
        return_exceptions=True,
    )
    assert all(isinstance(r, Exception) for r in results)
    assert await batcher.search(index, vectors[0], 3) == index.search(vectors[0], 3)


@pytest.mark.parametrize("n", [0, 1])
async def test_tiny_indexes(n: int) -> None:
    index, vectors = index_of(n=max(n, 1))
    if n == 0:
        index = FaissIndex(16)
    batcher = SearchBatcher()
    found = await asyncio.gather(*[batcher.search(index, vectors[0], 5) for _ in range(3)])
    assert found == [index.search(vectors[0], 5)] * 3
