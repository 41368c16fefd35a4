"""The search benchmark's settings: its service's state folder, port and
environment, its docs marks, the corpus's sizes, the cache of its vectors."""

from __future__ import annotations

import os

from benchmarks.harness import ROOT, bench_env

STATE_DIR = ROOT / ".cairn" / "bench-search"
CACHE_DIR = ROOT / ".cairn" / "bench" / "search-cache"
PORT = 8104
BENCH_ENV = bench_env(STATE_DIR, 3, "general", "anon_read", "search")
MARKS = {
    part: (f"<!-- {part}-bench:start -->", f"<!-- {part}-bench:end -->")
    for part in ("embedder", "search-latency", "vector-index")
}

N_BASIS = 6_000  # real texts embedded (the throughput texts are the first ones)
N_THROUGHPUT = 1_024
N_QUERIES = 300
N_PATTERNS = 100_000
N_AGENTS = 200
SLUG_PREFIX = "bench-search-v2-"


# The "every query new" run: queries asked nowhere else in the benchmark (its
# warm-up has its own), so each one misses the VectorIndex's query cache.
N_NEW_QUERIES = 8000


def load_pair(before: float) -> tuple[float, float]:
    return before, os.getloadavg()[0]
