"""Part ``embedder``: the Embedder deployment's throughput against plain
``SentenceTransformer.encode``, and its docs section."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.corpus import texts_for
from benchmarks.embedding import encode
from benchmarks.harness import section_head, write_docs
from benchmarks.search.config import MARKS, N_BASIS, load_pair
from benchmarks.search.vectors import basis_vectors, load_model, query_vectors


def tokens(model: Any, texts: list[str]) -> float:
    """Mean number of word-piece tokens per text (special tokens included)."""
    lengths = [len(model.tokenizer(t)["input_ids"]) for t in texts[:500]]
    return sum(lengths) / len(lengths)


# ------------------------------------------------------- part a: the Embedder


@dataclass
class Throughput:
    label: str
    threads: dict[str, int]  # torch threads of a replica's query and bulk calls
    plain_per_s: float  # plain encode in 64-text calls, in the same rounds
    single_per_s: float
    many_per_s: float
    many2_per_s: float
    max_diff: float


def measure_plain(model: Any, texts: list[str]) -> tuple[float, np.ndarray]:
    encode(model, texts[:64])  # warm-up
    t0 = time.perf_counter()
    vectors = encode(model, texts)
    return len(texts) / (time.perf_counter() - t0), vectors


def measure_plain_chunks(model: Any, texts: list[str], size: int = 64) -> float:
    """Texts/s of plain ``encode`` called once per ``size`` texts, the unit
    ``embed_many`` gets in this benchmark: no sorting by length across calls."""
    t0 = time.perf_counter()
    for i in range(0, len(texts), size):
        encode(model, texts[i : i + size])
    return len(texts) / (time.perf_counter() - t0)


async def _drive(handle: Any, texts: list[str], in_flight: int) -> tuple[float, np.ndarray]:
    sem = asyncio.Semaphore(in_flight)

    async def one(text: str) -> Any:
        async with sem:
            return await handle.embed.remote(text)

    t0 = time.perf_counter()
    rows = await asyncio.gather(*(one(t) for t in texts))
    return len(texts) / (time.perf_counter() - t0), np.vstack(rows)


async def _drive_many(
    handle: Any, texts: list[str], in_flight: int, batch: int = 64
) -> tuple[float, np.ndarray]:
    sem = asyncio.Semaphore(in_flight)

    async def one(part: list[str]) -> Any:
        async with sem:
            return await handle.embed_many.remote(part)

    parts = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    t0 = time.perf_counter()
    rows = await asyncio.gather(*(one(p) for p in parts))
    return len(texts) / (time.perf_counter() - t0), np.vstack(rows)


def measure_embedder(
    model: Any, texts: list[str], reference: np.ndarray, in_flight: int, rounds: int
) -> tuple[Throughput, dict[str, Any]]:
    """The default deployment: ``rounds`` rounds of plain ``encode`` in
    64-text calls (in this process, Ray up and the replica idle), ``embed``,
    ``embed_many`` and ``embed_many`` 2 in flight; medians. Interleaving puts
    the plain baseline under the same conditions (Ray's own processes, the
    machine's other load) as the deployment it is compared with. (Two replicas
    and ``CAIRN_EMBEDDER_THREADS=1`` were measured the same way until fcedb44.)"""
    import ray
    from ray import serve

    from embeddings.deployments import Embedder
    from serve_app.settings import Settings

    settings = Settings()
    config = settings.embedder_config()
    facts = {"num_cpus": settings.embedder_num_cpus, "max_batch": config.max_batch_size}
    tmp = tempfile.mkdtemp(prefix="crs-", dir="/tmp")
    ray.init(
        num_cpus=len(os.sched_getaffinity(0)),
        _temp_dir=tmp,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        namespace="search-bench",
    )
    try:
        serve.start(proxy_location="Disabled")
        actor: dict[str, Any] = {"num_cpus": settings.embedder_num_cpus}
        app = Embedder.options(  # type: ignore[attr-defined]
            num_replicas=1, ray_actor_options=actor
        ).bind(config)
        handle = serve.run(app, name="embedder-bench", route_prefix=None)
        threads = dict(handle.describe.remote().result()["threads"])

        async def run() -> dict[str, list[float]]:
            await _drive_many(handle, texts[:256], 2)  # warm-up
            await _drive(handle, texts[:256], in_flight)
            got: dict[str, list[float]] = {k: [] for k in ("plain", "single", "many", "many2")}
            got["diff"] = []
            for _ in range(rounds):
                got["plain"].append(measure_plain_chunks(model, texts))
                single, vectors = await _drive(handle, texts, in_flight)
                many, many_vectors = await _drive_many(handle, texts, 1)
                got["single"].append(single)
                got["many"].append(many)
                got["many2"].append((await _drive_many(handle, texts, 2))[0])
                diff = max(np.abs(v - reference).max() for v in (vectors, many_vectors))
                got["diff"].append(float(diff))
            return got

        got = asyncio.run(run())
        med = {k: statistics.median(v) for k, v in got.items()}
        row = Throughput(
            f"1 replica, `num_cpus` {settings.embedder_num_cpus:g} (the default deployment)",
            threads,
            med["plain"],
            med["single"],
            med["many"],
            med["many2"],
            max(got["diff"]),  # the largest of any round
        )
        print(
            f"bench: plain {row.plain_per_s:6.1f}/s  embed {row.single_per_s:6.1f}/s  "
            f"embed_many {row.many_per_s:6.1f}/s (2 in flight {row.many2_per_s:6.1f}/s)  "
            f"max |Δ| {row.max_diff:.1e}  rounds {', '.join(f'{x:.0f}' for x in got['many'])}",
            flush=True,
        )
        serve.delete("embedder-bench")
    finally:
        with contextlib.suppress(Exception):
            serve.shutdown()
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return row, facts


def embedder_section(
    plain: float,
    chunked: float,
    plain_threads: int,
    row: Throughput,
    facts: dict[str, Any],
    n_texts: int,
    mean_tokens: float,
    in_flight: int,
    rounds: int,
    load: tuple[float, float],
) -> str:
    start, end = MARKS["embedder"]
    r = row
    lines = [
        *section_head(start, "Embedder throughput", "search_bench.py", load[0]),
        f"- 1-minute load average after the part: {load[1]:.2f}. Other work on the 2 cores "
        "would slow the rows; the plain baseline is measured again in every round to share "
        "their conditions.",
        f"- Texts: {n_texts:,} generated technical texts, {mean_tokens:.0f} word-piece tokens "
        "on average; model all-MiniLM-L6-v2 (the packaged copy), CPU.",
        f"- Plain: `SentenceTransformer.encode(texts, batch_size=64)` in the benchmark's "
        f"process (torch threads: {plain_threads}). First with Ray not running, over all the "
        "texts in one call (it sorts them by length, so batches carry little padding) and in "
        "one call per 64 texts (the unit `embed_many` gets here). Then again in 64-text "
        f"calls in each of {rounds} rounds per deployment, Ray up and the replicas idle; the "
        "ratios are against this, the median of those rounds.",
        "- Serve: a local Ray with only the `Embedder` deployment "
        f"(`num_cpus` {facts['num_cpus']:g} per replica, query batches of at most "
        f"{facts['max_batch']}); called through a DeploymentHandle from the benchmark's "
        f"process: `embed` = one call per text, {in_flight} in flight (the query path); "
        "`embed_many` = batches of 64 texts, one at a time (the worker's path) or 2 in "
        f"flight. Each figure is the median of {rounds} rounds.",
        "",
        "| Deployment | torch threads (query / bulk) | plain, same rounds, texts/s | "
        "`embed` texts/s | ratio | `embed_many` texts/s | ratio | "
        "`embed_many`, 2 in flight, texts/s | ratio | max abs Δ vs plain |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r.label} | {r.threads['query']} / {r.threads['bulk']} | {r.plain_per_s:.1f} | "
        f"{r.single_per_s:.1f} | {r.single_per_s / r.plain_per_s:.2f} | "
        f"{r.many_per_s:.1f} | {r.many_per_s / r.plain_per_s:.2f} | "
        f"{r.many2_per_s:.1f} | {r.many2_per_s / r.plain_per_s:.2f} | {r.max_diff:.1e} |",
        "",
        f"Plain with Ray not running: {plain:.1f} texts/s in one call, {chunked:.1f} in "
        f"64-text calls. Against the one-call figure, the deployment's `embed_many` is "
        f"{r.many_per_s / plain:.2f} times plain, 2 in flight {r.many2_per_s / plain:.2f} times.",
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.search_bench --parts embedder`.",
        end,
    ]
    return "\n".join(lines) + "\n"


def part_embedder(args: argparse.Namespace) -> None:
    import torch

    texts = texts_for(N_BASIS)[: args.texts]
    model = load_model()
    mean_tokens = tokens(model, texts)
    load0 = os.getloadavg()[0]
    plain, reference = measure_plain(model, texts)
    chunked = measure_plain_chunks(model, texts)
    plain_threads = torch.get_num_threads()
    print(
        f"bench: plain encode {plain:.1f} texts/s ({plain_threads} torch threads, "
        f"{mean_tokens:.0f} tokens a text); in 64-text calls {chunked:.1f} texts/s",
        flush=True,
    )
    basis_vectors(model)  # cached for the other parts
    query_vectors(model)
    row, facts = measure_embedder(model, texts, reference, args.in_flight, args.rounds)
    if not args.no_docs:
        write_docs(
            embedder_section(
                plain,
                chunked,
                plain_threads,
                row,
                facts,
                len(texts),
                mean_tokens,
                args.in_flight,
                args.rounds,
                load_pair(load0),
            ),
            start_mark=MARKS["embedder"][0],
            end_mark=MARKS["embedder"][1],
        )
