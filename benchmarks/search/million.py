"""Part ``search`` with ``--embed`` ("Search at a large corpus"): seed and
embed ``--patterns`` patterns (``bulk.py``, resumable), then through ``cairn
run`` the replicas' build times, every process's memory, /api/search at
``--connections`` and at one, and an Api replica's graph's recall in process."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import harness
from benchmarks.corpus import connect, queries_for, vacuum
from benchmarks.search.bulk import embed_patterns, load_vectors, seed_patterns
from benchmarks.search.config import BENCH_ENV, N_QUERIES, PORT
from benchmarks.search.index import graph_recall
from benchmarks.search.latency import SearchRun, measure_search, wait_search_ready

BULK_STATE_DIR = harness.ROOT / ".cairn" / "bench-search-bulk"
START, END = "<!-- search-bulk-bench:start -->", "<!-- search-bulk-bench:end -->"
RECALL_QUERIES = 300


def stack_memory(root: int, state_dir: Path) -> list[tuple[str, int, float, float]]:
    """(command, pid, RSS MiB, PSS MiB) of the stack's processes, largest RSS
    first: ``root`` (the ``cairn run`` process), the processes of its state
    folder (the embedded Postgres), and all their descendants (Ray's daemons
    and workers, Postgres's backends)."""
    import psutil

    procs: dict[int, Any] = {}
    for proc in [psutil.Process(root), *harness.bench_processes(state_dir)]:
        with contextlib.suppress(psutil.Error):
            procs.update((p.pid, p) for p in [proc, *proc.children(recursive=True)])
    rows = []
    for pid, proc in procs.items():
        with contextlib.suppress(psutil.Error):
            memory = proc.memory_full_info()
            command = " ".join(" ".join(proc.cmdline()).split())[:70]
            rows.append((command, pid, memory.rss / 2**20, memory.pss / 2**20))
    return sorted((r for r in rows if r[2] > 0), key=lambda r: -r[2])


def replica_builds(base: str, polls: int = 32) -> dict[str, list[float]]:
    """Build seconds of each Api replica's copies (the vector copy's and the
    BM25 index's), as the distinct values seen over ``polls`` health answers."""
    vector: set[float] = set()
    lexical: set[float] = set()
    for _ in range(polls):
        body = harness.health(base) or {}
        replica = (body.get("search") or {}).get("replica") or {}
        if "build_s" in replica.get("counters", {}):
            vector.add(float(replica["counters"]["build_s"]))
        counters = (body.get("lexical") or {}).get("counters") or {}
        if "build_s" in counters:
            lexical.add(float(counters["build_s"]))
    return {"vector": sorted(vector), "lexical": sorted(lexical)}


def stored_vectors(database_url: str, model: str) -> np.ndarray:
    """Every pattern vector under ``model``, by item id."""
    from embeddings.encoder import from_bytes

    chunks = []
    with connect(database_url) as conn, conn.cursor(name="vectors") as cur:
        cur.itersize = 50_000
        cur.execute(
            "SELECT vector FROM embeddings WHERE kind = 'pattern' AND model = %s ORDER BY item_id",
            (model,),
        )
        while rows := cur.fetchmany(50_000):
            chunks.append(from_bytes([r[0] for r in rows]))
    return np.ascontiguousarray(np.vstack(chunks), dtype=np.float32)


def semantic_recall(
    database_url: str, encoder: Any, config: Any, n_queries: int = RECALL_QUERIES
) -> dict[str, float]:
    """An Api replica's graph (``config``) built over the stored vectors:
    ``graph_recall`` with ``n_queries`` queries."""
    data = stored_vectors(database_url, encoder.model)
    queries = encoder.encode(queries_for(n_queries), threads=os.cpu_count())
    return {"n": float(len(data)), **graph_recall(config, data, queries)}


def part_million(args: argparse.Namespace) -> None:
    env, settings, prepared = harness.prepare_here(
        {**BENCH_ENV, "CAIRN_STATE_DIR": str(BULK_STATE_DIR)}
    )
    url = prepared.database_url
    facts: dict[str, Any] = {}
    facts.update(seed_patterns(url, args.patterns))
    if args.vectors_from:
        facts.update(load_vectors(url, settings.embedding_model, args.vectors_from))
    facts.update(
        embed_patterns(
            url,
            settings.embedding_model,
            batch=args.embed_batch,
            threads=args.embed_threads,
            device=args.embed_device,
        )
    )
    with connect(url) as conn:
        vacuum(conn, "patterns", "agents", "embeddings")
    if args.seed_only:
        print("bench: --seed-only: corpus ready; not measuring", flush=True)
        return
    wrk = harness.ensure_wrk()
    wrk_ver = harness.wrk_version(wrk)
    load0 = os.getloadavg()[0]
    with (
        harness.serve_running(PORT, env, BULK_STATE_DIR, keep_postgres=True) as serve,
        tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp,
    ):
        t0 = time.monotonic()
        stats = wait_search_ready(serve.base, args.patterns, timeout=900 + args.patterns / 100)
        facts["ready_s"] = serve.ready_s + time.monotonic() - t0
        facts["vector_index_load_s"] = stats.get("counters", {}).get("load_s")
        builds = replica_builds(serve.base)
        assert serve.proc is not None
        memory = stack_memory(serve.proc.pid, BULK_STATE_DIR)
        for name, pid, rss, pss in memory:
            print(f"bench: RSS {rss:8.0f} MiB  PSS {pss:8.0f}  {pid:>7}  {name}", flush=True)
        concurrent = measure_search(serve.base, wrk, Path(tmp), args)
        sequential = measure_search(
            serve.base,
            wrk,
            Path(tmp),
            argparse.Namespace(**{**vars(args), "connections": 1}),
            new_from_end=True,
        )
    from embeddings.encoder import Encoder

    encoder = Encoder(settings.embedding_model, "cpu", cache_dir=settings.state_path / "models")
    # The IndexConfig of an Api replica's copy (serve_app/runtime/index_copies/vectors.py).
    config = settings.indexer_config(settings.database_url or "").index
    config = replace(config, hnsw_codes=settings.search_replica_codes)
    recall = semantic_recall(url, encoder, config)
    print(f"bench: semantic (replica graph in process): {recall}", flush=True)
    section = million_section(
        args, facts, builds, memory, concurrent, sequential, recall, wrk_ver, load0
    )
    harness.publish(section, START, END, args.no_docs)


def million_section(
    args: argparse.Namespace,
    facts: dict[str, Any],
    builds: dict[str, list[float]],
    memory: list[tuple[str, int, float, float]],
    concurrent: list[SearchRun],
    sequential: list[SearchRun],
    recall: dict[str, float],
    wrk_ver: str,
    load0: float,
) -> str:
    lines = [
        *harness.section_head(START, "search_bench.py --embed", load0),
        f"- 1-minute load average after the run: {os.getloadavg()[0]:.2f}; {wrk_ver}.",
        f"- Corpus: {args.patterns:,} patterns in `.cairn/bench-search-bulk`, each embedded "
        f"by the ONNX encoder or loaded from vectors embedded elsewhere (this run embedded "
        f"{facts.get('embedded', 0):,.0f} at {facts.get('rows_per_s', 0):.1f} rows/s and "
        f"loaded {facts.get('loaded', 0):,.0f}; the rest were there from earlier runs; "
        '"The Embedder on a GPU").',
        f"- Ready {facts['ready_s']:.0f} s after start; the VectorIndex loaded in "
        f"{facts.get('vector_index_load_s') or 0:.0f} s. Build seconds seen per Api replica: "
        f"vector copy {builds['vector']}, BM25 {builds['lexical']}.",
        "",
        "| Process (after the builds) | pid | RSS MiB | PSS MiB |",
        "|---|---:|---:|---:|",
        *(f"| `{name}` | {pid} | {rss:,.0f} | {pss:,.0f} |" for name, pid, rss, pss in memory),
        "",
        f"Hybrid and full text through Serve at {args.connections} connections "
        f"({N_QUERIES} queries):",
        "",
        *harness.serve_table([(r.label, r.result) for r in concurrent]),
        "",
        "The same, one connection (sequential):",
        "",
        *harness.serve_table([(r.label, r.result) for r in sequential]),
        "",
        f"Semantic (vector only), an Api replica's graph built in this process over the "
        f"{recall['n']:,.0f} stored vectors (M {recall['m']:.0f}, efConstruction "
        f"{recall['ef_construction']:.0f}, ef {recall['ef_used']:,.0f}: {recall['ef']:.0f} or one "
        f"candidate per {recall['nodes_per_ef']:,.0f} nodes, the service's settings): "
        f"built in {recall['build_s']:.0f} s, {recall['formula']:.0f} MiB by the formula; "
        f"recall@10 against exact search {recall['recall@10']:.3f} ({RECALL_QUERIES} "
        f"queries); p50 {recall['p50_ms']:.2f} ms, p99 {recall['p99_ms']:.2f} ms a query.",
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.search_bench --parts search "
        f"--patterns {args.patterns} --embed` (resumable; `--seed-only` to seed and embed only).",
        END,
    ]
    return "\n".join(lines) + "\n"
