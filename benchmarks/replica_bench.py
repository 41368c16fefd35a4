"""The Api replicas' copy of the vector index at large n: float HNSW (what
the replicas held before issue 36) against 8-bit HNSW (``hnsw_codes="sq8"``,
what they hold now), through the service's ``FaissIndex``: memory (RSS
growth of the build and the formula), build time, recall@10 against the
exact top 10, ms a query (docs/benchmarks.md, "Replica vector memory").

Vectors: derived from real all-MiniLM-L6-v2 vectors (the ranking evaluation
sets' cached document vectors, ``/tmp/cairn-ranking-bench``), as the search
benchmark derives its patterns: normalise(w0·v_a + w1·v_b + w2·v_c + noise),
w ~ Dirichlet(7, 1.5, 1.5), noise N(0, 0.35²/384). Queries: real query
vectors of the same sets.

    .venv/bin/python -m benchmarks.replica_bench [--n 1000000] [--no-docs]
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.harness import rss_mib, section_head, write_docs

START = "<!-- replica-bench:start -->"
END = "<!-- replica-bench:end -->"
CACHE = Path(os.environ.get("CAIRN_RANKING_BENCH_DIR", "/tmp/cairn-ranking-bench"))


def basis() -> tuple[np.ndarray, np.ndarray]:
    docs = [np.load(p) for p in sorted(CACHE.glob("*-docs-*.npy")) if "int8" not in p.name]
    queries = [np.load(p) for p in sorted(CACHE.glob("*-queries-*.npy")) if "int8" not in p.name]
    if not docs:
        raise SystemExit("no cached vectors: run `python -m benchmarks.ranking_eval` first")
    return np.vstack(docs).astype(np.float32), np.vstack(queries).astype(np.float32)


def derived(base: np.ndarray, n: int, seed: int = 36) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        w = rng.dirichlet([7, 1.5, 1.5], m).astype(np.float32)
        picks = rng.integers(0, len(base), (m, 3))
        v = sum(w[:, j : j + 1] * base[picks[:, j]] for j in range(3))
        v += rng.standard_normal(v.shape).astype(np.float32) * (0.35 / np.sqrt(base.shape[1]))
        out[start : start + m] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def exact_top(data: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    import faiss

    flat = faiss.IndexFlatIP(data.shape[1])
    flat.add(data)
    _, rows = flat.search(queries, k)
    return rows


def measure(n: int, n_queries: int, codes: str, data: np.ndarray, queries: np.ndarray,
            truth: np.ndarray, efs: list[int], ef_construction: int = 40,
            m: int = 32) -> dict[str, float]:  # fmt: skip
    from embeddings.config import IndexConfig
    from embeddings.faiss_index import FaissIndex

    gc.collect()
    before = rss_mib()
    t0 = time.perf_counter()
    index = FaissIndex.build(
        data.shape[1],
        np.arange(n),
        data,
        IndexConfig(hnsw_codes=codes, hnsw_m=m, hnsw_ef_construction=ef_construction),
    )
    build_s = time.perf_counter() - t0
    grown = rss_mib() - before
    result: dict[str, float] = {
        "build_s": build_s,
        "rss_mib": grown,
        "formula_mib": index.memory_bytes() / 2**20,
    }
    for ef in efs:
        # The search breadth of the graph (CAIRN_SEARCH_HNSW_EF), set per run.
        index._index.config = replace(index.config, hnsw_ef_search=ef)
        hits, times = 0, []
        for q, expected in zip(queries[:n_queries], truth, strict=True):
            t = time.perf_counter()
            found = index.search(q, 10)
            times.append(time.perf_counter() - t)
            hits += len({i for i, _ in found} & set(expected.tolist()))
        result[f"recall@ef{ef}"] = hits / (10 * n_queries)
        result[f"ms@ef{ef}"] = float(np.median(times) * 1000)
    del index
    gc.collect()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="Replica vector index memory at large n.")
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--codes", default="sq8,float", help="which graphs, comma-separated")
    parser.add_argument("--efs", default="256", help="HNSW search breadths to measure")
    parser.add_argument(
        "--ef-construction",
        default="40",
        help="HNSW efConstruction values to build with (CAIRN_SEARCH_HNSW_EF_CONSTRUCTION)",
    )
    parser.add_argument("--m", type=int, default=32, help="HNSW M (CAIRN_SEARCH_HNSW_M)")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    builds = [int(x) for x in args.ef_construction.split(",")]
    load_before = os.getloadavg()[0]
    efs = [int(x) for x in args.efs.split(",")]
    base, qv = basis()
    data = derived(base, args.n)
    queries = qv[np.random.default_rng(1).choice(len(qv), args.queries, replace=False)]
    truth = exact_top(data, queries, 10)
    rows = {}
    for codes in args.codes.split(","):
        for efc in builds:
            rows[codes, efc] = measure(
                args.n, args.queries, codes, data, queries, truth, efs, efc, args.m
            )
            print(f"bench: {codes} efConstruction {efc}: {rows[codes, efc]}", flush=True)
    lines = [
        *section_head(START, "Replica vector memory", "replica_bench.py", load_before),
        f"- 1-minute load average after the run: {os.getloadavg()[0]:.2f} (a shared machine: "
        "build times and ms are wall clock and slowed by other work; memory and recall are not).",
        f"- {args.n:,} vectors (384-d) derived from {len(base):,} real all-MiniLM-L6-v2 document "
        f"vectors of the evaluation sets; {args.queries} real query vectors; recall@10 against "
        f"the exact (flat) top 10; HNSW M {args.m} (default 32), efConstruction as in the "
        "table (default 40).",
        "",
        "| Replica graph | efConstruction | build s | RSS growth MiB | formula MiB | ef "
        "| recall@10 | ms a query |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (codes, efc), r in rows.items():
        label = "8-bit codes (`sq8`, now)" if codes == "sq8" else "float vectors (before)"
        for ef in efs:
            lines.append(
                f"| {label} | {efc} | {r['build_s']:.0f} | {r['rss_mib']:.0f} | "
                f"{r['formula_mib']:.0f} | "
                f"{ef} | {r[f'recall@ef{ef}']:.3f} | {r[f'ms@ef{ef}']:.2f} |"
            )
    lines += [
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.replica_bench --n N "
        "[--ef-construction 40,100,200] [--m 32]`.",
        END,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_docs:
        write_docs(text, start_mark=START, end_mark=END)


if __name__ == "__main__":
    main()
