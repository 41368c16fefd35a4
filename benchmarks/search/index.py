"""Part ``index``: FaissIndex memory and recall at 100,000 vectors, flat (exact)
and the HNSW graph the service builds past ``flat_max``, and its docs section
(the trial that chose the index kinds: docs/benchmarks.md, "Vector index
memory and recall")."""

from __future__ import annotations

import argparse
import gc
import os
import time
from typing import Any

import numpy as np

from benchmarks.harness import publish, rss_mib, section_end, section_head
from benchmarks.search.config import MARKS, N_PATTERNS, load_pair
from benchmarks.search.vectors import basis_vectors, derived_vectors, query_vectors

DEEP = 50  # the depth the API asks each half of the fusion for, at least


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    pairs = zip(found, truth, strict=True)
    return sum(len(set(f[f >= 0].tolist()) & set(t.tolist())) for f, t in pairs) / truth.size


def per_query(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    """Ids found, one query at a time (as the service asks), and ms per query (median)."""
    found, times = [], []
    for q in queries:
        t0 = time.perf_counter()
        _, ids = index.search(q.reshape(1, -1), k)
        times.append(time.perf_counter() - t0)
        found.append(ids[0])
    return np.vstack(found), float(np.median(times) * 1000)


def built(config: Any, data: np.ndarray) -> tuple[Any, dict[str, float]]:
    """A FaissIndex over ``data`` (ids 0..n-1): build seconds, RSS growth and
    the formula's memory, MiB."""
    from embeddings.faiss_index import FaissIndex

    gc.collect()
    before, t0 = rss_mib(), time.perf_counter()
    index = FaissIndex.build(data.shape[1], np.arange(len(data), dtype=np.int64), data, config)
    build_s = time.perf_counter() - t0
    gc.collect()
    return index, {
        "build_s": build_s,
        "rss": rss_mib() - before,
        "formula": index.memory_bytes() / 2**20,
    }


def exact_top(data: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """The ids (row numbers) of each query's exact top ``k``, by inner product."""
    import faiss

    flat = faiss.IndexFlatIP(data.shape[1])
    flat.add(data)
    return np.asarray(flat.search(queries, k)[1])


def graph_recall(config: Any, data: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    """``built`` with ``config``, then each query through ``FaissIndex.search``
    as the service asks it: recall@10 against the exact top 10, ms a query
    (p50, p99), and the search's breadth at this size (``ef_for``)."""
    from embeddings.faiss_index import ef_for

    truth = exact_top(data, queries, 10)
    index, out = built(config, data)
    hits, times = 0, []
    for q, expected in zip(queries, truth, strict=True):
        t = time.perf_counter()
        found = index.search(q, 10)
        times.append((time.perf_counter() - t) * 1000)
        hits += len({i for i, _ in found} & set(expected.tolist()))
    return {
        **out,
        "recall@10": hits / (10 * len(queries)),
        "p50_ms": float(np.percentile(times, 50)),
        "p99_ms": float(np.percentile(times, 99)),
        "m": float(config.hnsw_m),
        "ef_construction": float(config.hnsw_ef_construction),
        "ef": float(config.hnsw_ef_search),
        "ef_used": float(ef_for(config, len(data), 10)),
        "nodes_per_ef": float(config.hnsw_nodes_per_ef),
    }


def measure_index(basis: np.ndarray, queries: np.ndarray) -> dict[str, Any]:
    import faiss

    from embeddings.config import IndexConfig

    # As in the VectorIndex replica: Ray gives its 0.1-CPU worker
    # OMP_NUM_THREADS=1. (Two OpenMP threads made one-query flat searches up
    # to 4x slower on this shared 2-core machine.)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        data = np.ascontiguousarray(derived_vectors(basis, N_PATTERNS))
        exact = faiss.IndexFlatIP(data.shape[1])
        exact.add(data)
        # The exact top 50 (recall@50); its first 10 are the top 10.
        truth, flat_ms = per_query(exact, queries, DEEP)
        del exact
        flat, flat_facts = built(IndexConfig(flat_max=N_PATTERNS), data)
        out: dict[str, Any] = {"dim": data.shape[1], "flat": flat_facts, "flat_ms": flat_ms}
        del flat
        graph, out["hnsw"] = built(IndexConfig(flat_max=1), data)
        raw = graph._index._state.graph  # labels are the ids: built from 0..n-1, none dead
        raw.hnsw.efSearch = graph.config.hnsw_ef_search
        found, ms = per_query(raw, queries, DEEP)
        c = graph.config
        out["hnsw"].update(m=c.hnsw_m, ef_construction=c.hnsw_ef_construction, ef=c.hnsw_ef_search)
        out["hnsw"].update(recall10=recall_at(found[:, :10], truth[:, :10]), ms=ms)
        out["hnsw"]["recall50"] = recall_at(found, truth)
        print(f"bench: flat {flat_ms:.2f} ms a query; HNSW {out['hnsw']}", flush=True)
        return out
    finally:
        faiss.omp_set_num_threads(threads)


def index_section(result: dict[str, Any], n_queries: int, load: tuple[float, float]) -> str:
    start, end = MARKS["vector-index"]
    d, f, h = result["dim"], result["flat"], result["hnsw"]
    lines = [
        *section_head(start, "search_bench.py", load[0]),
        f"- 1-minute load average after the part: {load[1]:.2f}.",
        f"- Vectors: {N_PATTERNS:,} of {d} dimensions; queries: {n_queries}.",
        "",
        "| Index | by the formula MiB | RSS growth of the build MiB | built in s | recall@10 "
        "| recall@50 | ms a query |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| flat (exact) | {f['formula']:.1f} | {f['rss']:.1f} | {f['build_s']:.1f} | 1 | 1 "
        f"| {result['flat_ms']:.2f} |",
        f"| HNSW, M {h['m']}, efConstruction {h['ef_construction']}, ef {h['ef']} "
        f"| {h['formula']:.1f} | {h['rss']:.1f} | {h['build_s']:.1f} | {h['recall10']:.3f} "
        f"| {h['recall50']:.3f} | {h['ms']:.3f} |",
    ]
    return section_end(lines, "`.venv/bin/python -m benchmarks.search_bench --parts index`", end)


def part_index(args: argparse.Namespace) -> None:
    basis = basis_vectors()
    queries = query_vectors()
    load0 = os.getloadavg()[0]
    result = measure_index(basis, queries)
    section = index_section(result, len(queries), load_pair(load0))
    publish(section, *MARKS["vector-index"], args.no_docs)
