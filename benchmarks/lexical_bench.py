"""The BM25 index (``retrieval.lexical.LexicalIndex``) at 100,000 patterns,
generated as ``search_bench`` seeds its corpus, without Postgres or Serve:
build time, memory, query latency, the cost of following edits, in memory and
in a node's folder on disk. Prints a markdown block (docs/benchmarks.md,
"Lexical (BM25) index at 100,000 patterns").

``--processes R`` also measures the memory of processes that search it, each
started for the purpose: one holding the index in memory, and over one node
folder (``retrieval.lexical_store``) the builder and R that only open it, all
alive at once ("One BM25 index per node").

    .venv/bin/python -m benchmarks.lexical_bench [--n 100000] [--processes 2] [--folder DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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
from benchmarks.harness import rss_mib
from embeddings.memory import release_freed_memory
from retrieval.lexical import LexicalIndex
from retrieval.lexical_store import NodeStore, StoreState

KINDS = ("pattern",)


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


def memory() -> dict[str, float]:
    """This process's memory (MiB) from /proc/self/smaps_rollup: Rss, Pss,
    Anonymous (private to it), Pss_File (its share of mapped files)."""
    out: dict[str, float] = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("Rss", "Pss", "Anonymous", "Pss_File", "Pss_Anon"):
                out[name] = int(rest.split()[0]) / 1024
    return out


def grown(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before.get(k, 0.0), 1) for k in after}


def search_all(index: LexicalIndex, queries: list[str]) -> None:
    for q in queries:
        index.search(q, 50)
        index.scale(q)


def child(role: str, n: int, folder: str) -> None:
    """One process of the memory comparison: prints its growth as JSON
    after building or opening the index and running the queries, then,
    when a line arrives on stdin, its memory as it is then (the others alive)."""
    queries = queries_for(300)
    docs = patterns(n) if role in ("memory", "build") else []
    before = memory()
    t0 = time.perf_counter()
    if role == "memory":
        index = LexicalIndex()
        for start in range(0, len(docs), 2000):
            index.add(docs[start : start + 2000])
        index.commit()
    elif role == "build":
        store = NodeStore(folder, "bench", KINDS)
        generation = store.begin()
        index = store.open(generation.name, writer=True)["pattern"]
        for start in range(0, len(docs), 2000):  # as LexicalSearch builds it
            index.add(docs[start : start + 2000])
        index.commit()
        index.close_writer()
        release_freed_memory()  # as LexicalSearch does after a build
        assert store.writer_lock.acquire()
        store.write(StoreState(generation.name, 1, 0))
        store.writer_lock.release()
        generation.release()
    else:
        store = NodeStore(folder, "bench", KINDS)
        state = store.read()
        assert state is not None
        index = store.open(state.generation)["pattern"]
    opened_s = time.perf_counter() - t0
    search_all(index, queries)
    print(json.dumps({"grown": grown(memory(), before), "s": opened_s}), flush=True)
    sys.stdin.readline()
    print(json.dumps({"grown": grown(memory(), before), "docs": len(index)}), flush=True)


def spawn(role: str, n: int, folder: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    command = [sys.executable, "-m", "benchmarks.lexical_bench", "--child", role, f"--n={n}"]
    proc = subprocess.Popen(
        [*command, f"--folder={folder}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def finish(procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    out = []
    for proc in procs:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        out.append(json.loads(proc.stdout.readline()))
    for proc in procs:
        proc.wait(timeout=60)
    return out


def describe(label: str, g: dict[str, float]) -> str:
    return (
        f"{label}: RSS +{g['Rss']:.0f} MiB, of it private (anonymous) +{g['Anonymous']:.0f} MiB; "
        f"PSS +{g['Pss']:.0f} MiB (mapped files +{g.get('Pss_File', 0):.0f} MiB)"
    )


def memory_per_process(n: int, processes: int, where: str | None = None) -> list[str]:
    load = os.getloadavg()[0]
    lines = [
        f"- memory per process at {n:,} patterns (each measured after 300 queries of top 50, "
        f"growth over the process before the index; 1-minute load average {load:.2f}):"
    ]
    with tempfile.TemporaryDirectory(prefix="cairn-bm25-bench-", dir=where) as folder:
        proc, _ = spawn("memory", n, folder)
        [alone] = finish([proc])
        lines.append("  - " + describe("in memory, one process", alone["grown"]))
        builder, built = spawn("build", n, folder)
        readers = [spawn("read", n, folder) for _ in range(processes)]
        final = finish([builder] + [p for p, _ in readers])
        size = sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file()) / 2**20
        lines.append(
            f"  - on disk, one folder for the node ({size:.0f} MiB of files); built in "
            f"{built['s']:.1f} s; with {processes + 1} processes alive:"
        )
        lines.append("    - " + describe("the process that built it", final[0]["grown"]))
        for i, (_, opened) in enumerate(readers):
            lines.append(
                "    - "
                + describe(
                    f"a process that opened it (in {opened['s'] * 1000:.0f} ms)",
                    final[i + 1]["grown"],
                )
            )
    return lines


def disk_edits(docs: list[tuple[int, dict[str, str | None]]], folder: str | None) -> list[str]:
    """The same edits on the node's folder: a writer opened for each update,
    committed (tantivy syncs the files) and closed, as LexicalSearch applies
    a change; then the time another process's reader takes to reload."""
    with tempfile.TemporaryDirectory(prefix="cairn-bm25-bench-", dir=folder) as where:
        store = NodeStore(where, "bench", KINDS)
        generation = store.begin()
        index = store.open(generation.name, writer=True)["pattern"]
        for start in range(0, len(docs), 2000):
            index.add(docs[start : start + 2000])
        index.commit()
        index.close_writer()
        reader = store.open(generation.name)["pattern"]
        queries = queries_for(300)
        passes: list[list[float]] = [[], []]
        # The first pass maps each page it touches (a fault per page), the
        # second finds them mapped, as a replica that has been searching does.
        for searched in passes:
            for q in queries:
                t = time.perf_counter()
                reader.search(q, 50)
                reader.scale(q)
                searched.append((time.perf_counter() - t) * 1000)
        rng = random.Random(1)
        times, reloads = [], []
        for _ in range(20):
            batch = [
                (rng.randint(1, len(docs)), docs[rng.randrange(len(docs))][1]) for _ in range(10)
            ]
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
    return [
        "- the same index in a folder on disk, opened by a reader: top 50 per query "
        + "; ".join(
            f"{label} p50 {statistics.median(xs):.2f} ms, p90 {pct(xs, 0.9):.2f} ms, "
            f"p99 {pct(xs, 0.99):.2f} ms"
            for label, xs in zip(("first pass", "second pass"), passes, strict=True)
        )
        + ".",
        f"- the same edits on the node's folder on disk ({os.path.dirname(where)}): writer "
        f"opened, committed, closed in {statistics.median(times):.1f} ms (median; p90 "
        f"{pct(times, 0.9):.1f} ms), another reader's reload {statistics.median(reloads):.2f} ms.",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=0)
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--child", choices=["memory", "build", "read"], help=argparse.SUPPRESS)
    # Where the folder of the disk measurements goes (a temporary one in it):
    # the disk's speed at syncing sets the time of a commit.
    parser.add_argument("--folder", default=None)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.n, args.folder)
        return
    if args.memory_only:
        print("\n".join(memory_per_process(args.n, max(args.processes, 1), args.folder)))
        return
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
    lines += disk_edits(docs, args.folder)
    if args.processes:
        del index, docs
        lines += memory_per_process(args.n, args.processes, args.folder)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
