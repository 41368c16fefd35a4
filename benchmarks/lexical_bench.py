"""The BM25 index (``LexicalIndex``) at 100,000 generated patterns, in memory
and on disk: build, memory, queries and edits. Prints the lines of
docs/benchmarks.md, "Lexical (BM25) index at 100,000 patterns".

    .venv/bin/python -m benchmarks.lexical_bench [--n 100000] [--folder DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from typing import Any

from benchmarks import corpus
from benchmarks.harness import rss_mib
from retrieval.lexical import LexicalIndex
from retrieval.lexical_store import NodeStore


def patterns(n: int) -> list[tuple[int, dict[str, str | None]]]:
    rng = random.Random(corpus.SEED)
    vocab, texts = corpus.vocabulary(rng), corpus.texts_for(6000)
    cum = corpus.cum_weights(len(vocab))
    out: list[tuple[int, dict[str, str | None]]] = []
    for i in range(n):
        title = corpus.title(rng)
        words = rng.choices(vocab, cum_weights=cum, k=rng.randint(60, 140))
        tags = " ".join(rng.sample(corpus.TECH[:40], 3) + rng.sample(corpus.TECH[:60], 2))
        content = f"{corpus.sentence(rng)} {' '.join(words)}"
        doc = {"title": title, "description": texts[i % len(texts)], "tags": tags}
        out.append((i + 1, {**doc, "content": content}))
    return out


def spread(xs: list[float]) -> str:
    """p50, p90 and p99 of ``xs`` (ms)."""
    xs = sorted(xs)
    p90, p99 = (xs[min(len(xs) - 1, int(p * len(xs)))] for p in (0.9, 0.99))
    return f"p50 {statistics.median(xs):.2f} ms, p90 {p90:.2f} ms, p99 {p99:.2f} ms"


def query_ms(index: Any, queries: list[str], k: int) -> list[float]:
    """Each query's top ``k`` and its IDF scale, as a search asks them: ms."""
    times = []
    for q in queries:
        t = time.perf_counter()
        index.search(q, k)
        index.scale(q)
        times.append((time.perf_counter() - t) * 1000)
    return times


def disk_edits(docs: list[tuple[int, dict[str, str | None]]], folder: str | None) -> list[str]:
    """The same edits on the node's folder: a writer opened for each update,
    committed (tantivy syncs the files) and closed, as LexicalSearch applies
    a change; then the time another process's reader takes to reload."""
    with tempfile.TemporaryDirectory(prefix="cairn-bm25-bench-", dir=folder) as where:
        store = NodeStore(where, "bench", ("pattern",))
        generation = store.begin()
        index = store.open(generation.name, writer=True)["pattern"]
        for start in range(0, len(docs), 2000):
            index.add(docs[start : start + 2000])
        index.commit()
        index.close_writer()
        reader = store.open(generation.name)["pattern"]
        queries = corpus.queries_for(300)
        # The first pass maps each page it touches (a fault per page), the
        # second finds them mapped, as a replica that has been searching does.
        passes = [query_ms(reader, queries, 50) for _ in range(2)]
        rng = random.Random(1)
        times, reloads = [], []
        for _ in range(20):
            n = len(docs)
            batch = [(rng.randint(1, n), docs[rng.randrange(n)][1]) for _ in range(10)]
            t = time.perf_counter()
            index.open_writer()
            index.add(batch)
            index.commit()
            index.close_writer()
            times.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            reader.reload()
            reloads.append((time.perf_counter() - t) * 1000)
        generation.release()
    p90 = sorted(times)[min(len(times) - 1, int(0.9 * len(times)))]
    return [
        "- the same index in a folder on disk, opened by a reader: top 50 per query "
        f"first pass {spread(passes[0])}; second pass {spread(passes[1])}.",
        f"- the same edits on the node's folder on disk ({os.path.dirname(where)}): writer "
        f"opened, committed, closed in {statistics.median(times):.1f} ms (median; p90 "
        f"{p90:.1f} ms), another reader's reload {statistics.median(reloads):.2f} ms.",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    # Where the folder of the disk measurements goes (a temporary one in it):
    # the disk's speed at syncing sets the time of a commit.
    parser.add_argument("--folder", default=None)
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
    queries = corpus.queries_for(300)
    lines = [
        f"- {len(index):,} patterns: built in {build_s:.1f} s (tokenizing included, one thread); "
        f"process RSS grew {grown:.0f} MiB."
    ]
    for k in (50, 1000):
        times = query_ms(index, queries, k)
        lines.append(
            f"- top {k} per query ({len(queries)} queries, 2 to 12 words): {spread(times)}."
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
    lines += disk_edits(docs, args.folder)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
