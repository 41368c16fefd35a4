"""The Encoder on ONNX Runtime against PyTorch, same process and texts, the
backends alternating each round (docs/benchmarks.md, "Encoder: ONNX Runtime
against PyTorch"): queries and rows per second, memory, and the cosine of
their vectors."""

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
from typing import Any

import numpy as np

from benchmarks.corpus import queries_for, texts_for
from benchmarks.harness import publish, section_end, section_head

MARKS = ("<!-- encoder-bench:start -->", "<!-- encoder-bench:end -->")


def long_texts(n: int, seed: int = 36) -> list[str]:
    """Texts of 300-1,500 characters, the re-embedding benchmark's shape."""
    rng = random.Random(seed)
    pool = texts_for(2_000)
    out = []
    for _ in range(n):
        target, parts = rng.randint(300, 1500), list[str]()
        while sum(len(p) + 1 for p in parts) < target:
            parts.append(rng.choice(pool))
        out.append(" ".join(parts)[:target])
    return out


def rss_probe(backend: str, cache: str) -> dict[str, float]:
    """VmRSS and VmHWM (MiB) of a fresh process holding the encoder."""
    code = (
        "import json\n"
        "from embeddings.encoder import Encoder\n"
        f"e = Encoder(device='cpu', backend={backend!r}, cache_dir={cache!r})\n"
        "e.encode(['how to retry a webhook'])\n"
        "e.encode(['a text of some length about pools'] * 64, threads=2)\n"
        "st = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "mib = lambda k: int(st[k].split()[0]) / 1024\n"
        "print(json.dumps({'rss': mib('VmRSS'), 'hwm': mib('VmHWM')}))\n"
    )
    cmd = [sys.executable, "-c", code]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def per_s(encoder: Any, texts: list[str], batch: int, threads: int) -> tuple[float, float]:
    """(texts per wall second, texts per CPU second of this process), in calls
    of ``batch`` texts (1: one text a call). On a shared machine the second is
    the fair figure: per core, whatever else runs."""
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(texts), batch):
        if batch == 1:
            encoder.encode(texts[i : i + 1], threads=threads)
        else:
            encoder.encode(texts[i : i + batch], batch_size=64, threads=threads)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return len(texts) / wall, len(texts) / cpu


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from embeddings.encoder import Encoder

    cache = args.cache or tempfile.mkdtemp(prefix="cairn-onnx-")
    load: dict[str, float] = {}
    encoders: dict[str, Any] = {}
    backends = (("torch", "torch", "torch"), ("onnx", "onnx", "onnx (export + load)"))
    for name, backend, label in (*backends, ("again", "onnx", "onnx (cached)")):
        t0 = time.perf_counter()
        folder = cache if backend == "onnx" else None
        encoders[name] = Encoder(device="cpu", backend=backend, cache_dir=folder)
        load[label] = time.perf_counter() - t0
    del encoders["again"]
    queries, rows, cores = (
        queries_for(args.queries),
        long_texts(args.rows),
        len(os.sched_getaffinity(0)),
    )
    for e in encoders.values():  # warm-up
        e.encode(queries[:20], threads=1)
        e.encode(rows[:64], threads=1)
    figures: dict[str, dict[str, list[float]]] = {
        name: {k: [] for k in ("query", "query_cpu", "rows1", "rows1_cpu", "rowsN", "rowsN_cpu")}
        for name in encoders
    }
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for name, e in encoders.items():
            f = figures[name]
            for label, (wall, cpu) in (
                ("query", per_s(e, queries, 1, 1)),
                ("rows1", per_s(e, rows, 256, 1)),
                ("rowsN", per_s(e, rows, 256, cores)),
            ):
                f[label].append(wall)
                f[f"{label}_cpu"].append(cpu)
            print(f"bench: round {r + 1} {name}: " + ", ".join(
                f"{k} {v[-1]:.1f}/s" for k, v in f.items()), flush=True)  # fmt: skip
        loads.append(os.getloadavg()[0])
    check = queries[:50] + rows[:50]
    reference = encoders["torch"].encode(check)
    cosine = float((encoders["onnx"].encode(check) * reference).sum(1).min())
    memory = {name: rss_probe(name, cache) for name in ("torch", "onnx")}
    medians = {n: {k: statistics.median(v) for k, v in f.items()} for n, f in figures.items()}
    counts = {"cores": cores, "queries": len(queries), "rows": len(rows), "rounds": args.rounds}
    return {
        "figures": medians,
        "loads": loads,
        "load_s": load,
        "cosine": cosine,
        "memory": memory,
        **counts,
    }


LABELS = {
    "query_cpu": "queries/s per CPU second, one thread",
    "rows1_cpu": "rows/s per CPU second, one thread (a `cairn reembed --threads 1` actor)",
    "rowsN_cpu": "rows/s per CPU second, every core",
    "query": "queries/s (wall), one thread",
    "rows1": "rows/s (wall), one thread",
    "rowsN": "rows/s (wall), every core",
}


def rows_of(f: dict[str, dict[str, float]]) -> list[str]:
    t, o = f["torch"], f["onnx"]
    return [f"| {n} | {t[k]:.1f} | {o[k]:.1f} | {o[k] / t[k]:.2f} |" for k, n in LABELS.items()]


def section(result: dict[str, Any], load_before: float) -> str:
    f, m = result["figures"], result["memory"]
    loads = ", ".join(f"{x:.2f}" for x in result["loads"])
    lines = [
        *section_head(MARKS[0], "encoder_bench.py", load_before),
        f"- 1-minute load average at the start and after each round: {loads}.",
        f"- {result['queries']} queries, {result['rows']} rows; medians of {result['rounds']} "
        "rounds.",
        "",
        "Per CPU second of the process (the fair figure on a shared machine: per core, "
        "whatever else ran), then per wall second:",
        "",
        "| | PyTorch | ONNX Runtime fp32 | ratio |",
        "|---|---:|---:|---:|",
        *rows_of(f),
        f"| RSS of a process holding the encoder, MiB (peak) | {m['torch']['rss']:.0f} "
        f"({m['torch']['hwm']:.0f}) | {m['onnx']['rss']:.0f} ({m['onnx']['hwm']:.0f}) | "
        f"{m['onnx']['rss'] / m['torch']['rss']:.2f} |",
        "",
        f"- Smallest cosine to PyTorch's vectors over 100 texts: {result['cosine']:.6f}.",
        "- Load times: " + ", ".join(f"{k} {v:.1f} s" for k, v in result["load_s"].items()) + ".",
    ]
    return section_end(lines, "`.venv/bin/python -m benchmarks.encoder_bench`", MARKS[1])


def main() -> None:
    parser = argparse.ArgumentParser(description="ONNX Runtime Encoder against PyTorch.")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", default="", help="ONNX cache folder (default: a temp one)")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load_before = os.getloadavg()[0]
    result = measure(args)
    print(json.dumps(result, indent=1))
    publish(section(result, load_before), *MARKS, args.no_docs)


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
