"""Part ``search``: /api/search latency at 100,000 patterns through
``cairn run`` with wrk (semantic, semantic with every query new, full
text), and its docs section."""

from __future__ import annotations

import argparse
import functools
import gc
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from benchmarks import harness
from benchmarks.corpus import queries_for
from benchmarks.harness import THREADS
from benchmarks.search import config
from benchmarks.search.seeding import seed, selectivity
from benchmarks.search.vectors import basis_vectors, derived_vectors

WRK_SCRIPT = """\
local paths = {{{paths}}}
local nthreads = {threads}
local counter = 0
local threads = {{}}
fulltext = 0
function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", counter)
  counter = counter + 1
end
function init(args)
  n = 0
end
request = function()
  local k = n * nthreads + tid
  n = n + 1
  return wrk.format("GET", paths[(k % #paths) + 1])
end
response = function(status, headers, body)
  if string.find(body, '"mode":"fulltext"', 1, true)
     or string.find(body, '"mode": "fulltext"', 1, true) then
    fulltext = fulltext + 1
  end
end
done = function(summary, latency, requests)
  local n = 0
  for _, t in ipairs(threads) do n = n + t:get("fulltext") end
  io.write(string.format("fulltext_responses: %d\\n", n))
end
"""


# Answers in a row from /api/health whose replica has its BM25 index and its
# copy of the vector index built: each answer comes from one Api replica
# (HAProxy spreads them), so a run of them says every replica is ready.
LEXICAL_READY_IN_A_ROW = 12


def wait_search_ready(base: str, expected: int, timeout: float = 900.0) -> dict[str, Any]:
    """/api/health's search stats once the vector index holds every pattern, no
    job waits, and every Api replica's BM25 index and vector copy are built."""

    def holds_all(part: dict[str, Any] | None) -> bool:
        return part is None or bool(
            part.get("ready") and part.get("indexes", {}).get("pattern", 0) >= expected
        )

    deadline, in_a_row = time.monotonic() + timeout, 0
    last: Any = None
    while time.monotonic() < deadline:
        body = harness.health(base)
        if body is None or not isinstance(body.get("search"), dict):
            last, in_a_row = body, 0
            time.sleep(2.0)
            continue
        last = body["search"]
        built = holds_all(body.get("lexical")) and holds_all(last.get("replica"))
        in_a_row = in_a_row + 1 if built else 0
        if (
            last.get("ready")
            and last.get("pending_jobs") == 0
            and last.get("indexes", {}).get("pattern", {}).get("size", 0) >= expected
            and in_a_row >= LEXICAL_READY_IN_A_ROW
        ):
            return dict(last)
        time.sleep(0.5 if in_a_row else 2.0)
    raise RuntimeError(f"search index not ready after {timeout:.0f}s: {last}")


@dataclass
class SearchRun:
    label: str
    result: harness.WrkResult
    fulltext_responses: int


def measure_search(
    base: str, wrk: str, tmp: Path, args: argparse.Namespace, new_from_end: bool = False
) -> list[SearchRun]:
    """``new_from_end``: the "every query new" run takes its queries from the
    end of its list, so a second call (another connection count) still asks
    queries no earlier run asked (unless the two together ask 4,000)."""
    every = queries_for(config.N_QUERIES + config.N_NEW_QUERIES)
    queries, new = every[: config.N_QUERIES], every[config.N_QUERIES :]
    half = config.N_NEW_QUERIES // 2
    fresh = new[half:][::-1] if new_from_end else new[half:]
    threads = min(THREADS, args.connections)
    # wrk's request timeout raised from 2 s to 10 s: slow answers are measured, not errors.
    go = functools.partial(harness.run_wrk, wrk, connections=args.connections, timeout_s=10)
    out: list[SearchRun] = []
    for semantic, label, measured, warm in (
        (True, " (semantic)", queries, queries),
        (True, " (semantic, every query new)", fresh, new[:half]),
        (False, "&use_semantic=false", queries, queries),
    ):
        suffix, want = ("", "semantic") if semantic else ("&use_semantic=false", "fulltext")
        paths, warm_paths = (
            [f"/api/search?q={quote(q)}&type=patterns&limit=20{suffix}" for q in texts]
            for texts in (measured, warm)
        )
        for path in warm_paths[:5]:
            status, body = harness.http_json("GET", base + path, timeout=30)
            if status != 200 or body.get("mode") != want:
                raise RuntimeError(f"{path} answered {status} {body!r:.200}, not in {want} mode")
        name, label = f"run{len(out)}", "GET /api/search?q=…" + label
        for lua, texts in ((tmp / f"{name}-warm.lua", warm_paths), (tmp / f"{name}.lua", paths)):
            lua.write_text(WRK_SCRIPT.format(paths=harness.lua_list(texts), threads=threads))
        if args.warmup:
            go(base + paths[0], duration=args.warmup, script=tmp / f"{name}-warm.lua")
        result, raw = go(base + paths[0], duration=args.duration, script=tmp / f"{name}.lua")
        found = re.search(r"fulltext_responses: (\d+)", raw)
        fell_back = int(found.group(1)) if found else -1
        harness.print_run(label, result, raw, f"  full-text answers {fell_back}")
        out.append(SearchRun(label, result, fell_back))
    return out


def search_section(
    runs: list[SearchRun],
    stats: dict[str, Any],
    facts: dict[str, Any],
    args: argparse.Namespace,
    wrk_ver: str,
    load: tuple[float, float],
) -> str:
    from serve_app.settings import get_settings

    start, end = config.MARKS["search-latency"]
    pattern = stats["indexes"]["pattern"]
    index = get_settings().indexer_config("").index  # what the service ran with
    lines = [
        *harness.section_head(start, "search_bench.py", load[0]),
        f"- 1-minute load average after the part: {load[1]:.2f}.",
        f"- Index at start: {pattern['size']:,} pattern vectors, kind `{pattern['kind']}` "
        f"(`flat_max` {index.flat_max:,}, `hnsw_max` {index.hnsw_max:,}, HNSW ef "
        f"{index.hnsw_ef_search}), {pattern['memory_bytes'] / 2**20:.0f} MiB by the formula; "
        f"the VectorIndex rebuilt it from Postgres in {stats['counters']['load_s']:.1f} s "
        f"(its `load_s`: scan, decode, FAISS build, stale-row check); service ready in "
        f"{facts['ready_s']:.0f} s.",
        f"- Load: {wrk_ver}, `-t{THREADS} -c{args.connections} -d{args.duration}s --timeout "
        f"10s --latency` after a {args.warmup} s warm-up.",
        f"- The limit on a cache miss: one query alone encodes in {facts['encode_ms']:.1f} ms "
        "on one torch thread in the benchmark's process (median of 200; the Embedder encodes "
        f"queries on one thread), so one Embedder replica embeds at most "
        f"{1000 / facts['encode_ms']:.0f} queries/s, less the CPU the API, Postgres and "
        "wrk take from the same 2 cores.",
        f"- Postgres full text (what ranks words while a replica's BM25 index is still "
        f"being built): over the first 40 queries any word matches a median "
        f"{facts['loose']:.1%} of the patterns, every word {facts['strict']:.2%}. Postgres "
        f"ranks at most {facts['rank_candidates']:,} rows per stage "
        "(`storage.repositories.search.fulltext`): the every-word matches, then up to "
        f"{facts['rank_candidates']:,}/(number of words) rows per query word. On those 40 "
        f"queries, one at a time, depth 50: median {facts['fulltext_ms']:.0f} ms, slowest "
        f"{facts['fulltext_max_ms']:.0f} ms.",
        "- Answers that fell back to full text during the semantic run: "
        f"{runs[0].fulltext_responses}.",
        "",
        *harness.serve_table([(r.label, r.result) for r in runs]),
    ]
    return harness.section_end(
        lines, "`.venv/bin/python -m benchmarks.search_bench --parts search`", end
    )


def part_search(args: argparse.Namespace) -> None:
    wrk = harness.ensure_wrk()
    env, settings, prepared = harness.prepare_here(config.BENCH_ENV)
    basis = basis_vectors()
    vectors = derived_vectors(basis, config.N_PATTERNS)
    seed(prepared.database_url, settings.embedding_model, basis, vectors)
    del vectors
    matched = selectivity(prepared.database_url, queries_for(config.N_QUERIES)[:40])
    matched["encode_ms"] = query_encode_ms(settings.embedding_model)
    print(f"bench: full text and the query encoder: {matched}", flush=True)
    gc.collect()
    load0 = os.getloadavg()[0]
    with (
        harness.serve_running(config.PORT, env, config.STATE_DIR, keep_postgres=True) as serve,
        tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp,
    ):
        t0 = time.monotonic()
        stats = wait_search_ready(serve.base, config.N_PATTERNS)
        facts = {"ready_s": serve.ready_s + time.monotonic() - t0, **matched}
        print(f"bench: index {stats['indexes']['pattern']}, {stats['counters']}", flush=True)
        runs = measure_search(serve.base, wrk, Path(tmp), args)
    load = config.load_pair(load0)
    section = search_section(runs, stats, facts, args, harness.wrk_version(wrk), load)
    harness.publish(section, *config.MARKS["search-latency"], args.no_docs)


def query_encode_ms(model: str, n: int = 200) -> float:
    """The median ms to encode one query alone on one torch thread, as the
    Embedder does: the limit of semantic search on a cache miss."""
    import torch

    from embeddings.encoder import Encoder

    encoder = Encoder(model, "cpu")
    queries = queries_for(config.N_QUERIES + config.N_NEW_QUERIES + n)[-n:]
    threads = torch.get_num_threads()
    try:
        encoder.encode(queries[:5], threads=1)
        times = []
        for q in queries:
            t0 = time.perf_counter()
            encoder.encode([q], threads=1)
            times.append(1000 * (time.perf_counter() - t0))
    finally:
        torch.set_num_threads(threads)
    del encoder
    gc.collect()
    return float(np.median(times))
