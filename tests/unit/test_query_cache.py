"""QueryVectors: the bounded LRU of query vectors in front of the Embedder."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from embeddings.querycache import QueryVectors


class Embedder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.gate: asyncio.Event | None = None
        self.fail = False

    async def embed(self, text: str, model: str) -> np.ndarray:
        self.calls.append((model, text))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise ConnectionError("embedder down")
        return np.full(4, float(len(text)), dtype=np.float32)


async def test_a_repeated_query_is_embedded_once() -> None:
    embedder = Embedder()
    cache = QueryVectors(embedder.embed, size=8)
    first = await cache.get("retry backoff", "m")
    again = await cache.get("retry backoff", "m")
    assert again is first and embedder.calls == [("m", "retry backoff")]
    assert cache.stats() == {"size": 1, "hits": 1, "misses": 1}


async def test_the_model_is_part_of_the_key() -> None:
    embedder = Embedder()
    cache = QueryVectors(embedder.embed, size=8)
    await cache.get("q", "old")
    await cache.get("q", "new")
    assert embedder.calls == [("old", "q"), ("new", "q")]


async def test_bounded_least_recently_used_goes_first() -> None:
    embedder = Embedder()
    cache = QueryVectors(embedder.embed, size=2)
    await cache.get("a", "m")
    await cache.get("b", "m")
    await cache.get("a", "m")  # a is now the most recent
    await cache.get("c", "m")  # evicts b
    assert len(cache) == 2
    await cache.get("a", "m")
    await cache.get("b", "m")
    assert [t for _, t in embedder.calls] == ["a", "b", "c", "b"]


async def test_size_zero_caches_nothing() -> None:
    embedder = Embedder()
    cache = QueryVectors(embedder.embed, size=0)
    await cache.get("a", "m")
    await cache.get("a", "m")
    assert len(embedder.calls) == 2 and len(cache) == 0


async def test_concurrent_misses_share_one_embedding() -> None:
    embedder = Embedder()
    embedder.gate = asyncio.Event()
    cache = QueryVectors(embedder.embed, size=8)
    waiting = [asyncio.ensure_future(cache.get("same", "m")) for _ in range(20)]
    for _ in range(5):
        await asyncio.sleep(0)
    embedder.gate.set()
    vectors = await asyncio.gather(*waiting)
    assert len(embedder.calls) == 1 and all(v is vectors[0] for v in vectors)


async def test_a_failure_is_not_kept_and_vectors_are_read_only() -> None:
    embedder = Embedder()
    cache = QueryVectors(embedder.embed, size=8)
    embedder.fail = True
    with pytest.raises(ConnectionError):
        await cache.get("q", "m")
    embedder.fail = False
    vector = await cache.get("q", "m")
    assert len(embedder.calls) == 2
    with pytest.raises(ValueError):
        vector[0] = 1.0
