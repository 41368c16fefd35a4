"""Questions and answers through Ray Serve with wrk (docs/benchmarks.md,
"Questions and answers through Serve"): the question detail read with and
without a key, and answer upvotes, every request a real change.

    .venv/bin/python -m benchmarks.qa_bench [--duration 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.corpus import seed_question

STATE_DIR = harness.ROOT / ".cairn" / "bench-qa"
MARKS = ("<!-- qa-bench:start -->", "<!-- qa-bench:end -->")
PORT = 8104
LIMITS = ("registration", "general", "anon_read", "question_create", "answer_create", "vote")
BENCH_ENV = harness.bench_env(STATE_DIR, 3, *LIMITS)

N_ANSWERS = 20  # on the question whose detail read is measured
N_VOTERS = 100
N_VOTE_QUESTIONS = 3  # x N_ANSWERS answers to upvote in the measured run


def seed(base: str) -> dict[str, Any]:
    """Agents, the detail question with its answers and votes, and the answers
    the upvote runs vote on."""
    asker = harness.new_agent(base, "bench asker")["api_key"]
    helpers = [harness.new_agent(base, f"bench helper {i}")["api_key"] for i in range(N_ANSWERS)]
    voters = [harness.new_agent(base, f"bench voter {i}")["api_key"] for i in range(N_VOTERS)]

    def question(title: str) -> tuple[str, list[str]]:
        return seed_question(base, asker, helpers, title, ["http", "retries", "rate-limits"])

    detail_slug, detail_answers = question("Retrying rate-limited APIs (detail read)")
    # Votes on the detail question's answers, so the order has work to do and a
    # voter's read carries votes.
    up = {"vote_type": "upvote"}
    for i, answer_id in enumerate(detail_answers):
        for key in voters[: i % 7]:
            harness.api_call(base, "POST", f"/api/answers/{answer_id}/vote", key, up)
    harness.api_call(base, "POST", f"/api/answers/{detail_answers[3]}/accept", asker)
    harness.api_call(base, "POST", f"/api/questions/{detail_slug}/vote", voters[0], up)

    warmup_answers = question("Warm-up question for the upvote run")[1]
    voted = [question(f"Upvote question number {n}") for n in range(N_VOTE_QUESTIONS)]
    return {
        "detail_slug": detail_slug, "voter": voters[0], "voters": voters,
        "warmup_answers": warmup_answers, "vote_slugs": [slug for slug, _ in voted],
        "vote_answers": [answer for _, answers in voted for answer in answers],
    }  # fmt: skip


def measure_http(
    base: str, facts: dict[str, Any], wrk: str, tmp: Path, args: argparse.Namespace
) -> list[tuple[str, harness.WrkResult]]:
    detail = f"{base}/api/questions/{facts['detail_slug']}"
    with_key = harness.key_script(tmp / "key.lua", facts["voter"])
    shown = harness.api_call(base, "GET", f"/api/questions/{facts['detail_slug']}", facts["voter"])
    if len(shown["answers"]) != N_ANSWERS or "user_vote" not in shown["answers"][0]:
        raise RuntimeError("the detail read does not show the seeded answers")

    label = f"GET /api/questions/{{slug}} ({N_ANSWERS} answers)"
    rows = [(label, harness.measure_url(wrk, "question detail", detail, args))]
    keyed = harness.measure_url(wrk, "question detail, with a key", detail, args, with_key)
    rows.append((f"{label}, with a key", keyed))
    # The warm-up votes on answers of its own, so the measured run starts with
    # nothing but new votes (each request a change: harness VOTE_SCRIPT).
    voters = facts["voters"]
    vote_url = f"{base}/api/answers/{facts['vote_answers'][0]}/vote"
    if args.warmup:
        warm = harness.vote_script(tmp / "warm.lua", voters, facts["warmup_answers"])
        harness.run_wrk(
            wrk, vote_url, duration=args.warmup, connections=args.connections, script=warm
        )
    script = harness.vote_script(tmp / "votes.lua", voters, facts["vote_answers"])
    upvote = harness.measure_url(wrk, "answer upvote", vote_url, args, script, warmup=0)
    return [*rows, ("POST /api/answers/{id}/vote (upvote; a new vote each time)", upvote)]


def check_votes(base: str, facts: dict[str, Any], result: harness.WrkResult) -> dict[str, Any]:
    """After the run: the stored scores add up to what the votes say."""
    total = 0
    for slug in facts["vote_slugs"]:
        shown = harness.api_call(base, "GET", f"/api/questions/{slug}")
        total += sum(a["vote_score"] for a in shown["answers"])
    pairs = len(facts["voters"]) * len(facts["vote_answers"])
    return {"score_total": total, "pairs": pairs, "requests": result.requests}


def docs_section(
    rows: list[tuple[str, harness.WrkResult]],
    votes: dict[str, Any],
    args: argparse.Namespace,
    wrk_ver: str,
    load_before: float,
) -> str:
    lines = [
        *harness.section_head(MARKS[0], "qa_bench.py", load_before),
        f"- Through Serve: `cairn run --port {PORT}` (HAProxy, 2 `Api` replicas, the "
        f"rate-limiter actors); {harness.wrk_run(wrk_ver, args)} (the vote warm-up uses "
        "answers of its own); wrk on the same machine.",
        "",
        *harness.serve_table(rows),
        "",
        f"Every read also counts a view (an `UPDATE` of the question row). After the vote "
        f"run the {N_VOTE_QUESTIONS * N_ANSWERS} answers' scores summed to "
        f"{votes['score_total']:,} for {votes['requests']:,} requests over "
        f"{votes['pairs']:,} (voter, answer) pairs.",
    ]
    return harness.section_end(
        lines, "`make bench` (or `.venv/bin/python -m benchmarks.qa_bench`)", MARKS[1]
    )


def main(argv: list[str] | None = None) -> int:
    args = harness.wrk_options("qa_bench").parse_args(argv)
    env, wrk, wrk_ver = harness.fresh_serve_run(STATE_DIR, BENCH_ENV)
    load_before = os.getloadavg()[0]
    with harness.serve_running(PORT, env, STATE_DIR) as serve:
        print("bench: seeding over HTTP", flush=True)
        facts = seed(serve.base)
        with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
            rows = measure_http(serve.base, facts, wrk, Path(tmp), args)
        votes = check_votes(serve.base, facts, rows[-1][1])
        print(f"bench: vote check {votes}", flush=True)
    section = docs_section(rows, votes, args, wrk_ver, load_before)
    harness.publish(section, *MARKS, args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
