"""The BM25 index (``embeddings.lexical.LexicalIndex``) at 100,000 patterns:
build time, memory, query latency and the cost of following edits.

The patterns are generated as ``benchmarks/search_bench.py`` seeds its
100,000-pattern corpus (``benchmarks/search/seeding.py``: same seed, title,
description, tags, Zipf content, all from ``benchmarks/corpus.py``),
without Postgres or Serve: this measures the index each Api process builds at
start and queries per search. Appends nothing; prints a markdown block.

    .venv/bin/python -m benchmarks.lexical_bench [--n 100000]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from benchmarks.corpus import (
    ACTIONS,
    OBJECTS,
    SEED,
    TECH,
    TOOLS,
    cum_weights,
    queries_for,
    sentence,
    texts_for,
    vocabulary,
)
from embeddings.lexical import LexicalIndex


def rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def patterns(n: int) -> list[tuple[int, dict[str, str | None]]]:
    rng = random.Random(SEED)
    vocab = vocabulary(rng)
    cum = cum_weights(len(vocab))
    texts = texts_for(6000)
    out: list[tuple[int, dict[str, str | None]]] = []
    for i in range(n):
        title = f"{rng.choice(ACTIONS).capitalize()} {rng.choice(OBJECTS)} with {rng.choice(TOOLS)}"
        words = rng.choices(vocab, cum_weights=cum, k=rng.randint(60, 140))
        tags = " ".join(rng.sample(TECH[:40], 3) + rng.sample(TECH[:60], 2))
        out.append(
            (
                i + 1,
                {
                    "title": title,
                    "description": texts[i % len(texts)],
                    "tags": tags,
                    "content": f"{sentence(rng)} {' '.join(words)}",
                },
            )
        )
    return out


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    args = parser.parse_args(argv)
    docs = patterns(args.n)
    before = rss_mib()
    index = LexicalIndex()
    t0 = time.perf_counter()
    for start in range(0, len(docs), 2000):  # as LexicalSearch.build adds them
        index.add(docs[start : start + 2000])
    index.commit()
    build_s = time.perf_counter() - t0
    grown = rss_mib() - before
    queries = queries_for(300)
    lines = [
        f"- {len(index):,} patterns: built in {build_s:.1f} s (tokenizing included, one thread); "
        f"process RSS grew {grown:.0f} MiB.",
    ]
    for k in (50, 1000):
        times = []
        for q in queries:
            t = time.perf_counter()
            index.search(q, k)
            index.scale(q)
            times.append((time.perf_counter() - t) * 1000)
        lines.append(
            f"- top {k} per query ({len(queries)} queries, 2 to 12 words): p50 "
            f"{statistics.median(times):.2f} ms, p90 {pct(times, 0.9):.2f} ms, p99 "
            f"{pct(times, 0.99):.2f} ms."
        )
    rng = random.Random(1)
    times = []
    for _ in range(20):
        batch = [(rng.randint(1, args.n), docs[rng.randrange(args.n)][1]) for _ in range(10)]
        t = time.perf_counter()
        index.add(batch)
        index.commit()
        times.append((time.perf_counter() - t) * 1000)
    lines.append(
        f"- following edits: 10 changed patterns re-indexed and committed in "
        f"{statistics.median(times):.1f} ms (median of 20 rounds)."
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
