"""Semantic search, in parts (``benchmarks/search/``), each writing its own
section of docs/benchmarks.md: ``embedder`` (the Embedder's throughput),
``search`` (/api/search latency at 100,000 patterns; with ``--embed`` at a
large corpus of real vectors, resumable) and ``index`` (the vector index's
memory and recall).

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
    parser.add_argument(
        "--parts", default="embedder,search,index", help="embedder,search,index (all)"
    )
    parser.add_argument("--texts", type=int, default=N_THROUGHPUT, help="throughput texts")
    parser.add_argument("--in-flight", type=int, default=256, help="concurrent `embed` calls")
    parser.add_argument("--rounds", type=int, default=3, help="embedder rounds (median)")
    parser.add_argument(
        "--patterns",
        type=int,
        default=N_PATTERNS,
        help="patterns of part search (other than 100,000 needs --embed)",
    )
    parser.add_argument(
        "--embed",
        action="store_true",
        help="part search on a bulk-seeded corpus embedded by the ONNX encoder "
        "(benchmarks/search/million.py; resumable)",
    )
    parser.add_argument("--seed-only", action="store_true", help="--embed: seed and embed only")
    parser.add_argument("--embed-batch", type=int, default=256, help="--embed: texts a batch")
    parser.add_argument(
        "--embed-threads", type=int, default=0, help="--embed: encoder threads (0: every core)"
    )
    parser.add_argument(
        "--embed-device", default="cpu", help="--embed: cpu (ONNX Runtime) or auto (a GPU if any)"
    )
    parser.add_argument(
        "--vectors-from",
        type=Path,
        help="--embed: vectors embedded elsewhere (benchmarks/search/gpu_embed.py's shards), "
        "loaded before embedding the rest",
    )
    args = parser.parse_args(argv)
    if args.patterns != N_PATTERNS and not args.embed:
        parser.error("--patterns other than 100,000 needs --embed")
    args.part_list = [p.strip() for p in args.parts.split(",") if p.strip()]
    bad = [p for p in args.part_list if p not in ("embedder", "search", "index")]
    if bad or not args.part_list:
        parser.error(f"--parts: unknown {bad}")
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
    print(
        f"bench: done in {time.monotonic() - t0:.0f}s; 1-minute load average now "
        f"{os.getloadavg()[0]:.2f}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
