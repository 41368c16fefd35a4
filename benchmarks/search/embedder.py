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
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.corpus import texts_for
from benchmarks.harness import publish, section_end, section_head
from benchmarks.search.config import MARKS, N_BASIS, load_pair
from benchmarks.search.vectors import basis_vectors, encode, load_model, query_vectors


def plain_per_s(model: Any, texts: list[str], size: int = 64) -> float:
    """Texts/s of plain ``encode`` called once per ``size`` texts, the unit
    ``embed_many`` gets in this benchmark: no sorting by length across calls."""
    t0 = time.perf_counter()
    for i in range(0, len(texts), size):
        encode(model, texts[i : i + size])
    return len(texts) / (time.perf_counter() - t0)


async def drive(
    call: Callable[[Any], Any], parts: list[Any], in_flight: int, texts: int
) -> tuple[float, np.ndarray]:
    """``call`` on each of ``parts``, ``in_flight`` at a time: texts/s and the vectors."""
    sem = asyncio.Semaphore(in_flight)

    async def one(part: Any) -> Any:
        async with sem:
            return await call(part)

    t0 = time.perf_counter()
    rows = await asyncio.gather(*(one(p) for p in parts))
    return texts / (time.perf_counter() - t0), np.vstack(rows)


def measure_embedder(
    model: Any, texts: list[str], reference: np.ndarray, in_flight: int, rounds: int
) -> dict[str, Any]:
    """The default deployment: ``rounds`` rounds of plain ``encode`` in
    64-text calls (in this process, Ray up and the replica idle: the same
    conditions), ``embed``, ``embed_many`` and ``embed_many`` 2 in flight; medians.
    (Two replicas and ``CAIRN_EMBEDDER_THREADS=1`` were measured until fcedb44.)"""
    import ray
    from ray import serve

    from embeddings.deployments import Embedder
    from serve_app.settings import Settings

    settings = Settings()
    config = settings.embedder_config()
    tmp = tempfile.mkdtemp(prefix="crs-", dir="/tmp")
    ray.init(num_cpus=len(os.sched_getaffinity(0)), _temp_dir=tmp, namespace="search-bench",
             include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)  # fmt: skip
    try:
        serve.start(proxy_location="Disabled")
        actor: dict[str, Any] = {"num_cpus": settings.embedder_num_cpus}
        app = Embedder.options(num_replicas=1, ray_actor_options=actor).bind(config)  # type: ignore[attr-defined]
        handle = serve.run(app, name="embedder-bench", route_prefix=None)
        threads = dict(handle.describe.remote().result()["threads"])
        chunks = [texts[i : i + 64] for i in range(0, len(texts), 64)]

        async def run() -> dict[str, list[float]]:
            await drive(handle.embed_many.remote, chunks[:4], 2, 256)  # warm-up
            await drive(handle.embed.remote, texts[:256], in_flight, 256)
            got: dict[str, list[float]] = {
                k: [] for k in ("plain", "single", "many", "many2", "diff")
            }
            for _ in range(rounds):
                got["plain"].append(plain_per_s(model, texts))
                single, vectors = await drive(handle.embed.remote, texts, in_flight, len(texts))
                many, many_vectors = await drive(handle.embed_many.remote, chunks, 1, len(texts))
                many2, _ = await drive(handle.embed_many.remote, chunks, 2, len(texts))
                diff = max(np.abs(v - reference).max() for v in (vectors, many_vectors))
                for k, v in (("single", single), ("many", many), ("many2", many2), ("diff", diff)):
                    got[k].append(float(v))
            return got

        got = asyncio.run(run())
        row: dict[str, Any] = {k: statistics.median(v) for k, v in got.items() if k != "diff"}
        row["max_diff"] = max(got["diff"])  # the largest of any round
        row["threads"] = threads
        row["num_cpus"], row["max_batch"] = settings.embedder_num_cpus, config.max_batch_size
        print(
            f"bench: plain {row['plain']:6.1f}/s  embed {row['single']:6.1f}/s  "
            f"embed_many {row['many']:6.1f}/s (2 in flight {row['many2']:6.1f}/s)  "
            f"max |Δ| {row['max_diff']:.1e}  rounds {', '.join(f'{x:.0f}' for x in got['many'])}",
            flush=True,
        )
        serve.delete("embedder-bench")
    finally:
        with contextlib.suppress(Exception):
            serve.shutdown()
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return row


def embedder_section(r: dict[str, Any], facts: dict[str, Any], args: argparse.Namespace) -> str:
    """``r``: the deployment's row (``measure_embedder``); ``facts``: the plain
    figures with Ray not running, the texts, the load."""
    start, end = MARKS["embedder"]
    load, plain, rounds = facts["load"], facts["plain"], args.rounds
    lines = [
        *section_head(start, "search_bench.py", load[0]),
        f"- 1-minute load average after the part: {load[1]:.2f}.",
        f"- Texts: {facts['texts']:,} generated technical texts, {facts['tokens']:.0f} "
        "word-piece tokens on average; model all-MiniLM-L6-v2 (the packaged copy), CPU.",
        f"- Plain: torch threads {facts['threads']}; Serve: `num_cpus` {r['num_cpus']:g} per "
        f"replica, query batches of at most {r['max_batch']}, `embed` with {args.in_flight} in "
        f"flight; {rounds} rounds.",
        "",
        "| Deployment | torch threads (query / bulk) | plain, same rounds, texts/s | "
        "`embed` texts/s | ratio | `embed_many` texts/s | ratio | "
        "`embed_many`, 2 in flight, texts/s | ratio | max abs Δ vs plain |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| 1 replica, `num_cpus` {r['num_cpus']:g} (the default deployment) | "
        f"{r['threads']['query']} / {r['threads']['bulk']} | {r['plain']:.1f} | "
        f"{r['single']:.1f} | {r['single'] / r['plain']:.2f} | "
        f"{r['many']:.1f} | {r['many'] / r['plain']:.2f} | "
        f"{r['many2']:.1f} | {r['many2'] / r['plain']:.2f} | {r['max_diff']:.1e} |",
        "",
        f"Plain with Ray not running: {plain:.1f} texts/s in one call, {facts['chunked']:.1f} "
        f"in 64-text calls. Against the one-call figure, the deployment's `embed_many` is "
        f"{r['many'] / plain:.2f} times plain, 2 in flight {r['many2'] / plain:.2f} times.",
    ]
    return section_end(lines, "`.venv/bin/python -m benchmarks.search_bench --parts embedder`", end)


def part_embedder(args: argparse.Namespace) -> None:
    import torch

    texts = texts_for(N_BASIS)[: args.texts]
    model = load_model()
    # Mean word-piece tokens a text (special tokens included).
    lengths = [len(model.tokenizer(t)["input_ids"]) for t in texts[:500]]
    facts: dict[str, Any] = {"texts": len(texts), "tokens": sum(lengths) / len(lengths)}
    load0 = os.getloadavg()[0]
    encode(model, texts[:64])  # warm-up
    t0 = time.perf_counter()
    reference = encode(model, texts)
    facts["plain"] = len(texts) / (time.perf_counter() - t0)
    facts["chunked"] = plain_per_s(model, texts)
    facts["threads"] = torch.get_num_threads()
    print(
        f"bench: plain encode {facts['plain']:.1f} texts/s ({facts['threads']} torch threads, "
        f"{facts['tokens']:.0f} tokens a text); in 64-text calls {facts['chunked']:.1f} texts/s",
        flush=True,
    )
    basis_vectors(model)  # cached for the other parts
    query_vectors(model)
    row = measure_embedder(model, texts, reference, args.in_flight, args.rounds)
    facts["load"] = load_pair(load0)
    publish(embedder_section(row, facts, args), *MARKS["embedder"], args.no_docs)
