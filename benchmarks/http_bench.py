"""HTTP benchmark: the same Cairn app under plain uvicorn and through Ray Serve.

One run measures both servers, one after the other (never at once: the load
generator and both servers share a small machine), with ``wrk``:

* plain uvicorn: ``benchmarks.uvicorn_app``, one worker, in-process rate limiter,
  on 127.0.0.1:8101;
* Ray Serve: ``cairn run --port 8102`` (HAProxy ingress, Serve replicas, the
  Ray rate-limiter actors), on 127.0.0.1:8102.

Both use their own state folder (``.cairn/bench``, with its own embedded
Postgres) and rate limits raised so far that the register route is never
refused. Results are printed and written into docs/benchmarks.md between the
``http-bench`` markers.

    .venv/bin/python -m benchmarks.http_bench               # what `make bench` runs
    .venv/bin/python -m benchmarks.http_bench --duration 5  # a quick run
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.corpus import queries_for, seed_question, texts_for
from benchmarks.harness import (
    DOCS,
    HOST,
    OPERATOR,
    RATE_LIMIT,
    ROOT,
    THREADS,
    VOTE_SCRIPT,
    Server,
    WrkResult,
    api_call,
    fresh_serve_run,
    http_json,
    leftover_processes,
    lua_list,
    port_in_use,
    run_wrk,
    section_head,
    stop_bench_processes,
    write_docs,
    wrk_options,
)

STATE_DIR = ROOT / ".cairn" / "bench"
START_MARK = "<!-- http-bench:start -->"
END_MARK = "<!-- http-bench:end -->"

UVICORN_PORT = 8101
SERVE_PORT = 8102
UVICORN_START_TIMEOUT_S = 90.0
SERVE_START_TIMEOUT_S = 180.0

BENCH_ENV = {
    "CAIRN_STATE_DIR": str(STATE_DIR),
    "CAIRN_HOST": HOST,
    "CAIRN_RATELIMIT_REGISTRATION": RATE_LIMIT,
    "CAIRN_RATELIMIT_GENERAL": RATE_LIMIT,
    "CAIRN_RATELIMIT_ANON_READ": RATE_LIMIT,
    "CAIRN_RATELIMIT_SEARCH": RATE_LIMIT,
    "CAIRN_RATELIMIT_VOTE": RATE_LIMIT,
    "CAIRN_RATELIMIT_PATTERN_CREATE": RATE_LIMIT,
    "CAIRN_RATELIMIT_QUESTION_CREATE": RATE_LIMIT,
    "CAIRN_RATELIMIT_ANSWER_CREATE": RATE_LIMIT,
    "CAIRN_HAPROXY_STATS_PORT": "18414",
    "CAIRN_HAPROXY_METRICS_PORT": "19111",
    "CAIRN_FALLBACK_PROXY_PORT": "18510",
}


@dataclass(frozen=True)
class Route:
    key: str
    label: str
    method: str


ROUTES = {
    r.key: r
    for r in (
        Route("profile", "GET /api/agents/{username}", "GET"),
        Route("question", "GET /api/questions/{slug} (10 answers)", "GET"),
        Route("question_key", "GET /api/questions/{slug} (10 answers), with a key", "GET"),
        Route("trending", "GET /api/feed/trending", "GET"),
        Route("patterns_search", "GET /api/patterns?search=…", "GET"),
        Route("search_fulltext", "GET /api/search?q=…&use_semantic=false", "GET"),
        Route("upvote", "POST /api/answers/{id}/vote", "POST"),
        Route("create", "POST /api/patterns", "POST"),
        Route("semantic", "GET /api/search?q=… (semantic)", "GET"),
    )
}


@dataclass
class Measurement:
    route: Route
    server: str
    result: WrkResult


# ---------------------------------------------------------------- the servers


# ------------------------------------------------------------ the measurement

# Corpus for the search routes: generated technical texts (the search bench's
# generator), distinct short queries, and a few words for ?search=.
N_PATTERNS = 150
N_PATTERN_VOTERS = 40
N_ANSWERS = 10
N_VOTERS = 60
N_QUERIES = 64
PATTERN_SEARCHES = ("retry", "cache invalidation", "postgres", "webhook", "rate limit")


def seed(base: str, rounds: int) -> dict[str, Any]:
    """Through Serve: agents, patterns with votes (trending), the question read
    by the detail routes, and a fresh question per (server, round) for the
    upvote runs (every request there is then a change)."""

    def register(name: str) -> dict[str, str]:
        made: dict[str, str] = api_call(base, "POST", "/api/agents/register", body={"name": name})
        return made

    author = register("bench author")
    helpers = [register(f"bench helper {i}")["api_key"] for i in range(N_ANSWERS)]
    voters = [register(f"bench voter {i}")["api_key"] for i in range(N_VOTERS)]
    texts = texts_for(2 * N_PATTERNS)
    patterns = []
    for i in range(N_PATTERNS):
        body = {
            "title": " ".join(texts[2 * i].split()[:8]).rstrip(".,"),
            "description": texts[2 * i],
            "content": texts[2 * i + 1],
            "use_case_tags": ["bench"],
        }
        patterns.append(api_call(base, "POST", "/api/patterns", author["api_key"], body)["id"])
    for v, key in enumerate(voters[:N_PATTERN_VOTERS]):
        for pid in patterns[v % 7 :: 11]:
            api_call(base, "POST", f"/api/patterns/{pid}/vote", key, {"vote_type": "upvote"})

    def question(title: str) -> tuple[str, list[str]]:
        return seed_question(base, author["api_key"], helpers, title, ["http", "retries"])

    detail, detail_answers = question("Retrying rate-limited APIs (the detail read)")
    for i, answer_id in enumerate(detail_answers):
        for key in voters[: i % 5]:
            api_call(base, "POST", f"/api/answers/{answer_id}/vote", key, {"vote_type": "upvote"})
    api_call(base, "POST", f"/api/answers/{detail_answers[3]}/accept", author["api_key"])
    vote_sets = {
        (server, r): question(f"Upvote run {server} {r}")[1]
        for server in ("uvicorn", "Ray Serve")
        for r in range(-1, rounds)  # -1: the warm-up runs
    }
    return {
        "username": author["username"],
        "author_key": author["api_key"],
        "voter": voters[0],
        "voters": voters,
        "detail": detail,
        "vote_sets": vote_sets,
        "queries": queries_for(N_QUERIES),
        "patterns": len(patterns),
    }


PATHS_SCRIPT = """\
local paths = {{{paths}}}
local headers = {{{headers}}}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i % #paths) + 1], headers)
end
"""

# A new pattern per request, each with its own text (so its similar-patterns
# lookup embeds a text nobody asked for before).
CREATE_SCRIPT = """\
local key = "{key}"
local tag = "{tag}"
local counter = 0
function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
end
function init(args)
  n = 0
end
request = function()
  n = n + 1
  local body = string.format(
    '{{"title":"Bench pattern %s %d %d","description":"Retry webhook deliveries %d ' ..
    'with exponential backoff, run %s, thread %d.","content":"Keep a delivery log %d, ' ..
    'back off with jitter and give up after %d attempts.","use_case_tags":["bench"]}}',
    tag, tid, n, n, tag, tid, n, n % 9 + 2)
  return wrk.format("POST", "/api/patterns",
    {{["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json"}}, body)
end
"""


def route_script(
    tmp: Path, route: Route, facts: dict[str, Any], server: str, run: int
) -> tuple[str, Path]:
    """The first path of a route and the wrk script that drives it."""
    quote = urllib.parse.quote
    headers = ""
    if route.key == "profile":
        paths = [f"/api/agents/{facts['username']}"]
    elif route.key in ("question", "question_key"):
        paths = [f"/api/questions/{facts['detail']}"]
        if route.key == "question_key":
            headers = f'["Authorization"] = "Bearer {facts["voter"]}"'
    elif route.key == "trending":
        paths = ["/api/feed/trending"]
    elif route.key == "patterns_search":
        paths = [f"/api/patterns?search={quote(q)}" for q in PATTERN_SEARCHES]
    elif route.key in ("search_fulltext", "semantic"):
        suffix = "" if route.key == "semantic" else "&use_semantic=false"
        paths = [
            f"/api/search?q={quote(q)}&type=patterns&limit=20{suffix}" for q in facts["queries"]
        ]
    elif route.key == "upvote":
        answers = facts["vote_sets"][(server, run)]
        path = tmp / f"vote-{len(list(tmp.iterdir()))}.lua"
        path.write_text(
            VOTE_SCRIPT.format(
                keys=lua_list(facts["voters"]), answers=lua_list(answers), threads=THREADS
            )
        )
        return f"/api/answers/{answers[0]}/vote", path
    elif route.key == "create":
        tag = f"{server.split()[-1].lower()}{run + 1}"
        path = tmp / f"create-{len(list(tmp.iterdir()))}.lua"
        path.write_text(CREATE_SCRIPT.format(key=facts["author_key"], tag=tag))
        return "/api/patterns", path
    else:
        raise ValueError(route.key)
    path = tmp / f"{route.key}.lua"
    path.write_text(PATHS_SCRIPT.format(paths=lua_list(paths), headers=headers))
    return paths[0], path


def check_routes(base: str, facts: dict[str, Any], semantic: bool) -> None:
    """Each read answers 200 and the way the bench means it (10 answers, the
    caller's votes with a key, semantic or full-text mode)."""
    shown = api_call(base, "GET", f"/api/questions/{facts['detail']}", facts["voter"])
    if len(shown["answers"]) != N_ANSWERS or "user_vote" not in shown["answers"][0]:
        raise RuntimeError(f"{base}: the detail read does not show the seeded answers")
    feed = api_call(base, "GET", "/api/feed/trending")
    if not feed:
        raise RuntimeError(f"{base}: the trending feed is empty")
    query = urllib.parse.quote(facts["queries"][0])
    for mode in ("semantic", "fulltext") if semantic else ("fulltext",):
        flag = "" if mode == "semantic" else "&use_semantic=false"
        status, body = http_json(
            "GET", f"{base}/api/search?q={query}&type=patterns{flag}", None, 60
        )
        if status != 200 or body.get("mode") != mode:
            raise RuntimeError(f"{base}: search answered {status} in {body!r:.200}, not {mode}")


# --------------------------------------------------- CPU time of each server


def process_tree(pid: int) -> list[Any]:
    import psutil

    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def postgres_processes(state_dir: Path) -> list[Any]:
    """The embedded Postgres of the bench (the postmaster and its backends)."""
    import psutil

    marker = str(state_dir / "pgdata")
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(proc.info.get("cmdline") or []) and proc.name() == "postgres":
                return [proc, *proc.children(recursive=True)]
    return []


def process_kind(proc: Any) -> str:
    """Which part of a server a process is, for the CPU breakdown."""
    import psutil

    try:
        cmd = " ".join(proc.cmdline())
        name = proc.name()
    except psutil.Error:
        return "gone"
    if name == "postgres" or cmd.startswith("postgres"):
        return "Postgres"
    if "haproxy" in name:
        return "HAProxy"
    if "ServeReplica" in cmd:
        deployment = cmd.split("ServeReplica:", 1)[1].split()[0].split(":")[-1]
        return "Api replicas" if deployment == "Api" else f"{deployment} replica"
    if cmd.startswith("ray::"):
        actor = cmd.split()[0].removeprefix("ray::").split(".")[0]
        if actor in ("RateLimiterShard", "TrendingActor", "DispatchActor"):
            return f"{actor} actor"
        return "Ray system (controller, proxy, agents)"
    if name in ("raylet", "gcs_server") or "ray/" in cmd or "ray." in cmd:
        return "Ray system (controller, proxy, agents)"
    if "multiprocessing" in cmd or "uvicorn_app" in cmd:
        return "uvicorn workers"
    return "other"


class CpuMeter:
    """CPU seconds of a server's processes (its process tree and the bench's
    Postgres) between start() and stop(), by process_kind."""

    def __init__(self, server: Server, state_dir: Path) -> None:
        self.server = server
        self.state_dir = state_dir
        self._before: dict[int, tuple[str, float]] = {}

    def _sample(self) -> dict[int, tuple[str, float]]:
        import psutil

        assert self.server.proc is not None
        out: dict[int, tuple[str, float]] = {}
        for proc in [*process_tree(self.server.proc.pid), *postgres_processes(self.state_dir)]:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                out[proc.pid] = (process_kind(proc), t.user + t.system)
        return out

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> dict[str, float]:
        after = self._sample()
        by_kind: dict[str, float] = {}
        for pid, (kind, seconds) in after.items():
            used = seconds - self._before.get(pid, (kind, 0.0))[1]
            by_kind[kind] = by_kind.get(kind, 0.0) + max(0.0, used)
        return by_kind


# ------------------------------------------------------------- py-spy profiles


def profile_targets(server: Server) -> list[int]:
    """The processes that run the app: the Api replicas, or the uvicorn workers."""
    assert server.proc is not None
    kinds = {"Api replicas", "uvicorn workers"}
    return [p.pid for p in process_tree(server.proc.pid) if process_kind(p) in kinds]


@contextlib.contextmanager
def py_spy(pids: list[int], seconds: int, out: Path) -> Iterator[list[Path]]:
    """``py-spy record`` (raw collapsed stacks, 100 Hz) on each pid meanwhile."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    files, procs = [], []
    for pid in pids:
        path = out.with_name(f"{out.name}-{pid}.txt")
        files.append(path)
        cmd = [exe, "record", "--nonblocking", "-r", "100", "-d", str(seconds)]
        cmd += ["-f", "raw", "-o", str(path), "-p", str(pid)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        yield files
    finally:
        for proc in procs:
            try:
                proc.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                proc.kill()


# --------------------------------------------------------------- one run


@dataclass
class Run:
    route: Route
    server: str
    round: int
    result: WrkResult
    cpu_s: dict[str, float]
    haproxy: dict[str, float] | None = None
    profile: dict[str, float] | None = None  # component -> share of the app's busy samples

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000.0 * sum(self.cpu_s.values()) / max(1, self.result.requests)


def haproxy_timers(state_dir: Path) -> dict[str, float] | None:
    """HAProxy's own averages over the backend's last 1,024 requests (ms):
    queue, connect, response (the replica's answer) and total time."""
    import glob

    for sock in glob.glob(str(state_dir / "haproxy" / "*" / "admin.sock")):
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
            s.settimeout(3)
            s.connect(sock)
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            lines = data.decode().splitlines()
            head = lines[0].lstrip("# ").split(",")
            for line in lines[1:]:
                row = dict(zip(head, line.split(","), strict=False))
                if row.get("pxname") == "http-cairn" and row.get("svname") == "BACKEND":
                    return {k: float(row.get(k) or 0) for k in ("qtime", "ctime", "rtime", "ttime")}
    return None


def measure(
    server: Server,
    route: Route,
    facts: dict[str, Any],
    *,
    run: int,
    wrk: str,
    tmp: Path,
    args: argparse.Namespace,
    state_dir: Path,
) -> Run:
    """A warm-up run, then the measured one with the server's CPU time (and,
    with --profile, py-spy on the app processes)."""
    if args.warmup:
        url, script = route_script(tmp, route, facts, server.name, -1 if run == 0 else run)
        run_wrk(
            wrk,
            server.base + url,
            duration=args.warmup,
            connections=args.connections,
            script=script,
            timeout_s=10,
        )
    url, script = route_script(tmp, route, facts, server.name, run)
    meter = CpuMeter(server, state_dir)
    profile: dict[str, float] | None = None
    with contextlib.ExitStack() as stack:
        files: list[Path] = []
        if args.profile:
            where = Path(args.keep_profiles) if args.keep_profiles else tmp
            where.mkdir(parents=True, exist_ok=True)
            out = where / f"spy-{route.key}-{server.name.split()[-1]}-{run}"
            files = stack.enter_context(py_spy(profile_targets(server), args.duration, out))
        meter.start()
        result, raw = run_wrk(
            wrk,
            server.base + url,
            duration=args.duration,
            connections=args.connections,
            script=script,
            timeout_s=10,
        )
        cpu = meter.stop()
    if files:
        from benchmarks.profile_split import split_files

        profile = split_files([f for f in files if f.exists()])
    timers = haproxy_timers(state_dir) if server.name == "Ray Serve" else None
    print(
        f"bench: round {run + 1} {server.name:<10} {route.label:<52} "
        f"{result.requests_per_s:>8.1f} req/s  p50 {_fmt_ms(result, 50)} ms  "
        f"CPU {1000 * sum(cpu.values()) / max(1, result.requests):.2f} ms/request  "
        f"errors {result.errors_text()}",
        flush=True,
    )
    if result.errors:
        print(raw, flush=True)
    return Run(route, server.name, run, result, cpu, timers, profile)


# Answers in a row that must find the Api replica's copy of the vector index
# built: each comes from one replica (HAProxy spreads them).
REPLICAS_READY_IN_A_ROW = 8


def wait_index_idle(base: str, timeout: float = 600.0) -> None:
    """Until the VectorIndex has embedded every queued row (after pattern
    creation runs), so no background embedding overlaps the next run, and the
    Api replicas' copies of the index are built (serve_app/runtime/index_copies/vectors.py)."""
    deadline = time.monotonic() + timeout
    in_a_row = 0
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            status, body = http_json("GET", base + "/api/health", timeout=10, headers=OPERATOR)
            search = body.get("search") if status == 200 and isinstance(body, dict) else None
            if search is None:
                return
            replica = search.get("replica")
            idle = search.get("ready") and search.get("pending_jobs") == 0
            in_a_row = in_a_row + 1 if idle and (replica is None or replica["ready"]) else 0
            if in_a_row >= (1 if replica is None else REPLICAS_READY_IN_A_ROW):
                return
        time.sleep(0.3 if in_a_row else 1.0)
    raise RuntimeError(f"search index still busy after {timeout:.0f}s")


# ------------------------------------------------------------------ reporting


def _fmt_ms(result: WrkResult, pct: int) -> str:
    value = result.latency_ms.get(pct)
    return f"{value:.2f}" if value is not None else "n/a"


def _show(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pairs(runs: list[Run]) -> dict[str, list[tuple[Run, Run]]]:
    """Per route key, the (uvicorn, Serve) runs of each round."""
    by = {(r.route.key, r.server, r.round): r for r in runs}
    out: dict[str, list[tuple[Run, Run]]] = {}
    for (key, server, rnd), run in sorted(by.items(), key=lambda kv: kv[0][2]):
        if server != "uvicorn" or (key, "Ray Serve", rnd) not in by:
            continue
        out.setdefault(key, []).append((run, by[(key, "Ray Serve", rnd)]))
    return out


def ratio_table(runs: list[Run]) -> list[str]:
    """The headline: Serve's req/s over uvicorn's, round by round (each round
    measures both back to back), and the CPU each spends per request."""
    rows = [
        "| Route | uvicorn req/s | Serve req/s | Serve / uvicorn, each round | "
        "median | CPU ms/request uvicorn | Serve | uvicorn / Serve CPU |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for key, both in pairs(runs).items():
        ratios = [s.result.requests_per_s / max(u.result.requests_per_s, 1e-9) for u, s in both]
        cpu_u = _median([u.cpu_ms_per_request for u, _ in both])
        cpu_s = _median([s.cpu_ms_per_request for _, s in both])
        rows.append(
            f"| `{ROUTES[key].label}` | {_median([u.result.requests_per_s for u, _ in both]):,.0f} "
            f"| {_median([s.result.requests_per_s for _, s in both]):,.0f} "
            f"| {', '.join(f'{x:.2f}' for x in ratios)} | **{_median(ratios):.2f}x** "
            f"| {cpu_u:.2f} | {cpu_s:.2f} | {cpu_u / cpu_s:.2f}x |"
        )
    return rows


def latency_table(runs: list[Run]) -> list[str]:
    rows = [
        "| Route | Server | round | req/s | p50 ms | p90 ms | p99 ms | errors |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in sorted(runs, key=lambda r: (list(ROUTES).index(r.route.key), r.round, r.server)):
        w = r.result
        rows.append(
            f"| `{r.route.label}` | {r.server} | {r.round + 1} | {w.requests_per_s:,.0f} | "
            f"{_fmt_ms(w, 50)} | {_fmt_ms(w, 90)} | {_fmt_ms(w, 99)} | {w.errors_text()} |"
        )
    return rows


def cpu_table(runs: list[Run]) -> list[str]:
    """Serve's CPU per request by process, median over rounds."""
    serve = [r for r in runs if r.server == "Ray Serve"]
    kinds = sorted(
        {k for r in serve for k in r.cpu_s}, key=lambda k: -sum(r.cpu_s.get(k, 0) for r in serve)
    )
    rows = [
        "| Route | " + " | ".join(kinds) + " |",
        "|---|" + "---:|" * len(kinds),
    ]
    for key in ROUTES:
        mine = [r for r in serve if r.route.key == key]
        if not mine:
            continue
        cells = [
            _median([1000 * r.cpu_s.get(k, 0.0) / max(1, r.result.requests) for r in mine])
            for k in kinds
        ]
        rows.append(f"| `{ROUTES[key].label}` | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return rows


def profile_table(runs: list[Run]) -> list[str]:
    """With --profile: the app processes' CPU per request split by component
    (py-spy's samples as shares of the processes' measured CPU time)."""
    from benchmarks.profile_split import COMPONENTS

    rows = [
        "| Route | Server | app CPU ms/request | " + " | ".join(COMPONENTS) + " |",
        "|---|---|---:|" + "---:|" * len(COMPONENTS),
    ]
    for key in ROUTES:
        for server in ("uvicorn", "Ray Serve"):
            mine = [r for r in runs if r.route.key == key and r.server == server and r.profile]
            if not mine:
                continue
            app = "Api replicas" if server == "Ray Serve" else "uvicorn workers"
            ms = _median([1000 * r.cpu_s.get(app, 0.0) / max(1, r.result.requests) for r in mine])
            shares = [_median([(r.profile or {}).get(c, 0.0) for r in mine]) for c in COMPONENTS]
            rows.append(
                f"| `{ROUTES[key].label}` | {server} | {ms:.2f} | "
                + " | ".join(f"{ms * s:.3f}" for s in shares)
                + " |"
            )
    return rows


def haproxy_table(runs: list[Run]) -> list[str]:
    rows = [
        "| Route | HAProxy queue ms | connect ms | response ms (replica) | total ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for key in ROUTES:
        mine = [r.haproxy for r in runs if r.route.key == key and r.haproxy]
        if mine:
            cells = [_median([m[k] for m in mine]) for k in ("qtime", "ctime", "rtime", "ttime")]
            rows.append(
                f"| `{ROUTES[key].label}` | " + " | ".join(f"{c:.0f}" for c in cells) + " |"
            )
    return rows


def docs_section(
    runs: list[Run],
    *,
    args: argparse.Namespace,
    wrk_ver: str,
    serve_info: str,
    workers: int,
    facts: dict[str, Any],
    idle_cores: float,
    argv: list[str],
    load_before: float,
    load_after: float,
) -> str:
    this_run = (
        f" (this run: `.venv/bin/python -m benchmarks.http_bench {' '.join(argv)}`)" if argv else ""
    )
    lines = [
        *section_head(
            START_MARK,
            "HTTP: Ray Serve vs plain uvicorn, same workers",
            "http_bench.py",
            load_before,
        ),
        f"- 1-minute load average after the run: {load_after:.2f}. The machine is shared: "
        "compare the two servers only within a round (they are measured back to back, "
        "the first of the pair alternating), and read the CPU columns, which do not depend "
        "on what else runs.",
        f"- Load: {wrk_ver}, `-t{THREADS} -c{args.connections} -d{args.duration}s --latency "
        f"--timeout 10s`, each run after a {args.warmup} s warm-up of the same route; "
        f"{args.rounds} rounds; wrk on the same machine.",
        f"- Plain uvicorn: `benchmarks/uvicorn_app.py --workers {workers}` (the app from "
        "`create_app`, in-process rate limiter and trending counter, the model and FAISS "
        "index in each worker; like each Api replica, every worker's index follows the "
        "vectors the embedding worker stores, and the embedding worker is the one "
        "embedding worker beside it, Serve's VectorIndex) on "
        f"{HOST}:{UVICORN_PORT}.",
        f"- Ray Serve: `cairn run --port {SERVE_PORT}` ({serve_info}); the same state folder "
        f"and embedded Postgres (`{_show(STATE_DIR)}`), so both serve the same rows. Both "
        "servers run in the benchmark's session (one CPU autogroup with wrk). While uvicorn "
        f"was measured, the idle Serve processes used {idle_cores:.2f} of a core.",
        f"- Data, seeded through Serve: {facts['patterns']} patterns with upvotes (trending), "
        f"a question with {N_ANSWERS} answers (with votes, one accepted), {N_VOTERS} voters; "
        f"rate limits raised (`{RATE_LIMIT}`). Search routes cycle through "
        f"{len(facts['queries'])} distinct queries ({len(PATTERN_SEARCHES)} for "
        "`?search=`); the upvote run votes on 10 answers of its own per server and round, "
        "each request a change (a new upvote, later a switch); each create is a new pattern "
        "with its own text (its similar-patterns lookup embeds it), and the index is drained "
        "before the next run.",
        "- *CPU ms/request*: CPU time of the server's processes (uvicorn: its workers; Serve: "
        "replicas, HAProxy, actors, Ray's own processes) and Postgres during the run, over "
        "the requests wrk completed. On a machine that runs nothing else, "
        "*uvicorn / Serve CPU* is the throughput ratio to expect.",
        "",
        *ratio_table(runs),
        "",
        "Serve's CPU per request, by process (ms, median over rounds):",
        "",
        *cpu_table(runs),
        "",
    ]
    if any(r.haproxy for r in runs):
        lines += [
            "HAProxy's own timers (`show stat`, averages over the backend's last 1,024 "
            "requests, whole ms):",
            "",
            *haproxy_table(runs),
            "",
        ]
    if any(r.profile for r in runs):
        lines += [
            "Where the app processes' CPU goes (`--profile`: py-spy at 100 Hz on the Api "
            "replicas or uvicorn workers, samples by component as shares of their measured "
            "CPU; ms per request, median over rounds):",
            "",
            *profile_table(runs),
            "",
        ]
    lines += [
        "Every run:",
        "",
        *latency_table(runs),
        "",
        f"Reproduce: `make bench`{this_run}.",
        END_MARK,
    ]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.http_bench",
        description="wrk against the same app under Ray Serve and under plain uvicorn "
        "with as many workers as Serve has Api replicas, in interleaved rounds.",
    )
    wrk_options(parser, connections=16)
    parser.set_defaults(duration=10)
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all routes (3)")
    parser.add_argument(
        "--routes",
        default=",".join(ROUTES),
        help=f"comma-separated, from: {', '.join(ROUTES)} (default: all)",
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="uvicorn workers (0: as many as Api replicas)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy on the Api replicas and uvicorn workers during each measured run",
    )
    parser.add_argument(
        "--keep-profiles",
        default="",
        help="with --profile: keep py-spy's raw stacks in this folder (default: dropped)",
    )
    args = parser.parse_args(argv)
    keys = [k.strip() for k in args.routes.split(",") if k.strip()]
    unknown = [k for k in keys if k not in ROUTES]
    if unknown or not keys:
        parser.error(f"--routes: unknown {unknown or 'empty'}; choose from {', '.join(ROUTES)}")
    if args.duration < 1 or args.warmup < 0 or args.connections < THREADS or args.rounds < 1:
        parser.error(
            f"need --duration >= 1, --warmup >= 0, --rounds >= 1, --connections >= {THREADS}"
        )
    args.route_list = [ROUTES[k] for k in keys]
    return args


def tree_cpu_s(pid: int) -> float:
    import psutil

    total = 0.0
    for proc in process_tree(pid):
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system
    return total


def main(argv: list[str] | None = None) -> int:
    raw_argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    semantic = any(r.key == "semantic" for r in args.route_list)
    bench_env = {**BENCH_ENV, "CAIRN_SEARCH_SEMANTIC": "true" if semantic else "false"}
    env, wrk, wrk_ver = fresh_serve_run(STATE_DIR, bench_env)

    from serve_app.settings import Settings

    cairn_env = {k.removeprefix("CAIRN_").lower(): v for k, v in env.items() if k[:6] == "CAIRN_"}
    bench_settings = Settings.model_validate(cairn_env)
    workers = args.workers or bench_settings.ingress_replicas
    serve_info = (
        f"{bench_settings.ingress_replicas} `Api` replicas, "
        f"{bench_settings.ingress_num_cpus} CPU each, proxy `{bench_settings.serve_proxy}`"
        + (", Embedder and VectorIndex deployments" if semantic else "")
    )
    print(
        f"bench: {wrk_ver}; -t{THREADS} -c{args.connections} -d{args.duration}s "
        f"(+{args.warmup}s warm-up) per run, {args.rounds} rounds; uvicorn with {workers} "
        f"workers; routes: {', '.join(r.key for r in args.route_list)}",
        flush=True,
    )
    load_before = os.getloadavg()[0]
    python = sys.executable
    serve = Server(
        "Ray Serve",
        [python, "-m", "serve_app.launch.cli", "run", "--port", str(SERVE_PORT)],
        SERVE_PORT,
        STATE_DIR / "serve.log",
        STATE_DIR,
        own_session=False,
    )
    plain_cmd = [python, "-m", "benchmarks.uvicorn_app", "--host", HOST]
    plain_cmd += ["--port", str(UVICORN_PORT), "--workers", str(workers)]
    plain = Server(
        "uvicorn",
        plain_cmd + (["--semantic"] if semantic else []),
        UVICORN_PORT,
        STATE_DIR / "uvicorn.log",
        STATE_DIR,
        own_session=False,
    )
    runs: list[Run] = []
    idle: list[tuple[float, float]] = []  # (Serve's CPU s, wall s) while uvicorn ran
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            for port in (int(v) for k, v in BENCH_ENV.items() if k.endswith("_PORT")):
                if port_in_use(port):
                    raise RuntimeError(f"{HOST}:{port} is already in use (a HAProxy port)")
            print("bench: starting Ray Serve (cairn run)", flush=True)
            serve.start(env, SERVE_START_TIMEOUT_S, ready_text="serving on")
            print("bench: seeding through Serve", flush=True)
            facts = seed(serve.base, args.rounds)
            print(f"bench: starting plain uvicorn ({workers} workers)", flush=True)
            plain.start(env, UVICORN_START_TIMEOUT_S)
            wait_index_idle(serve.base)
            for server in (serve, plain):
                check_routes(server.base, facts, semantic)
            for rnd in range(args.rounds):
                for i, route in enumerate(args.route_list):
                    order = (plain, serve) if (rnd + i) % 2 == 0 else (serve, plain)
                    for server in order:
                        assert serve.proc is not None
                        before, t0 = tree_cpu_s(serve.proc.pid), time.monotonic()
                        runs.append(
                            measure(
                                server,
                                route,
                                facts,
                                run=rnd,
                                wrk=wrk,
                                tmp=tmp,
                                args=args,
                                state_dir=STATE_DIR,
                            )
                        )
                        if server is plain:
                            idle.append(
                                (tree_cpu_s(serve.proc.pid) - before, time.monotonic() - t0)
                            )
                        if route.key == "create":
                            wait_index_idle(serve.base)
        finally:
            plain.stop(signal.SIGINT)
            serve.stop(signal.SIGINT)
            left = leftover_processes(state_dir=STATE_DIR)
            if left:
                print("bench: WARNING: still running after both servers exited:", *left, sep="\n  ")
                stop_bench_processes(grace_s=10.0, state_dir=STATE_DIR)
    idle_cores = sum(c for c, _ in idle) / max(1e-9, sum(w for _, w in idle))
    load_after = os.getloadavg()[0]
    section = docs_section(
        runs,
        args=args,
        wrk_ver=wrk_ver,
        serve_info=serve_info,
        workers=workers,
        facts=facts,
        idle_cores=idle_cores,
        argv=raw_argv,
        load_before=load_before,
        load_after=load_after,
    )
    print()
    print(section)
    if not args.no_docs:
        write_docs(section, start_mark=START_MARK, end_mark=END_MARK)
        print(f"bench: results written to {DOCS.relative_to(ROOT)}")
    return 1 if any(r.result.errors for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
