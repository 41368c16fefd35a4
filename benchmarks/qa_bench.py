"""Questions and answers through Ray Serve, with ``wrk``:

* the question detail read (a question with 20 answers, each with votes), with
  and without a key (a key adds the caller's vote on the question and on every
  answer);
* answer upvotes: many voters upvoting many answers, every request a real
  change (a new vote, its score and the author's reputation event).

The service is ``cairn run --port 8104`` on a fresh state folder
(``.cairn/bench-qa``, its own embedded Postgres), seeded over HTTP. Results are
printed and written into docs/benchmarks.md between the ``qa-bench`` markers.

    .venv/bin/python -m benchmarks.qa_bench               # what `make bench` runs
    .venv/bin/python -m benchmarks.qa_bench --duration 5  # a quick run
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.corpus import seed_question
from benchmarks.harness import (
    HOST,
    KEY_SCRIPT,
    RATE_LIMIT,
    ROOT,
    THREADS,
    VOTE_SCRIPT,
    WrkResult,
    api_call,
    fresh_serve_run,
    lua_list,
    measure_url,
    section_head,
    serve_running,
    serve_table,
    write_docs,
    wrk_options,
)

STATE_DIR = ROOT / ".cairn" / "bench-qa"
START_MARK = "<!-- qa-bench:start -->"
END_MARK = "<!-- qa-bench:end -->"
PORT = 8104
BENCH_ENV = {
    "CAIRN_STATE_DIR": str(STATE_DIR),
    "CAIRN_HOST": HOST,
    "CAIRN_RATELIMIT_REGISTRATION": RATE_LIMIT,
    "CAIRN_RATELIMIT_GENERAL": RATE_LIMIT,
    "CAIRN_RATELIMIT_QUESTION_CREATE": RATE_LIMIT,
    "CAIRN_RATELIMIT_ANSWER_CREATE": RATE_LIMIT,
    "CAIRN_RATELIMIT_VOTE": RATE_LIMIT,
    "CAIRN_HAPROXY_STATS_PORT": "18434",
    "CAIRN_HAPROXY_METRICS_PORT": "19131",
    "CAIRN_FALLBACK_PROXY_PORT": "18530",
}

N_ANSWERS = 20  # on the question whose detail read is measured
N_VOTERS = 100
N_VOTE_QUESTIONS = 3  # x N_ANSWERS answers to upvote in the measured run
N_WARMUP_ANSWERS = N_ANSWERS  # upvoted during the warm-up, never measured


def seed(base: str) -> dict[str, Any]:
    """Agents, the detail question with its answers and votes, and the answers
    the upvote runs vote on."""

    def register(name: str) -> str:
        key: str = api_call(base, "POST", "/api/agents/register", body={"name": name})["api_key"]
        return key

    asker = register("bench asker")
    helpers = [register(f"bench helper {i}") for i in range(N_ANSWERS)]
    voters = [register(f"bench voter {i}") for i in range(N_VOTERS)]

    def question(title: str) -> tuple[str, list[str]]:
        return seed_question(base, asker, helpers, title, ["http", "retries", "rate-limits"])

    detail_slug, detail_answers = question("Retrying rate-limited APIs (detail read)")
    # Votes on the detail question's answers, so the order has work to do and a
    # voter's read carries votes.
    for i, answer_id in enumerate(detail_answers):
        for key in voters[: i % 7]:
            api_call(base, "POST", f"/api/answers/{answer_id}/vote", key, {"vote_type": "upvote"})
    api_call(base, "POST", f"/api/answers/{detail_answers[3]}/accept", asker)
    api_call(base, "POST", f"/api/questions/{detail_slug}/vote", voters[0], {"vote_type": "upvote"})

    warmup_answers = question("Warm-up question for the upvote run")[1]
    vote_slugs: list[str] = []
    vote_answers: list[str] = []
    for n in range(N_VOTE_QUESTIONS):
        slug, answers = question(f"Upvote question number {n}")
        vote_slugs.append(slug)
        vote_answers += answers
    return {
        "detail_slug": detail_slug,
        "voter": voters[0],
        "voters": voters,
        "warmup_answers": warmup_answers,
        "vote_slugs": vote_slugs,
        "vote_answers": vote_answers,
    }


# The upvote script (VOTE_SCRIPT) is the harness's: each wrk thread takes every
# THREADS-th (voter, answer) pair, answers varying fastest so concurrent requests
# hit different answers, and every request changes a vote.


def vote_script(path: Path, keys: list[str], answers: list[str]) -> Path:
    path.write_text(
        VOTE_SCRIPT.format(
            keys=lua_list(keys),
            answers=lua_list(answers),
            threads=THREADS,
        )
    )
    return path


def measure_http(
    base: str, facts: dict[str, Any], wrk: str, tmp: Path, args: argparse.Namespace
) -> list[tuple[str, WrkResult]]:
    detail = f"{base}/api/questions/{facts['detail_slug']}"
    with_key = tmp / "key.lua"
    with_key.write_text(KEY_SCRIPT.format(key=facts["voter"]))
    shown = api_call(base, "GET", f"/api/questions/{facts['detail_slug']}", facts["voter"])
    if len(shown["answers"]) != N_ANSWERS or "user_vote" not in shown["answers"][0]:
        raise RuntimeError("the detail read does not show the seeded answers")

    def run(label: str, url: str, script: Path | None, warmup: int) -> WrkResult:
        return measure_url(
            wrk,
            label,
            url,
            duration=args.duration,
            warmup=warmup,
            connections=args.connections,
            script=script,
        )

    rows = [
        (
            f"GET /api/questions/{{slug}} ({N_ANSWERS} answers)",
            run("question detail", detail, None, args.warmup),
        ),
        (
            f"GET /api/questions/{{slug}} ({N_ANSWERS} answers), with a key",
            run("question detail, with a key", detail, with_key, args.warmup),
        ),
    ]
    # The warm-up votes on answers of its own, so the measured run starts with
    # nothing but new votes.
    voters = facts["voters"]
    vote_url = f"{base}/api/answers/{facts['vote_answers'][0]}/vote"
    if args.warmup:
        warm = vote_script(tmp / "warm.lua", voters, facts["warmup_answers"])
        measure_url(
            wrk,
            "answer upvote (warm-up)",
            vote_url,
            duration=args.warmup,
            warmup=0,
            connections=args.connections,
            script=warm,
        )
    script = vote_script(tmp / "votes.lua", voters, facts["vote_answers"])
    rows.append(
        (
            "POST /api/answers/{id}/vote (upvote; a new vote each time)",
            run("answer upvote", vote_url, script, 0),
        )
    )
    return rows


def check_votes(base: str, facts: dict[str, Any], result: WrkResult) -> dict[str, Any]:
    """After the run: the stored scores add up to what the votes say."""
    total = 0
    for slug in facts["vote_slugs"]:
        shown = api_call(base, "GET", f"/api/questions/{slug}")
        total += sum(a["vote_score"] for a in shown["answers"])
    pairs = len(facts["voters"]) * len(facts["vote_answers"])
    return {"score_total": total, "pairs": pairs, "requests": result.requests}


def docs_section(
    rows: list[tuple[str, WrkResult]],
    votes: dict[str, Any],
    args: argparse.Namespace,
    wrk_ver: str,
    load_before: float,
) -> str:
    lines = [
        *section_head(
            START_MARK, "Questions and answers through Serve", "qa_bench.py", load_before
        ),
        f"- Data: one question with {N_ANSWERS} answers (about 900 characters each, "
        "0 to 6 upvotes each, one accepted), read anonymously and by a voter; "
        f"{N_VOTERS} voters upvoting {N_VOTE_QUESTIONS * N_ANSWERS} other answers, each "
        "request a new (voter, answer) pair, spread over the answers. Fresh state in "
        "`.cairn/bench-qa`, seeded over HTTP.",
        f"- Through Serve: `cairn run --port {PORT}` (HAProxy, 2 `Api` replicas, the "
        f"rate-limiter actors); {wrk_ver}, `-t{THREADS} -c{args.connections} "
        f"-d{args.duration}s --latency` after a {args.warmup} s warm-up (the vote warm-up "
        "uses answers of its own); wrk on the same machine.",
        "",
        *serve_table(rows),
    ]
    lines += [
        "",
        f"Every read also counts a view (an `UPDATE` of the question row). After the vote "
        f"run the {N_VOTE_QUESTIONS * N_ANSWERS} answers' scores summed to "
        f"{votes['score_total']:,} for {votes['requests']:,} requests over "
        f"{votes['pairs']:,} (voter, answer) pairs.",
        "",
        "Reproduce: `make bench` (or `.venv/bin/python -m benchmarks.qa_bench`).",
        END_MARK,
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.qa_bench")
    wrk_options(parser, connections=16)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env, wrk, wrk_ver = fresh_serve_run(STATE_DIR, BENCH_ENV)
    load_before = os.getloadavg()[0]
    with serve_running(PORT, env, STATE_DIR) as serve:
        print("bench: seeding over HTTP", flush=True)
        facts = seed(serve.base)
        with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
            rows = measure_http(serve.base, facts, wrk, Path(tmp), args)
        votes = check_votes(serve.base, facts, rows[-1][1])
        print(f"bench: vote check {votes}", flush=True)

    if not args.no_docs:
        write_docs(
            docs_section(rows, votes, args, wrk_ver, load_before),
            start_mark=START_MARK,
            end_mark=END_MARK,
        )
        print("bench: wrote docs/benchmarks.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
