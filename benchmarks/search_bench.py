"""Semantic search in parts (``benchmarks/search/``), each with its section of
docs/benchmarks.md: ``embedder`` (throughput), ``search`` (/api/search latency;
with ``--embed`` at a large corpus of real vectors) and ``index`` (memory, recall).

    .venv/bin/python -m benchmarks.search_bench [--parts embedder,search,index]
    .venv/bin/python -m benchmarks.search_bench --parts search --patterns 1000000 --embed
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks.harness import stop_on_sigterm, wrk_options
from benchmarks.search.config import N_PATTERNS, N_THROUGHPUT
from benchmarks.search.embedder import part_embedder
from benchmarks.search.index import part_index
from benchmarks.search.latency import part_search
from benchmarks.search.million import part_million


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = wrk_options("search_bench")
    add = parser.add_argument
    add("--parts", default="embedder,search,index", help="embedder,search,index (all)")
    add("--texts", type=int, default=N_THROUGHPUT, help="embedder: throughput texts")
    add("--in-flight", type=int, default=256, help="embedder: concurrent `embed` calls")
    add("--rounds", type=int, default=3, help="embedder: rounds (median)")
    add("--patterns", type=int, default=N_PATTERNS, help="search: other than 100,000 with --embed")
    add("--embed", action="store_true", help="search: a bulk-seeded corpus of real vectors")
    add("--seed-only", action="store_true", help="--embed: seed and embed only")
    add("--embed-batch", type=int, default=256, help="--embed: texts a batch")
    add("--embed-threads", type=int, default=0, help="--embed: encoder threads (0: every core)")
    add("--embed-device", default="cpu", help="--embed: cpu (ONNX Runtime) or auto (a GPU if any)")
    add("--vectors-from", type=Path, help="--embed: gpu_embed.py's shards, loaded first")
    args = parser.parse_args(argv)
    if args.patterns != N_PATTERNS and not args.embed:
        parser.error("--patterns other than 100,000 needs --embed")
    args.part_list = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not args.part_list or set(args.part_list) - {"embedder", "search", "index"}:
        parser.error(f"--parts: from embedder, search, index, not {args.parts}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()
    print(f"bench: 1-minute load average now {os.getloadavg()[0]:.2f}", flush=True)
    t0 = time.monotonic()
    for part in ("embedder", "index", "search"):
        if part in args.part_list:
            search = part_million if args.embed else part_search
            {"embedder": part_embedder, "search": search, "index": part_index}[part](args)
    took, load = time.monotonic() - t0, os.getloadavg()[0]
    print(f"bench: done in {took:.0f}s; 1-minute load average now {load:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
