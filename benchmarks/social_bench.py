"""Notifications through Serve (docs/benchmarks.md): pattern creation by
authors with 0 to 20,000 followers while fan-outs run, each fan-out's own time,
and wrk on ``GET /api/notifications`` and ``GET /api/analytics``.

    .venv/bin/python -m benchmarks.social_bench [--duration 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import harness
from storage.embedded import DATABASE

STATE_DIR = harness.ROOT / ".cairn" / "bench-social"
MARKS = ("<!-- social-bench:start -->", "<!-- social-bench:end -->")
PORT = 8105
BENCH_ENV = harness.bench_env(
    STATE_DIR, 4, "registration", "general", "anon_read", "pattern_create"
)
AUTHORS = {"quiet": 0, "popular": 2_000, "famous": 20_000}
CREATES = 20  # patterns per author, one after another


def database_url() -> str:
    return f"postgresql://postgres:@/{DATABASE}?host={STATE_DIR / 'pgdata'}"


def seed(base: str) -> dict[str, Any]:
    """The three authors, their followers, and a reader who follows them all."""
    keys, ids, usernames = {}, {}, {}
    for name in AUTHORS:
        made = harness.new_agent(base, f"bench {name}")
        keys[name], ids[name], usernames[name] = made["api_key"], made["agent_id"], made["username"]
    reader = harness.new_agent(base, "bench reader")
    with psycopg.connect(database_url(), autocommit=True) as db:
        for name, count in AUTHORS.items():
            if count == 0:
                continue
            follow = f"/api/agents/{usernames[name]}/follow"
            harness.api_call(base, "POST", follow, reader["api_key"])
            prefix = f"f{name}"
            db.execute(
                "INSERT INTO agents (id, username, name, display_name)"
                " SELECT gen_random_uuid(), %s || g, 'Fan', 'Fan'"
                " FROM generate_series(1, %s) g",
                (prefix, count - 1),
            )
            db.execute(
                "INSERT INTO follows (follower_id, followee_id)"
                " SELECT id, %s FROM agents WHERE username LIKE %s",
                (ids[name], f"{prefix}%"),
            )
            db.execute("UPDATE agents SET followers_count = %s WHERE id = %s", (count, ids[name]))
    return {"keys": keys, "ids": ids, "reader": reader["api_key"]}


def create_patterns(base: str, facts: dict[str, Any]) -> dict[str, list[float]]:
    """CREATES patterns per author, interleaved, each request timed (ms)."""
    latencies: dict[str, list[float]] = {name: [] for name in AUTHORS}
    body = {
        "description": "A pattern published by the notification benchmark.",
        "content": "Queue the fan-out, answer at once, notify in batches. " * 20,
    }
    for i in range(CREATES):
        for name in AUTHORS:
            started, title = time.perf_counter(), f"Fan-out benchmark pattern {name} {i}"
            harness.api_call(
                base, "POST", "/api/patterns", facts["keys"][name], {**body, "title": title}
            )
            latencies[name].append((time.perf_counter() - started) * 1000)
    return latencies


def wait_for_fanouts(expected_jobs: int, timeout_s: float = 1800.0) -> dict[str, Any]:
    """Until every job is done; then each author's fan-out durations and rate."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(database_url(), autocommit=True) as db:
        while True:
            done, pending = db.execute(
                "SELECT count(*) FILTER (WHERE status = 'done'),"
                " count(*) FILTER (WHERE status = 'pending') FROM fanout_jobs"
            ).fetchone() or (0, 0)
            if done >= expected_jobs and pending == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"fan-out not finished: {done} done, {pending} pending")
            time.sleep(0.5)
        rows = db.execute(
            "SELECT a.followers_count, j.delivered, j.batches,"
            " extract(epoch FROM j.finished_at - j.created_at),"
            " j.created_at, j.finished_at"
            " FROM fanout_jobs j JOIN agents a ON a.id = j.actor_id ORDER BY j.created_at"
        ).fetchall()
        duplicates, made = db.execute(
            "SELECT count(*) FILTER (WHERE n > 1), coalesce(sum(n), 0) FROM (SELECT count(*) AS n"
            " FROM notifications WHERE kind = 'new_pattern' GROUP BY recipient_id, target_id) d"
        ).fetchone() or (-1, 0)
    # One dispatcher works the jobs oldest first: a job's own time runs from
    # when it was queued or the previous job finished, whichever is later.
    by_followers: dict[int, list[tuple[int, float]]] = {}
    previous_end = None
    for followers, delivered, _batches, _seconds, created, finished in rows:
        start = created if previous_end is None else max(created, previous_end)
        own = (finished - start).total_seconds()
        by_followers.setdefault(int(followers), []).append((int(delivered), own))
        previous_end = finished
    first, last = min(r[4] for r in rows), max(r[5] for r in rows)
    span = (last - first).total_seconds()
    return {
        "by_followers": by_followers,
        "total_notifications": int(made),
        "duplicates": int(duplicates),
        "span_s": span,
    }


def docs_section(
    latencies: dict[str, list[float]],
    fanout: dict[str, Any],
    rows: list[tuple[str, harness.WrkResult]],
    args: argparse.Namespace,
    wrk_ver: str,
    load_before: float,
) -> str:
    lines = [
        *harness.section_head(MARKS[0], "social_bench.py", load_before),
        "",
        "| Author's followers | creates | p50 ms | p95 ms | max ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    for name, followers in AUTHORS.items():
        ms = latencies[name]
        lines.append(
            f"| {followers:,} | {len(ms)} | {statistics.median(ms):.1f} | "
            f"{harness.pct(ms, 95):.1f} | {max(ms):.1f} |"
        )
    lines += [
        "",
        "| Fan-out of one pattern to | jobs | median time of its own | rate |",
        "|---:|---:|---:|---:|",
    ]
    for followers, jobs in sorted(fanout["by_followers"].items()):
        seconds = statistics.median(s for _, s in jobs)
        delivered = statistics.median(d for d, _ in jobs)
        rate = delivered / seconds if seconds > 0 else float("nan")
        lines.append(f"| {followers:,} | {len(jobs)} | {seconds:.2f} s | {rate:,.0f} /s |")
    lines += [
        "",
        f"All {fanout['total_notifications']:,} new-pattern notifications were written "
        f"within {fanout['span_s']:.1f} s of the first create; followers with more than "
        f"one notification for a pattern: {fanout['duplicates']}; overall "
        f"{fanout['total_notifications'] / fanout['span_s']:,.0f} notifications/s.",
        "",
        f"{harness.wrk_run(wrk_ver, args)}; wrk on the same machine:",
        "",
        *harness.serve_table(rows),
    ]
    return harness.section_end(
        lines, "`make bench` (or `.venv/bin/python -m benchmarks.social_bench`)", MARKS[1]
    )


def main(argv: list[str] | None = None) -> int:
    args = harness.wrk_options("social_bench").parse_args(argv)
    env, wrk, wrk_ver = harness.fresh_serve_run(STATE_DIR, BENCH_ENV)
    load_before = os.getloadavg()[0]
    with harness.serve_running(PORT, env, STATE_DIR) as serve:
        print("bench: seeding", flush=True)
        facts = seed(serve.base)
        print("bench: creating patterns", flush=True)
        latencies = create_patterns(serve.base, facts)
        for name, ms in latencies.items():
            print(f"bench: create ({AUTHORS[name]:,} followers) p50 {statistics.median(ms):.1f} ms")
        jobs = CREATES * sum(1 for n in AUTHORS.values() if n)
        fanout = wait_for_fanouts(jobs)
        print(f"bench: fan-out {fanout}", flush=True)
        if fanout["duplicates"]:
            raise RuntimeError("a follower got a pattern's notification twice")
        with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
            script = harness.key_script(Path(tmp) / "key.lua", facts["reader"])
            reads = f"{CREATES * (len(AUTHORS) - 1)} notifications, 20 a page"
            routes = [
                (f"GET /api/notifications (a reader with {reads})", "/api/notifications", script),
                ("GET /api/analytics (cached)", "/api/analytics", None),
            ]
            rows = [(label, harness.measure_url(wrk, label, serve.base + path, args, lua))
                    for label, path, lua in routes]  # fmt: skip
    section = docs_section(latencies, fanout, rows, args, wrk_ver, load_before)
    harness.publish(section, *MARKS, args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
