"""The Api replicas' copy of the vector index (8-bit HNSW) through ``FaissIndex``
(docs/benchmarks.md, "Replica vector memory"), over vectors derived from the
ranking sets' cached ones (run ``ranking_eval`` first).

    .venv/bin/python -m benchmarks.replica_bench [--n 1000000] [--no-docs]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from benchmarks.harness import publish, section_head
from benchmarks.search.index import graph_recall
from embeddings.config import IndexConfig

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


def main() -> None:
    parser = argparse.ArgumentParser(description="Replica vector index memory at large n.")
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    base, qv = basis()
    data = derived(base, args.n)
    queries = qv[np.random.default_rng(1).choice(len(qv), args.queries, replace=False)]
    r = graph_recall(IndexConfig(hnsw_codes="sq8"), data, queries)
    print(f"bench: sq8 graph: {r}", flush=True)
    lines = [
        *section_head(START, "replica_bench.py", load_before),
        f"- 1-minute load average after the run: {os.getloadavg()[0]:.2f}.",
        f"- {args.n:,} vectors (384-d) derived from {len(base):,} real all-MiniLM-L6-v2 document "
        f"vectors of the evaluation sets; {args.queries} real query vectors; recall@10 against "
        f"the exact (flat) top 10; HNSW M {r['m']:.0f}, efConstruction "
        f"{r['ef_construction']:.0f}, ef {r['ef_used']:,.0f} (the defaults; the breadth grows with "
        "the graph).",
        "",
        "| Replica graph | build s | RSS growth MiB | formula MiB | recall@10 | ms a query |",
        "|---|---:|---:|---:|---:|---:|",
        f"| 8-bit codes (`sq8`) | {r['build_s']:.0f} | {r['rss']:.0f} | "
        f"{r['formula']:.0f} | {r['recall@10']:.3f} | {r['p50_ms']:.2f} |",
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.replica_bench --n N`.",
        END,
    ]
    publish("\n".join(lines) + "\n", START, END, args.no_docs)


if __name__ == "__main__":
    main()
