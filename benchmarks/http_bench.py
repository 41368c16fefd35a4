"""HTTP benchmark (docs/benchmarks.md, "HTTP: Ray Serve vs plain uvicorn, same
workers"): the same app under plain uvicorn, uvicorn+Redis and Ray Serve, wrk
in interleaved rounds, the reads under client mixes, each run with the
servers' CPU and, with ``--profile``, py-spy on the app processes
(``profile_split.py``: what Cairn runs only under Serve, issue 46's 5%).

    .venv/bin/python -m benchmarks.http_bench [--duration 5] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.harness import THREADS
from benchmarks.profile_split import ADMISSION_PARTS, COMPONENTS
from benchmarks.serving import routes, tables
from benchmarks.serving.measure import Run, measure, wait_index_idle
from benchmarks.serving.processes import tree_cpu_s
from benchmarks.serving.redis_limiter import redis_server

STATE_DIR = harness.ROOT / ".cairn" / "bench"
START_MARK = "<!-- http-bench:start -->"
END_MARK = "<!-- http-bench:end -->"

UVICORN_PORT = 8101
SERVE_PORT = 8102
REDIS_UVICORN_PORT = 8103
REDIS_PORT = 16479
SERVERS = {"uvicorn": "uvicorn", "redis": "uvicorn+Redis", "serve": "Ray Serve"}
UVICORN_START_TIMEOUT_S = 90.0
SERVE_START_TIMEOUT_S = 180.0

LIMITS = ("registration", "general", "anon_read", "search", "vote")
CREATES = ("pattern_create", "question_create", "answer_create")
# The many-addresses mix sends its client address in X-Forwarded-For.
BENCH_ENV = harness.bench_env(STATE_DIR, 1, *LIMITS, *CREATES, CAIRN_TRUSTED_PROXIES="127.0.0.1/32")


def docs_section(
    runs: list[Run],
    args: argparse.Namespace,
    run: dict[str, Any],
    facts: dict[str, Any],
    argv: list[str],
    load_before: float,
) -> str:
    """``run``: wrk's version, Serve's set-up, uvicorn's workers, and the idle
    Serve's CPU while uvicorn was measured."""
    this_run = f" (this run: `.venv/bin/python -m benchmarks.http_bench {' '.join(argv)}`)"
    lines = [
        *harness.section_head(START_MARK, "http_bench.py", load_before),
        f"- 1-minute load average after the run: {os.getloadavg()[0]:.2f}.",
        f"- Load: {run['wrk_ver']}, `-t{THREADS} -c{args.connections} -d{args.duration}s --latency "
        f"--timeout 10s`, each run after a {args.warmup} s warm-up of the same route; "
        f"{args.rounds} rounds; wrk on the same machine.",
        f"- Plain uvicorn: {run['workers']} workers; Ray Serve: {run['serve_info']}; many agent "
        f"keys: a slice of {facts['crowd_size']:,} agents. While uvicorn was measured, the idle "
        f"Serve processes used {run['idle_cores']:.2f} of a core.",
        "",
        *tables.versus_table(runs, "uvicorn"),
        "",
        "Serve against uvicorn with one global limit in Redis (both enforce a limit shared "
        "by every worker):",
        "",
        *tables.versus_table(runs, "uvicorn+Redis"),
        "",
        "Serve's CPU per request, by process (ms, median over rounds):",
        "",
        *tables.cpu_table(runs),
        "",
    ]
    if any(r.admission for r in runs):
        lines += [
            "The cold path (`--profile`): CPU ms per request the app processes spend in "
            "each step of admission:",
            "",
            *tables.split_table(runs, "admission", ADMISSION_PARTS),
            "",
        ]
    if any(r.haproxy for r in runs):
        lines += [
            "HAProxy's own timers (`show stat`, averages over the backend's last 1,024 "
            "requests, whole ms):",
            "",
            *tables.haproxy_table(runs),
            "",
        ]
    if any(r.profile for r in runs):
        lines += [
            "Where the app processes' CPU goes (`--profile`), ms per request:",
            "",
            *tables.split_table(runs, "profile", COMPONENTS),
            "",
            "What Cairn runs only under Serve (`--profile`; issue 46's target: at most 5% of "
            "a request's CPU):",
            "",
            *tables.serve_only_table(runs),
            "",
        ]
    lines += [
        "Every run:",
        "",
        *tables.latency_table(runs),
    ]
    return harness.section_end(lines, f"`make bench`{this_run if argv else ''}", END_MARK)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = harness.wrk_options("http_bench", duration=10)
    parser.description = (
        "wrk against the same app under Ray Serve and under plain uvicorn with as many "
        "workers as Serve has Api replicas, in interleaved rounds."
    )
    add = parser.add_argument
    add("--rounds", type=int, default=3, help="rounds over all routes (3)")
    for flag, values in (("routes", routes.ROUTES), ("mixes", routes.MIXES), ("servers", SERVERS)):
        add(f"--{flag}", default=",".join(values), help=f"from {', '.join(values)} (default: all)")
    add("--workers", type=int, default=0, help="uvicorn workers (0: as many as Api replicas)")
    add("--keys", type=int, default=routes.N_KEYS, help=f"many-keys agents ({routes.N_KEYS})")
    add("--profile", action="store_true", help="py-spy on the app processes during each run")
    add("--keep-profiles", default="", help="with --profile: keep py-spy's raw stacks here")
    args = parser.parse_args(argv)

    def listed(flag: str, allowed: Iterable[str]) -> list[str]:
        """A comma-separated option's values, each one of ``allowed``."""
        got = [x.strip() for x in getattr(args, flag).split(",") if x.strip()]
        if not got or any(x not in allowed for x in got):
            parser.error(f"--{flag}: comma-separated, from {', '.join(allowed)}")
        return got

    keys, mixes = listed("routes", routes.ROUTES), listed("mixes", routes.MIXES)
    args.server_list = listed("servers", SERVERS)
    if args.duration < 1 or args.warmup < 0 or args.connections < THREADS or args.rounds < 1:
        parser.error(f"need --duration, --rounds >= 1, --warmup >= 0, --connections >= {THREADS}")
    args.route_list = [
        routes.mixed(routes.ROUTES[k], mix)
        for k in keys
        for mix in (mixes if k in routes.MIXED_ROUTES else ["one"])
        if k in routes.MIXED_ROUTES or "one" in mixes
    ]
    if "keys" not in mixes:
        args.keys = 0
    return args


def main(argv: list[str] | None = None) -> int:
    raw_argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    semantic = any(r.key == "semantic" for r in args.route_list)
    semantic_env = {**BENCH_ENV, "CAIRN_SEARCH_SEMANTIC": "true" if semantic else "false"}
    env, wrk, wrk_ver = harness.fresh_serve_run(STATE_DIR, semantic_env)

    from serve_app.settings import Settings

    cairn_env = {k.removeprefix("CAIRN_").lower(): v for k, v in env.items() if k[:6] == "CAIRN_"}
    settings = Settings.model_validate(cairn_env)
    workers = args.workers or settings.ingress_replicas
    serve_info = (
        f"{settings.ingress_replicas} `Api` replicas, {settings.ingress_num_cpus} CPU each, "
        f"proxy `{settings.serve_proxy}`"
        + (", Embedder and VectorIndex deployments" if semantic else "")
    )
    wrk_run = f"-t{THREADS} -c{args.connections} -d{args.duration}s (+{args.warmup}s warm-up)"
    keys = ", ".join(r.key for r in args.route_list)
    print(
        f"bench: {wrk_ver}; {wrk_run}, {args.rounds} rounds; {workers} workers; {keys}", flush=True
    )
    load_before = os.getloadavg()[0]

    def server(name: str, module: str, port: int, log: str, *more: str) -> harness.Server:
        """A server in this session (one CPU autogroup with wrk), logging into STATE_DIR."""
        cmd = [sys.executable, "-m", module, *more, "--port", str(port)]
        return harness.Server(name, cmd, port, STATE_DIR / log, STATE_DIR, own_session=False)

    plain_args = ["--host", harness.HOST, "--workers", str(workers)]
    plain_args += ["--semantic"] if semantic else []
    runs: list[Run] = []
    idle: list[tuple[float, float]] = []  # (Serve's CPU s, wall s) while uvicorn ran
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cairn-bench-")))
        redis_uri, redis_pid = "", tuple[int, ...]()
        if "redis" in args.server_list:
            redis_uri, pid = stack.enter_context(redis_server(REDIS_PORT, STATE_DIR / "redis"))
            redis_pid = (pid,)
        by_name = {
            "serve": server("Ray Serve", "serve_app.launch.cli", SERVE_PORT, "serve.log", "run"),
            "uvicorn": server(
                "uvicorn", "benchmarks.uvicorn_app", UVICORN_PORT, "uvicorn.log", *plain_args
            ),
            "redis": server(
                "uvicorn+Redis", "benchmarks.uvicorn_app", REDIS_UVICORN_PORT,
                "uvicorn-redis.log", *plain_args, "--redis", redis_uri,
            ),
        }  # fmt: skip
        serve, plain, redis_plain = by_name["serve"], by_name["uvicorn"], by_name["redis"]
        servers = [by_name[k] for k in args.server_list]
        others = [x for x in servers if x is not serve]
        try:
            harness.ports_free(BENCH_ENV)
            print("bench: starting Ray Serve (cairn run)", flush=True)
            serve.start(env, SERVE_START_TIMEOUT_S, ready_text="serving on")
            print(f"bench: seeding through Serve ({args.keys} agents for the keys mix)", flush=True)
            facts = routes.seed(serve.base, args.rounds, args.keys)
            facts["crowd_size"] = len(facts["crowd"])
            for other in others:
                print(f"bench: starting {other.name} ({workers} workers)", flush=True)
                other.start(env, UVICORN_START_TIMEOUT_S)
            wait_index_idle(serve.base)
            for srv in servers:
                routes.check_routes(srv.base, facts, semantic)
            bases = list(dict.fromkeys(r.base for r in args.route_list))
            for rnd in range(args.rounds):
                for route in args.route_list:
                    # Each server first, middle and last in turn (for each mix too).
                    base = bases.index(route.base)
                    shift = (rnd + base + list(routes.MIXES).index(route.mix)) % len(servers)
                    for srv in servers[shift:] + servers[:shift]:
                        assert serve.proc is not None
                        before, t0 = tree_cpu_s(serve.proc.pid), time.monotonic()
                        extra = redis_pid if srv is redis_plain else ()
                        runs.append(measure(srv, route, facts, rnd, wrk, tmp, args, extra))
                        if srv is plain:
                            cpu = tree_cpu_s(serve.proc.pid) - before
                            idle.append((cpu, time.monotonic() - t0))
                        if route.key == "create":
                            wait_index_idle(serve.base)
        finally:
            harness.stop_servers([*others, serve], STATE_DIR)
    idle_cores = sum(c for c, _ in idle) / max(1e-9, sum(w for _, w in idle)) if idle else 0.0
    run = {
        "wrk_ver": wrk_ver,
        "serve_info": serve_info,
        "workers": workers,
        "idle_cores": idle_cores,
    }
    section = docs_section(runs, args, run, facts, raw_argv, load_before)
    harness.publish(section, START_MARK, END_MARK, args.no_docs)
    return 1 if any(r.result.errors for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
