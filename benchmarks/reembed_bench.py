"""`cairn reembed` on 10,000 patterns against plain ``SentenceTransformer.encode``
of the same texts on the same cores, one run per ``--precisions``, in a fresh
state folder (docs/benchmarks.md, "Re-embedding throughput").

    .venv/bin/python -m benchmarks.reembed_bench [--rows 2000] [--no-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.corpus import bench_database, connect, copy_rows, job_env, vacuum, words
from benchmarks.harness import publish, section_head

START_MARK = "<!-- reembed-bench:start -->"
END_MARK = "<!-- reembed-bench:end -->"
SEED = 20261121
PLAIN_BATCH = 64


TECH = words(
    "Postgres Redis Kafka Kubernetes Docker Terraform nginx FastAPI Django Flask React "
    "TypeScript Rust Go Python Celery RabbitMQ Elasticsearch S3 Lambda gRPC GraphQL OAuth2 "
    "JWT WebSocket Prometheus Grafana OpenTelemetry Airflow Spark pandas NumPy PyTorch FAISS "
    "Ray SQLAlchemy Alembic pytest GitHub-Actions Helm Envoy Vault Consul SQLite DuckDB"
)
VERBS = words(
    "retry cache shard batch stream index validate migrate deploy monitor throttle paginate "
    "serialize compress encrypt rotate replicate debounce profile benchmark schedule"
)
NOUNS = words(
    "requests connections queries jobs events messages tokens secrets logs metrics traces "
    "uploads webhooks sessions migrations indexes workers replicas partitions snapshots "
    "embeddings rows files images payments notifications"
)
ADJECTIVES = words(
    "flaky slow large concurrent idempotent stale hot cold expensive nested partial "
    "duplicate out-of-order long-running rate-limited"
)
SENTENCES = (
    "Use {tech} to {verb} {adj} {noun} before they reach the {tech2} layer.",
    "When {noun} become {adj}, {verb} them in batches and keep a dead-letter queue.",
    "The trick is to {verb} {noun} once, store the result in {tech}, and reuse it.",
    "Measure first: {adj} {noun} usually come from a missing index in {tech}.",
    "A small wrapper around {tech} lets you {verb} {noun} without touching callers.",
    "Do not {verb} {noun} inside the request path; hand them to a {tech} worker.",
    "Set timeouts on every call to {tech2} and {verb} the {adj} {noun} with jitter.",
    "Keep the {noun} immutable, version them, and {verb} with a background job.",
    "In {tech}, prefer explicit transactions so that {adj} {noun} cannot leak.",
    "Log the ids of {adj} {noun} so that you can {verb} them again after a crash.",
)


def paragraph(rng: random.Random, chars: int) -> str:
    """Sentences of SENTENCES, filled in, until ``chars`` characters."""
    parts: list[str] = []
    while sum(len(p) + 1 for p in parts) < chars:
        tech, tech2 = rng.sample(TECH, 2)
        template, verb, noun = rng.choice(SENTENCES), rng.choice(VERBS), rng.choice(NOUNS)
        adj = rng.choice(ADJECTIVES)
        parts.append(template.format(tech=tech, tech2=tech2, verb=verb, noun=noun, adj=adj))
    return " ".join(parts)


def pattern_row(rng: random.Random, i: int, author: uuid.UUID) -> tuple[Any, ...]:
    """One pattern whose embedded text is 300-1,500 characters long."""
    verb, noun, tech = rng.choice(VERBS), rng.choice(NOUNS), rng.choice(TECH)
    title = f"{verb.capitalize()} {rng.choice(ADJECTIVES)} {noun} with {tech} ({i})"
    description = paragraph(rng, rng.randint(60, 160))
    tags, stack = rng.sample(NOUNS, 2), rng.sample(TECH, 2)
    fixed = len(title) + len(description) + len(", ".join(tags + stack)) + 3
    content = paragraph(rng, max(40, rng.randint(300, 1500) - fixed))
    return (uuid.UUID(int=rng.getrandbits(128), version=4), author, title, f"reembed-bench-{i}",
            description, content, tags, stack)  # fmt: skip


def seed(database_url: str, rows: int) -> None:
    rng = random.Random(SEED)
    author = uuid.UUID(int=rng.getrandbits(128), version=4)
    with connect(database_url) as conn:
        conn.execute(
            "INSERT INTO agents (id, username, name, display_name) VALUES (%s, %s, %s, %s)",
            (author, "reembed_bench_author", "Bench Author", "Bench Author"),
        )
        columns = "id, author_id, title, slug, description, content, use_case_tags, tech_stack"
        copy_rows(conn, f"patterns ({columns})", (pattern_row(rng, i, author) for i in range(rows)))
        # Written by hand, not by the API: the triggers' queue is not ours to work off.
        conn.execute("TRUNCATE search_jobs")
        vacuum(conn, "patterns")


def embedded_texts(database_url: str) -> tuple[list[uuid.UUID], list[str]]:
    """The ids and exact texts the job embeds (the same SQL)."""
    from storage.models.search import PATTERNS

    with connect(database_url) as conn:
        found = conn.execute(
            f"SELECT id, {PATTERNS.text_sql} FROM patterns t "
            f"WHERE {PATTERNS.visible_sql} ORDER BY id"
        ).fetchall()
    return [r[0] for r in found], [r[1] for r in found]


def stored_vectors(database_url: str, model: str, ids: list[uuid.UUID]) -> np.ndarray:
    from embeddings.encoder import from_bytes

    sql = "SELECT item_id, vector FROM embeddings WHERE kind = 'pattern' AND model = %s"
    with connect(database_url) as conn:
        found = dict(conn.execute(sql, (model,)).fetchall())
    return from_bytes([bytes(found[i]) for i in ids])


def measure_plain(texts: list[str]) -> dict[str, Any]:
    """SentenceTransformer.encode, batch 64, torch's default threads (all cores)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from embeddings.encoder import resolve

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = SentenceTransformer(resolve("all-MiniLM-L6-v2"), device="cpu")
    model.encode(texts[:PLAIN_BATCH], batch_size=PLAIN_BATCH)  # warm-up
    t0 = time.perf_counter()
    vectors = model.encode(texts, batch_size=PLAIN_BATCH, normalize_embeddings=True)
    seconds = time.perf_counter() - t0
    threads, vectors = torch.get_num_threads(), np.asarray(vectors, dtype=np.float32)
    return {
        "seconds": seconds,
        "rows_per_s": len(texts) / seconds,
        "threads": threads,
        "vectors": vectors,
    }


def run_reembed(env: dict[str, str], args: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "serve_app.launch.cli", "reembed", "--json", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"cairn reembed failed ({done.returncode}):\n{done.stderr[-4000:]}")
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, **summary}


def docs_section(result: dict[str, Any], load_before: float) -> str:
    plain, jobs, rerun, loads = result["plain"], result["jobs"], result["rerun"], result["loads"]
    rows, first = result["rows"], next(iter(jobs.values()))
    lines = section_head(START_MARK, "reembed_bench.py", load_before)
    lines += [
        f"- 1-minute load average after the run: {result['load_after']:.2f}.",
        f"- Corpus: {rows:,} published patterns (plus their author, also searchable), "
        f"embedded text {result['chars_min']:,}-{result['chars_max']:,} characters "
        f"(mean {result['chars_mean']:,.0f}).",
        f"- `cairn reembed {' '.join(result['args'])} --precision P`: a local Ray, "
        f"{result['actors']}; plain: one process, torch's default "
        f"{plain['threads']} threads, `batch_size={PLAIN_BATCH}`, fp32.",
        "",
        "| Run | load before | rows | seconds | rows/s | vs plain | vectors vs plain |",
        "|---|---:|---:|---:|---:|---:|---|",
        f"| plain `SentenceTransformer.encode` (model loaded) | {loads['plain']:.2f} | "
        f"{rows:,} | {plain['seconds']:.1f} | {plain['rows_per_s']:,.1f} | 1.00 | |",
    ]
    for run, job in jobs.items():
        end_to_end = job["embedded"] / job["wall_s"]
        precision, _, note = run.partition(" ")
        label = f"`cairn reembed --precision {precision}`{' ' + note if note else ''}"
        vectors = (
            f"largest difference {job['max_abs_diff']:.1e}, smallest cosine {job['min_cosine']:.5f}"
        )
        head = f"{loads[run]:.2f} | {job['embedded']:,}"
        lines += [
            f"| {label}, embedding phase (select, read, encode, upsert) | {head} | "
            f"{job['embed_s']:.1f} | {job['rows_per_s']:,.1f} | "
            f"{job['rows_per_s'] / plain['rows_per_s']:.2f} | {vectors} |",
            f"| {label}, end to end (process, Ray, model load, passes, swap) | {head} | "
            f"{job['wall_s']:.1f} | {end_to_end:,.1f} | {end_to_end / plain['rows_per_s']:.2f} | |",
        ]
    lines += [
        f"| `cairn reembed` again (every row current: nothing to do) | | "
        f"{rerun['embedded']:,} | {rerun['wall_s']:.1f} | — | — | |",
        "",
        "Outside the passes: "
        + "; ".join(
            f"{p}: {j['startup_s']:.1f} s starting the actors (each loads the model) "
            f"of {j['wall_s'] - j['embed_s']:.1f} s"
            for p, j in jobs.items()
        )
        + " (the rest: Python, settings, the database, Ray's start and stop). "
        + f"Each row's stored hash is that of its text ({first['embedded']:,} rows).",
        END_MARK,
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reembed_bench")
    add = parser.add_argument
    add("--rows", type=int, default=10_000)
    add("--batch-size", type=int, default=256)
    add("--concurrency", type=int, default=len(os.sched_getaffinity(0)))
    add("--threads", type=int, default=1, help="torch threads per actor")
    add("--precisions", default="fp32,bf16", help="one run each on the same rows (fp32,bf16)")
    add("--no-docs", action="store_true", help="print only")
    add("--keep", action="store_true", help="keep the state folder")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    load_before = os.getloadavg()[0]
    state = Path(tempfile.mkdtemp(prefix="cairn-reembed-bench-"))
    try:
        url = bench_database(state)
        t0 = time.perf_counter()
        seed(url, args.rows)
        print(f"bench: {args.rows:,} patterns written in {time.perf_counter() - t0:.1f}s")
        ids, texts = embedded_texts(url)
        lengths = [len(t) for t in texts]

        loads, plain = {"plain": os.getloadavg()[0]}, measure_plain(texts)
        print(f"bench: plain encode: {plain['rows_per_s']:,.1f} rows/s ({plain['seconds']:.1f}s)")

        env = job_env(state)
        precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
        job_args = [
            "--batch-size", str(args.batch_size),
            "--concurrency", str(args.concurrency),
            "--num-cpus", "1",
            "--threads", str(args.threads),
            "--nice", "0",
        ]  # fmt: skip
        jobs: dict[str, dict[str, Any]] = {}
        # bf16 twice: first with its package compiled in the job (a new
        # machine's first job), then loading it from the cache (every later job).
        runs: list[str] = []
        for p in precisions:
            runs += [p, f"{p} (package cached)"] if p == "bf16" else [p]
        for run in runs:
            precision = run.split(" ")[0]
            if jobs:
                # The rows are current after the previous run: forget its
                # vectors so that this one embeds every row again.
                with connect(url) as conn:
                    conn.execute("DELETE FROM embeddings")
            loads[run] = os.getloadavg()[0]
            job = run_reembed(env, [*job_args, "--precision", precision])
            print(
                f"bench: cairn reembed ({run}): {job['rows_per_s']:,.1f} rows/s embedding "
                f"({job['embed_s']:.1f}s), {job['wall_s']:.1f}s end to end"
            )
            if job["embedded"] != args.rows + 1 or not job["complete"]:
                raise RuntimeError(f"the job embedded {job['embedded']} rows: {job}")
            stored = stored_vectors(url, "all-MiniLM-L6-v2", ids)
            job["max_abs_diff"] = float(np.max(np.abs(stored - plain["vectors"])))
            job["min_cosine"] = float(np.min(np.sum(stored * plain["vectors"], axis=1)))
            jobs[run] = job
        rerun = run_reembed(env, [*job_args, "--precision", precisions[-1]])
        print(f"bench: rerun: {rerun['embedded']} rows in {rerun['wall_s']:.1f}s")

        actors = f"{args.concurrency} actors x {args.threads} torch thread(s)"
        result = {
            "rows": args.rows, "actors": f"{actors}, batches of {args.batch_size}",
            "args": job_args, "chars_min": min(lengths), "chars_max": max(lengths),
            "chars_mean": sum(lengths) / len(lengths),
            "plain": {k: v for k, v in plain.items() if k != "vectors"},
            "jobs": jobs, "rerun": rerun, "load_after": os.getloadavg()[0], "loads": loads,
        }  # fmt: skip
        publish(docs_section(result, load_before), START_MARK, END_MARK, args.no_docs)
    finally:
        if not args.keep:
            from storage.embedded import stop_server

            stop_server(state)
            shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
