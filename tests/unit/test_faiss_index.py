"""FaissIndex against real FAISS: upsert, removal, ordering, the flat → IVF
switch, ``build``'s choice of kind, IVF recall and the memory formula."""

from __future__ import annotations

import numpy as np
import pytest

from embeddings.config import IndexConfig
from embeddings.faiss_index import FLAT, IVF, FaissIndex, nlist_for

DIM = 32


def unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def random_vectors(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    return unit(np.random.default_rng(seed).standard_normal((n, dim)))


def clustered(
    n: int, clusters: int, seed: int = 0, dim: int = DIM, spread: float = 0.35
) -> np.ndarray:
    """Normalised points around ``clusters`` random centres (text embeddings cluster so)."""
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((clusters, dim)))
    which = rng.integers(0, clusters, n)
    noise = rng.standard_normal((n, dim)) * spread / np.sqrt(dim)
    return unit(centres[which] + noise)


def exact_top(data: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    scores = queries @ data.T
    return np.argsort(-scores, axis=1)[:, :k]


def test_search_orders_by_inner_product_with_exact_scores() -> None:
    data = random_vectors(50)
    index = FaissIndex.build(DIM, np.arange(100, 150), data)
    query = data[7]
    hits = index.search(query, 5)
    expected = np.argsort(-(data @ query))[:5]
    assert [i for i, _ in hits] == [100 + int(j) for j in expected]
    assert hits[0] == (107, pytest.approx(1.0, abs=1e-5))
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    for (i, s), j in zip(hits, expected, strict=True):
        assert s == pytest.approx(float(data[j] @ query), abs=1e-5)
        assert i == 100 + int(j)


def test_search_edge_cases() -> None:
    index = FaissIndex(DIM)
    assert index.search(random_vectors(1)[0], 5) == []
    index.add([1, 2], random_vectors(2))
    assert index.search(random_vectors(1)[0], 0) == []
    assert len(index.search(random_vectors(1)[0], 10)) == 2  # k capped at the size
    index.add([], np.zeros((0, DIM), dtype=np.float32))
    assert index.remove([]) == 0 and len(index) == 2


def test_add_replaces_the_vector_of_a_present_id() -> None:
    a, b, c = random_vectors(3, seed=1)
    index = FaissIndex(DIM)
    index.add([1, 2], np.stack([a, b]))
    index.add([1], c[None, :])  # upsert: id 1 now holds c
    assert len(index) == 2
    assert index.search(c, 1)[0] == (1, pytest.approx(1.0, abs=1e-5))
    best = dict(index.search(a, 2))
    assert best[1] == pytest.approx(float(a @ c), abs=1e-5)  # a is gone
    # Replacing several at once, one of them new.
    index.add([2, 3], np.stack([a, b]))
    assert len(index) == 3
    assert index.search(a, 1)[0][0] == 2 and index.search(b, 1)[0][0] == 3


def test_remove_drops_ids_and_ignores_unknown_ones() -> None:
    data = random_vectors(10)
    index = FaissIndex.build(DIM, np.arange(10), data)
    assert index.remove([3, 4, 999]) == 2
    assert len(index) == 8
    found = {i for i, _ in index.search(data[3], 10)}
    assert found == set(range(10)) - {3, 4}
    assert index.remove([3]) == 0
    # Ids stay stable after removal (the flat storage compacts underneath).
    assert index.search(data[9], 1)[0] == (9, pytest.approx(1.0, abs=1e-5))


def test_build_picks_the_kind_by_size() -> None:
    config = IndexConfig(flat_max=200, nprobe=8)
    small = FaissIndex.build(DIM, np.arange(200), random_vectors(200), config)
    assert small.kind == FLAT and len(small) == 200
    large = FaissIndex.build(DIM, np.arange(2000), clustered(2000, 20), config)
    assert large.kind == IVF and len(large) == 2000
    empty = FaissIndex.build(DIM, np.zeros(0, dtype=np.int64), np.zeros((0, DIM)), config)
    assert empty.kind == FLAT and len(empty) == 0


def test_growing_past_flat_max_switches_to_ivf_and_keeps_ids() -> None:
    config = IndexConfig(flat_max=1000, nprobe=16)
    data = clustered(1500, 15, seed=2)
    ids = np.arange(1500, dtype=np.int64) * 7 + 5  # sparse, not positions
    index = FaissIndex(DIM, config)
    index.add(ids[:1000], data[:1000])
    index.remove(ids[:10])  # a hole before the switch
    assert index.kind == FLAT and len(index) == 990
    index.add(ids[1000:1200], data[1000:1200])
    assert index.kind == IVF and len(index) == 1190
    # Every stored vector finds itself (an exact duplicate) as the best hit.
    for j in [10, 11, 500, 999, 1000, 1100, 1199]:
        top_id, score = index.search(data[j], 1)[0]
        assert top_id == ids[j]
        assert score == pytest.approx(1.0, abs=0.02)  # SQ8 codes are approximate
    assert all(i != ids[3] for i, _ in index.search(data[3], 20))
    # Upsert and removal keep working on the IVF index.
    index.add(ids[1200:], data[1200:])
    index.add(ids[[20]], data[[1300]])  # id 20 moves onto vector 1300's spot
    assert len(index) == 1490
    assert {i for i, _ in index.search(data[1300], 2)} == {ids[20], ids[1300]}
    assert index.remove(ids[[1300, 1301]]) == 2 and len(index) == 1488
    assert index.search(data[1301], 1)[0][0] != ids[1301]


def test_ivf_recall_at_10_on_clustered_data_at_the_default_nprobe() -> None:
    n, k = 20_000, 10
    data = clustered(n, 200, seed=3)
    config = IndexConfig(flat_max=1000)  # the default nprobe
    index = FaissIndex.build(DIM, np.arange(n), data, config)
    assert index.kind == IVF
    # Queries near stored points, as a query lands near the texts it is about.
    rng = np.random.default_rng(4)
    near = data[rng.integers(0, n, 200)]
    queries = unit(near + 0.1 * rng.standard_normal(near.shape) / np.sqrt(DIM))
    truth = exact_top(data, queries, k)
    hits = 0
    for q, expected in zip(queries, truth, strict=True):
        hits += len({i for i, _ in index.search(q, k)} & set(expected.tolist()))
    recall = hits / (len(queries) * k)
    assert recall >= 0.9, recall


def test_memory_bytes_follows_the_formula_of_each_kind() -> None:
    flat = FaissIndex.build(DIM, np.arange(500), random_vectors(500))
    assert flat.memory_bytes() == 500 * (4 * DIM + 24)
    config = IndexConfig(flat_max=100)
    ivf = FaissIndex.build(DIM, np.arange(4000), clustered(4000, 30), config)
    nlist = nlist_for(4000)
    assert ivf.memory_bytes() == 4000 * (DIM + 8) + nlist * DIM * 4
    # Quantised to a byte a dimension: about a quarter of the flat cost per vector.
    assert ivf.memory_bytes() / 4000 < 0.5 * (4 * DIM + 24)


def test_nlist_is_about_four_root_n_with_enough_training_points() -> None:
    assert nlist_for(1) == 1
    assert nlist_for(1000) == 1000 // 39
    assert nlist_for(1_000_000) == 4000
    for n in (100, 10_000, 250_000):
        assert n // nlist_for(n) >= 39
