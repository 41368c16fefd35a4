"""`cairn rescreen` as the CLI runs it (a local Ray, a pool of actors) over a
corpus of real text whose items an older ruleset screened: items/s, and items
per CPU-second of the job's processes (docs/benchmarks.md, "Rescreen
throughput"). The issue's target: >= 500 items/s per core.

    .venv/bin/python -m benchmarks.rescreen_bench [--patterns 4000] [--no-docs]

The corpus: the search-evaluation sets' documents (benchmarks/search_eval:
man pages and docstrings as a pattern's markdown content, code and parameter
docs as its code example), one pattern per document pair, plus questions and
answers with the same text as bodies; every row's ``safety`` set to an older
ruleset, as after a ruleset bump. The CPU of the job is sampled from /proc
(psutil) every 0.2 s: the CLI's process and its descendants (the driver,
Ray's processes, the actors), and apart from them Postgres's.
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
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from benchmarks.corpus import bench_database, connect, copy_rows, job_env, vacuum
from benchmarks.harness import publish, section_head
from benchmarks.safety.cases import eval_documents

START_MARK = "<!-- rescreen-bench:start -->"
END_MARK = "<!-- rescreen-bench:end -->"
SEED = 20261129
OLD: dict[str, object] = {
    "labels": [],
    "reasons": [],
    "screened_at": None,
    "ruleset_version": "2020.01.01",
}


def seed(database_url: str, patterns: int, questions: int) -> dict[str, Any]:
    """Patterns, questions and answers of real text, all stale; their sizes."""
    docs = [(i, {n: t for n, t, _ in fields}) for i, fields in eval_documents()]
    prose = [d for i, d in docs if i.startswith("d") and d["content"]]
    code = [d for i, d in docs if not i.startswith("d") and d["content"]]
    rng = random.Random(SEED)
    author = uuid.UUID(int=rng.getrandbits(128), version=4)
    old = json.dumps(OLD)
    sizes: list[int] = []

    def pattern(i: int) -> tuple[Any, ...]:
        doc, example = rng.choice(prose), rng.choice(code)
        title = (doc["title"] or f"Pattern {i}")[:180]
        description = doc["description"] or doc["content"][:300]
        examples = {"main": {"language": "python", "code": example["content"]}}
        body, code_text = doc["content"], example["content"]
        sizes.append(len(title) + len(description) + len(body) + len(code_text))
        item_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        slug = f"rescreen-bench-{i}"
        return (item_id, author, title, slug, description, body, json.dumps(examples), old)

    with connect(database_url) as conn:
        conn.execute(
            "INSERT INTO agents (id, username, name, display_name) VALUES (%s, %s, %s, %s)",
            (author, "rescreen_bench_author", "Bench Author", "Bench Author"),
        )
        columns = "id, author_id, title, slug, description, content, code_examples, safety"
        copy_rows(conn, f"patterns ({columns})", (pattern(i) for i in range(patterns)))
        question_ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(questions)]
        asked = rng.choices(prose, k=questions)
        question_rows = [
            (q, author, (d["title"] or "A question")[:180], f"rescreen-bench-q{i}",
             d["description"] or d["content"][:500], old)
            for i, (q, d) in enumerate(zip(question_ids, asked, strict=True))
        ]  # fmt: skip
        copy_rows(conn, "questions (id, author_id, title, slug, body, safety)", question_rows)
        answer_rows = [
            (uuid.UUID(int=rng.getrandbits(128), version=4), q, author,
             rng.choice(prose)["content"], old)
            for q in question_ids
        ]  # fmt: skip
        copy_rows(conn, "answers (id, question_id, author_id, body, safety)", answer_rows)
        # Written by hand, not by the API: the triggers' queue is not ours to work off.
        conn.execute("TRUNCATE search_jobs")
        vacuum(conn, "patterns", "questions", "answers")
    return {"pattern_chars_mean": sum(sizes) / len(sizes), "pattern_chars_max": max(sizes)}


class CpuSampler:
    """CPU seconds of a process tree (and of Postgres's processes), sampled:
    each process's last reading before it ended counts."""

    def __init__(self, root: int, postgres: list[int]) -> None:
        self.root, self.postgres_roots = root, postgres
        self.job: dict[int, float] = {}
        self.actors: set[int] = set()
        self.db: dict[int, float] = {}
        self.db_start = {p.pid: _cpu(p) for p in _tree(postgres)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.2)

    def sample(self) -> None:
        for p in _tree([self.root]):
            self.job[p.pid] = max(self.job.get(p.pid, 0.0), _cpu(p))
            if p.pid not in self.actors and "RescreenWorker" in _title(p):
                self.actors.add(p.pid)
        for p in _tree(self.postgres_roots):
            self.db[p.pid] = max(self.db.get(p.pid, 0.0), _cpu(p) - self.db_start.get(p.pid, 0.0))

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _tree(roots: list[int]) -> list[psutil.Process]:
    found = []
    for pid in roots:
        try:
            root = psutil.Process(pid)
            found += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return found


def _title(p: psutil.Process) -> str:
    """A Ray worker's process title names its actor (``ray::RescreenWorker``)."""
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def _cpu(p: psutil.Process) -> float:
    try:
        t = p.cpu_times()
        return float(t.user + t.system)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def postmaster(state: Path) -> list[int]:
    """The embedded Postgres's postmaster (its backends are its children)."""
    pids = []
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "postgres" in (p.info["name"] or "") and str(state) in cmd:
            pids.append(p.pid)
    return pids


def run_rescreen(env: dict[str, str], args: list[str], postgres: list[int]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "serve_app.launch.cli", "rescreen", "--json", *args]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with CpuSampler(proc.pid, postgres) as cpu:
        out, err = proc.communicate(timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"cairn rescreen failed ({proc.returncode}):\n{err[-4000:]}")
    summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    job_cpu, db_cpu = sum(cpu.job.values()), sum(cpu.db.values())
    actor_cpu = sum(cpu.job[pid] for pid in cpu.actors)
    return {
        "wall_s": wall, "job_cpu_s": job_cpu, "actor_cpu_s": actor_cpu, "db_cpu_s": db_cpu,
        "actors_seen": len(cpu.actors), **summary,
    }  # fmt: skip


def docs_section(result: dict[str, Any], load_before: float) -> str:
    run, rerun = result["run"], result["rerun"]
    items = run["items"]
    net = max(run["job_cpu_s"] - rerun["job_cpu_s"], 1e-9)
    lines = section_head(START_MARK, "rescreen_bench.py", load_before)
    lines += [
        f"- Load average (1 min) before the run: {result['load_run']:.2f}; after: "
        f"{result['load_after']:.2f}.",
        f"- Corpus: {result['patterns']:,} patterns (title, description, man-page or docstring "
        f"markdown, one code example; mean {result['pattern_chars_mean']:,.0f} characters, "
        f"largest {result['pattern_chars_max']:,}), {result['questions']:,} questions and as "
        "many answers, text of the search-evaluation sets; every row stale (an older ruleset).",
        f"- `cairn rescreen {' '.join(result['args'])}`: a local Ray started by the command, "
        f"{result['concurrency']} actors (the command's default `--num-cpus` 0.1 each; each is a "
        "process that uses a core).",
        "",
        "| Run | items | outcomes | seconds (job) | items/s (job) | seconds end to end "
        "| job CPU-s | the actors' CPU-s | Postgres CPU-s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
        f"| `cairn rescreen` | {items:,} | {run['outcomes']} | {run['seconds']:.1f} | "
        f"{run['items_per_s']:,.1f} | {run['wall_s']:.1f} | {run['job_cpu_s']:.1f} | "
        f"{run['actor_cpu_s']:.1f} | {run['db_cpu_s']:.1f} |",
        f"| again (nothing stale) | {rerun['items']:,} | | {rerun['seconds']:.1f} | | "
        f"{rerun['wall_s']:.1f} | {rerun['job_cpu_s']:.1f} | {rerun['actor_cpu_s']:.1f} | "
        f"{rerun['db_cpu_s']:.1f} |",
        "",
        f"Items per CPU-second (the per-core figure the target names): "
        f"{items / run['actor_cpu_s']:,.0f} of the actors' CPU (they screen and write; "
        "their start-up included), "
        f"{items / net:,.0f} of the whole job's net of its fixed cost (the job's CPU less "
        f"the rerun's: Ray's start and stop, the driver), "
        f"{items / (run['job_cpu_s'] + run['db_cpu_s']):,.0f} of everything including "
        "Ray's start and Postgres.",
        "",
        "Job CPU: the command's process and its descendants (driver, Ray's GCS, raylet "
        "and workers, the actors), sampled every 0.2 s (a process's last 0.2 s may be "
        "missed). The actors are the Ray workers titled `RescreenWorker`.",
        END_MARK,
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rescreen_bench")
    add = parser.add_argument
    add("--patterns", type=int, default=4000)
    add("--questions", type=int, default=1000, help="and as many answers")
    add("--batch-size", type=int, default=200)
    add("--concurrency", type=int, default=len(os.sched_getaffinity(0)))
    add("--no-docs", action="store_true", help="print only")
    add("--keep", action="store_true", help="keep the state folder")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    load_before = os.getloadavg()[0]
    state = Path(tempfile.mkdtemp(prefix="cairn-rescreen-bench-"))
    try:
        url = bench_database(state)
        t0 = time.perf_counter()
        sizes = seed(url, args.patterns, args.questions)
        print(f"bench: corpus written in {time.perf_counter() - t0:.1f}s", flush=True)
        env = job_env(state)
        job_args = ["--batch-size", str(args.batch_size), "--concurrency", str(args.concurrency)]
        postgres = postmaster(state)
        load_run = os.getloadavg()[0]
        run = run_rescreen(env, job_args, postgres)
        expected = args.patterns + 2 * args.questions
        if run["items"] != expected or not run["complete"]:
            raise RuntimeError(f"the job rescreened {run['items']} of {expected} items: {run}")
        print(
            f"bench: cairn rescreen: {run['items']:,} items, {run['items_per_s']:,.1f} items/s, "
            f"job CPU {run['job_cpu_s']:.1f}s, Postgres CPU {run['db_cpu_s']:.1f}s",
            flush=True,
        )
        rerun = run_rescreen(env, job_args, postgres)
        result = {
            "patterns": args.patterns, "questions": args.questions, "args": job_args,
            "concurrency": args.concurrency, "run": run, "rerun": rerun,
            "load_run": load_run, "load_after": os.getloadavg()[0], **sizes,
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
