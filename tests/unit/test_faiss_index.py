"""FaissIndex against real FAISS: upsert, removal, ordering, the flat → HNSW
→ IVF switches, ``build``'s choice of kind, HNSW and IVF recall, the graph's
dead nodes and rebuild, and the memory formulas."""

from __future__ import annotations

import numpy as np
import pytest

from embeddings import faiss_index
from embeddings.config import IndexConfig
from embeddings.faiss_index import DEAD_SHARE, FLAT, HNSW, IVF, FaissIndex, ef_for, nlist_for

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
    config = IndexConfig(flat_max=200, hnsw_max=1000, nprobe=8)
    small = FaissIndex.build(DIM, np.arange(200), random_vectors(200), config)
    assert small.kind == FLAT and len(small) == 200
    middle = FaissIndex.build(DIM, np.arange(1000), clustered(1000, 20), config)
    assert middle.kind == HNSW and len(middle) == 1000
    large = FaissIndex.build(DIM, np.arange(2000), clustered(2000, 20), config)
    assert large.kind == IVF and len(large) == 2000
    empty = FaissIndex.build(DIM, np.zeros(0, dtype=np.int64), np.zeros((0, DIM)), config)
    assert empty.kind == FLAT and len(empty) == 0


def test_growing_past_flat_max_switches_to_ivf_and_keeps_ids() -> None:
    config = IndexConfig(flat_max=1000, hnsw_max=1000, nprobe=16)
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
    config = IndexConfig(flat_max=1000, hnsw_max=1000)  # the default nprobe
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
    config = IndexConfig(flat_max=100, hnsw_max=100)
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


# --- the HNSW graph ------------------------------------------------------------


def recall_at(index: FaissIndex, data: np.ndarray, queries: np.ndarray, k: int) -> float:
    truth = exact_top(data, queries, k)
    hits = 0
    for q, expected in zip(queries, truth, strict=True):
        hits += len({i for i, _ in index.search(q, k)} & set(expected.tolist()))
    return hits / (len(queries) * k)


def near_queries(data: np.ndarray, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    near = data[rng.integers(0, len(data), n)]
    return unit(near + 0.1 * rng.standard_normal(near.shape) / np.sqrt(DIM))


def test_hnsw_recall_at_10_and_exact_scores_at_the_defaults() -> None:
    n = 20_000
    data = clustered(n, 200, seed=5)
    index = FaissIndex.build(DIM, np.arange(n), data, IndexConfig(flat_max=1000))
    assert index.kind == HNSW and len(index) == n
    queries = near_queries(data, 200, seed=6)
    assert recall_at(index, data, queries, 10) >= 0.97
    # The scores are the exact inner products (the graph holds the floats).
    for i, s in index.search(queries[0], 10):
        assert s == pytest.approx(float(data[i] @ queries[0]), abs=1e-5)


def test_growing_flat_to_hnsw_to_ivf_keeps_ids_upserts_and_removals() -> None:
    config = IndexConfig(flat_max=300, hnsw_max=1200, nprobe=16)
    data = clustered(1500, 15, seed=7)
    ids = np.arange(1500, dtype=np.int64) * 3 + 11
    index = FaissIndex(DIM, config)
    index.add(ids[:300], data[:300])
    index.remove(ids[:5])
    assert index.kind == FLAT and len(index) == 295
    index.add(ids[300:600], data[300:600])
    assert index.kind == HNSW and len(index) == 595
    for j in [5, 6, 299, 300, 599]:
        assert index.search(data[j], 1)[0] == (ids[j], pytest.approx(1.0, abs=1e-5))
    assert all(i not in ids[:5] for i, _ in index.search(data[2], 50))
    # Upsert on the graph: id of vector 10 now holds vector 700's values.
    index.add(ids[[10]], data[[700]])
    assert len(index) == 595
    assert index.search(data[700], 1)[0] == (ids[10], pytest.approx(1.0, abs=1e-5))
    assert index.search(data[10], 1)[0][0] != ids[10]  # its old vector is gone
    assert index.remove([ids[10], ids[11], 99_999]) == 2 and len(index) == 593
    index.add(ids[600:1300], data[600:1300])
    assert index.kind == IVF and len(index) == 1293
    top_id, score = index.search(data[1299], 1)[0]
    assert top_id == ids[1299] and score == pytest.approx(1.0, abs=0.02)
    assert all(i not in ids[[10, 11]] for i, _ in index.search(data[700], 20))


def test_hnsw_dead_nodes_never_show_and_a_fifth_dead_rebuilds_the_graph() -> None:
    n = 1000
    data = clustered(n, 10, seed=8)
    config = IndexConfig(flat_max=100)
    index = FaissIndex.build(DIM, np.arange(n), data, config)
    graph = index._index
    gone = set(range(0, 150))  # 15 % dead: below the rebuild share
    index.remove(list(gone))
    assert graph.dead == 150 and len(index) == 850
    for q in near_queries(data, 30, seed=9):
        found = [i for i, _ in index.search(q, 50)]
        assert len(found) == 50 and not gone & set(found)
    # Past the share the graph is rebuilt (in the background, swapped in by
    # a later call): no dead nodes, same ids and answers.
    more = set(range(150, 150 + int(DEAD_SHARE * n)))
    index.remove(list(more))
    graph.wait_for_rebuild(timeout=60)
    assert graph.rebuilds == 1 and graph.dead == 0 and len(index) == n - 150 - len(more)
    keep = np.array(sorted(set(range(n)) - gone - more))
    queries = near_queries(data[keep], 50, seed=10)
    hits = 0
    truth = exact_top(data[keep], queries, 10)
    for q, expected in zip(queries, truth, strict=True):
        hits += len({i for i, _ in index.search(q, 10)} & set(keep[expected].tolist()))
    assert hits / (50 * 10) >= 0.97
    assert index.search(data[keep[0]], 1)[0] == (keep[0], pytest.approx(1.0, abs=1e-5))


def test_hnsw_answers_a_page_deeper_than_its_search_breadth() -> None:
    data = clustered(2000, 10, seed=11)
    config = IndexConfig(flat_max=100, hnsw_ef_search=16)
    index = FaissIndex.build(DIM, np.arange(2000), data, config)
    hits = index.search(data[0], 500)
    assert len(hits) == 500 and len({i for i, _ in hits}) == 500
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    many = index.search_many(data[:3], 100)
    assert [len(h) for h in many] == [100, 100, 100]
    assert [h[0][0] for h in many] == [0, 1, 2]


def test_hnsw_search_widens_with_the_graph() -> None:
    """At least one candidate per ``hnsw_nodes_per_ef`` nodes: a graph
    searched with a fixed small breadth loses recall as it grows; the same
    graph searched with the size-aware breadth finds nearly the exact top 10."""
    config = IndexConfig(hnsw_ef_search=4, hnsw_nodes_per_ef=1000)
    assert ef_for(config, 10, 10) == 10  # never below k
    assert ef_for(config, 1_000_000, 10) == 1000
    assert ef_for(config, 1_000_001, 10) == 1001
    assert ef_for(IndexConfig(hnsw_ef_search=256), 100_000, 10) == 256

    n = 6000
    data = clustered(n, 30, seed=12)
    queries = near_queries(data, 60, seed=13)
    truth = exact_top(data, queries, 10)

    def recall(nodes_per_ef: int) -> float:
        cfg = IndexConfig(
            flat_max=100,
            hnsw_m=8,
            hnsw_ef_construction=16,
            hnsw_ef_search=1,
            hnsw_nodes_per_ef=nodes_per_ef,
        )
        index = FaissIndex.build(DIM, np.arange(n), data, cfg)
        found = [{i for i, _ in index.search(q, 10)} for q in queries]
        return sum(len(f & set(t.tolist())) for f, t in zip(found, truth, strict=True)) / 600

    narrow, wide = recall(10**9), recall(20)  # ef 10 against ef 300
    assert wide >= 0.97 and wide > narrow, (narrow, wide)


def test_hnsw_memory_formula_counts_every_node() -> None:
    config = IndexConfig(flat_max=100, hnsw_m=16)
    index = FaissIndex.build(DIM, np.arange(1000), clustered(1000, 10), config)
    per_node = 4 * DIM + 2 * 16 * 4 + 37
    assert index.memory_bytes() == 1000 * per_node
    index.remove(list(range(100)))  # dead nodes still take their room
    assert index.memory_bytes() == 1000 * per_node


@pytest.mark.parametrize("fold_min", [4096, 16])
def test_hnsw_ids_follow_any_mix_of_adds_replacements_and_removals(
    fold_min: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The graph's id -> live node map (most nodes by binary search over
    sorted arrays, the last added in a dict, folded into the arrays when it
    grows) against a plain dict, over random changes: every live id is found
    with its latest vector, none removed or replaced shows."""
    monkeypatch.setattr(faiss_index, "FOLD_MIN", fold_min)
    rng = np.random.default_rng(7)
    config = IndexConfig(flat_max=10, hnsw_m=8, hnsw_ef_construction=32, hnsw_ef_search=64)
    ids = rng.permutation(np.arange(1_000, 1_600))  # unsorted, sparse
    data = random_vectors(len(ids), seed=1)
    index = FaissIndex.build(DIM, ids, data, config)
    expected = dict(zip(ids.tolist(), data, strict=True))
    for step in range(30):
        pick = rng.choice(np.arange(900, 1_700), size=40, replace=False)
        if step % 3 == 2:
            index.remove(pick.tolist())
            for i in pick.tolist():
                expected.pop(i, None)
        else:
            vectors = random_vectors(len(pick), seed=100 + step)
            index.add(pick, vectors)
            expected.update(zip(pick.tolist(), vectors, strict=True))
        assert len(index) == len(expected)
    probe = rng.choice(list(expected), size=40, replace=False)
    for i in probe.tolist():
        hits = dict(index.search(expected[i], 5))
        assert i in hits and hits[i] == pytest.approx(float(expected[i] @ expected[i]), abs=1e-4)
    gone = set(range(900, 1_700)) - set(expected)
    for q in random_vectors(20, seed=999):
        assert not {i for i, _ in index.search(q, 50)} & gone


def test_hnsw_changes_made_during_a_rebuild_survive_the_swap() -> None:
    """The graph keeps answering while a new one is built from its live
    vectors, and what changes meanwhile is replayed on the new one."""
    n = 20_000  # big enough that the build takes a while
    data = clustered(n + 200, 50, seed=12)
    index = FaissIndex.build(DIM, np.arange(n), data[:n], IndexConfig(flat_max=100))
    graph = index._index
    index.remove(list(range(int(DEAD_SHARE * n) + 1)))  # starts the rebuild
    assert graph._building is not None
    # Meanwhile: new vectors, an upsert and removals of live ones.
    index.add(np.arange(n, n + 200), data[n:])
    index.add([n - 1], data[[5]])  # id n-1 now holds vector 5 (whose id is gone)
    index.remove([n - 2, n - 3])
    for j in (n, n + 199):
        assert index.search(data[j], 1)[0] == (j, pytest.approx(1.0, abs=1e-5))
    assert all(i > DEAD_SHARE * n for i, _ in index.search(data[0], 20))
    graph.wait_for_rebuild(timeout=120)
    # The replayed upsert and removals left their own three dead nodes.
    assert graph.rebuilds == 1 and graph.dead == 3
    assert len(index) == n - (int(DEAD_SHARE * n) + 1) + 200 - 2
    for j in (n, n + 199):
        assert index.search(data[j], 1)[0] == (j, pytest.approx(1.0, abs=1e-5))
    assert index.search(data[5], 1)[0] == (n - 1, pytest.approx(1.0, abs=1e-5))
    assert index.search(data[n - 1], 1)[0][0] != n - 1  # its old vector is gone
    found = {i for i, _ in index.search(data[n - 2], 50)}
    assert not found & ({n - 2, n - 3} | set(range(int(DEAD_SHARE * n) + 1)))


def test_a_failed_rebuild_leaves_the_graph_answering(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuild that fails (say, out of memory for the second graph) is
    logged and dropped; the current graph keeps filtering its dead nodes."""
    from embeddings import faiss_index

    def fail(*_: object) -> None:
        raise MemoryError("no room for a second graph")

    data = clustered(1000, 10, seed=13)
    index = FaissIndex.build(DIM, np.arange(1000), data, IndexConfig(flat_max=100))
    graph = index._index
    monkeypatch.setattr(faiss_index._GraphState, "of", fail)
    index.remove(list(range(300)))
    deadline = 50
    while graph._building is not None and deadline:
        graph._building.exception(timeout=5)
        index.search(data[500], 1)  # the owner's next call drops the failed build
        deadline -= 1
    assert graph._building is None and graph.rebuilds == 0 and graph.dead == 300
    found = {i for i, _ in index.search(data[0], 50)}
    assert len(found) == 50 and not found & set(range(300))
    assert index.search(data[500], 1)[0] == (500, pytest.approx(1.0, abs=1e-5))


def test_sq8_graph_recall_scores_memory_and_changes() -> None:
    """The Api replicas' graphs (``hnsw_codes="sq8"``): 8-bit codes, recall@10
    against the exact top 10 still >= 0.95, scores within a hundredth of the
    exact inner products, a quarter of the vectors' memory; upserts, removals
    and grown-from-empty graphs (ranges not trained on data) work alike."""
    n = 5_000
    data = clustered(n, 50, seed=5)
    config = IndexConfig(flat_max=1000, hnsw_codes="sq8")
    index = FaissIndex.build(DIM, np.arange(n), data, config)
    assert index.kind == HNSW and len(index) == n
    queries = near_queries(data, 200, seed=6)
    assert recall_at(index, data, queries, 10) >= 0.95
    for i, s in index.search(queries[0], 10):
        assert s == pytest.approx(float(data[i] @ queries[0]), abs=0.01)
    per_node = DIM + 2 * config.hnsw_m * 4 + 37
    assert index.memory_bytes() == n * per_node
    floats = FaissIndex.build(DIM, np.arange(2000), data[:2000], IndexConfig(flat_max=1000))
    assert index.memory_bytes() / n < floats.memory_bytes() / 2000
    # Grown from empty: the first adds use the fixed range; upsert and remove.
    grown = FaissIndex(DIM, IndexConfig(flat_max=50, hnsw_codes="sq8"))
    grown.add(np.arange(40), data[:40])
    grown.add(np.arange(40, 600), data[40:600])
    assert grown.kind == HNSW and len(grown) == 600
    assert grown.search(data[300], 1)[0][0] == 300
    grown.add([300], data[[900]])
    assert grown.search(data[900], 1)[0][0] == 300
    assert grown.remove([1, 2]) == 2 and all(i not in (1, 2) for i, _ in grown.search(data[1], 20))
