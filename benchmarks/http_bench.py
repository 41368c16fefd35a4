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
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
STATE_DIR = ROOT / ".cairn" / "bench"
DOCS = ROOT / "docs" / "benchmarks.md"
START_MARK = "<!-- http-bench:start -->"
END_MARK = "<!-- http-bench:end -->"

HOST = "127.0.0.1"
UVICORN_PORT = 8101
SERVE_PORT = 8102
SERVE_START_TIMEOUT_S = 180.0
UVICORN_START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 120.0

THREADS = 2
RATE_LIMIT = "100000000/hour"
BENCH_ENV = {
    "CAIRN_STATE_DIR": str(STATE_DIR),
    "CAIRN_HOST": HOST,
    "CAIRN_RATELIMIT_REGISTRATION": RATE_LIMIT,
    "CAIRN_RATELIMIT_GENERAL": RATE_LIMIT,
    "CAIRN_HAPROXY_STATS_PORT": "18414",
    "CAIRN_HAPROXY_METRICS_PORT": "19111",
    "CAIRN_FALLBACK_PROXY_PORT": "18510",
}
# Removed from the servers' environment: the benchmark always uses its own
# embedded Postgres and a local Ray.
DROPPED_ENV = ("CAIRN_DATABASE_URL", "CAIRN_PORT", "RAY_ADDRESS")

REGISTER_BODY = {"name": "bench agent"}
POST_SCRIPT = """\
wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
"""


@dataclass(frozen=True)
class Route:
    key: str
    label: str
    method: str


ROUTES = {
    "profile": Route("profile", "GET /api/agents/{username}", "GET"),
    "register": Route("register", "POST /api/agents/register", "POST"),
}


@dataclass
class WrkResult:
    requests_per_s: float
    requests: int
    seconds: float
    latency_ms: dict[int, float]  # percentile -> ms
    non_2xx_3xx: int = 0
    socket_errors: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.non_2xx_3xx + sum(self.socket_errors.values())

    def errors_text(self) -> str:
        if not self.errors:
            return "0"
        parts = []
        if self.non_2xx_3xx:
            parts.append(f"{self.non_2xx_3xx} non-2xx/3xx")
        parts += [f"{n} {kind}" for kind, n in self.socket_errors.items() if n]
        return ", ".join(parts)


@dataclass
class Measurement:
    route: Route
    server: str
    result: WrkResult


# --------------------------------------------------------------------------- wrk


def ensure_wrk() -> str:
    """The wrk binary; installed with apt-get (Debian package ``wrk``) if missing."""
    found = shutil.which("wrk")
    if found:
        return found
    print("bench: wrk not found; installing it: apt-get install -y wrk", flush=True)
    apt = ["apt-get", "install", "-y", "-q", "wrk"]
    if subprocess.run(apt, check=False).returncode != 0:
        print("bench: install failed; running apt-get update first", flush=True)
        subprocess.run(["apt-get", "update", "-q"], check=True)
        subprocess.run(apt, check=True)
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("bench: wrk is still not on PATH after apt-get install")
    print(f"bench: installed {found}", flush=True)
    return found


def wrk_version(wrk: str) -> str:
    out = subprocess.run([wrk, "-v"], capture_output=True, text=True, check=False)
    text = (out.stdout + out.stderr).strip().splitlines()
    # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer" -> "wrk debian/4.1.0-3+b2"
    return " ".join(text[0].split()[:2]) if text else "wrk"


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_NUM_SUFFIX = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9}


def _ms(value: str, unit: str) -> float:
    return float(value) * _UNITS_MS[unit]


def parse_wrk(output: str) -> WrkResult:
    """Parse the text wrk prints with ``--latency``."""
    rps = re.search(r"^Requests/sec:\s+([\d.]+)\s*$", output, re.M)
    total = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h),", output, re.M)
    if not rps or not total:
        raise ValueError(f"could not parse wrk output:\n{output}")
    latency: dict[int, float] = {}
    dist = output.split("Latency Distribution", 1)
    if len(dist) == 2:
        for pct, value, unit in re.findall(
            r"^\s+(\d+)%\s+([\d.]+)(us|ms|s|m|h)\s*$", dist[1], re.M
        ):
            latency[int(pct)] = _ms(value, unit)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    sock = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    socket_errors = (
        dict(zip(("connect", "read", "write", "timeout"), map(int, sock.groups()), strict=True))
        if sock
        else {}
    )
    return WrkResult(
        requests_per_s=float(rps.group(1)),
        requests=int(total.group(1)),
        seconds=_ms(total.group(2), total.group(3)) / 1000.0,
        latency_ms=latency,
        non_2xx_3xx=int(non2xx.group(1)) if non2xx else 0,
        socket_errors=socket_errors,
    )


def run_wrk(
    wrk: str, url: str, *, duration: int, connections: int, script: Path | None
) -> tuple[WrkResult, str]:
    cmd = [
        wrk,
        f"-t{THREADS}",
        f"-c{connections}",
        f"-d{duration}s",
        "--latency",
    ]
    if script is not None:
        cmd += ["-s", str(script)]
    cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return parse_wrk(out.stdout), out.stdout


# ---------------------------------------------------------------- the servers


def server_env(bench_env: dict[str, str] = BENCH_ENV) -> dict[str, str]:
    """This environment without DROPPED_ENV, with the benchmark's settings."""
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update(bench_env)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def http_json(
    method: str,
    url: str,
    body: Any = None,
    timeout: float = 10.0,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def api_call(base: str, method: str, path: str, key: str | None = None, body: Any = None) -> Any:
    """One API call with an optional key; its ``data`` (or whole body); raises on >= 300."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    status, data = http_json(method, base + path, body, timeout=30, headers=headers)
    if status >= 300:
        raise RuntimeError(f"{method} {path} answered {status}: {data}")
    return data["data"] if isinstance(data, dict) and "data" in data else data


def fresh_serve_run(state_dir: Path, bench_env: dict[str, str]) -> tuple[dict[str, str], str, str]:
    """The start of a benchmark on its own service: its environment, wrk and
    wrk's version, and an empty state folder (refused while a run uses it)."""
    stop_on_sigterm()
    env = server_env(bench_env)
    for key in DROPPED_ENV:
        os.environ.pop(key, None)
    wrk = ensure_wrk()
    if leftover_processes(wait_s=0, state_dir=state_dir):
        raise SystemExit(f"bench: processes of an earlier run still use {state_dir}")
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)
    return env, wrk, wrk_version(wrk)


class Server:
    """A server subprocess whose output goes to a log file and a ring of lines."""

    def __init__(
        self, name: str, cmd: list[str], port: int, log_path: Path, state_dir: Path = STATE_DIR
    ) -> None:
        self.name = name
        self.state_dir = state_dir
        self.cmd = cmd
        self.port = port
        self.base = f"http://{HOST}:{port}"
        self.log_path = log_path
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._log: IO[str] | None = None
        self.ready_s = 0.0
        self.stop_s = 0.0

    def start(self, env: dict[str, str], timeout: float, ready_text: str | None = None) -> None:
        if port_in_use(self.port):
            raise RuntimeError(f"{HOST}:{self.port} is already in use; stop what runs there")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own session: a Ctrl-C on the benchmark reaches the server only
            # through stop(), so Ray's own processes are not interrupted mid-shutdown.
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} while starting:\n{self.tail()}"
                )
            if ready_text and any(ready_text in line for line in self.lines):
                break
            if self._healthy():
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s:\n{self.tail()}")
        # "serving on" is printed after cmd_run's own health check; check anyway.
        if not self._healthy():
            raise RuntimeError(f"{self.name}: /api/health does not answer 200:\n{self.tail()}")
        self.ready_s = time.monotonic() - t0
        print(f"bench: {self.name} ready on {self.base} in {self.ready_s:.1f}s", flush=True)

    def _healthy(self) -> bool:
        try:
            status, _ = http_json("GET", f"{self.base}/api/health", timeout=3)
        except OSError:
            return False
        return status == 200

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if len(self.lines) > 2000:
                del self.lines[:1000]
            if self._log is not None:
                self._log.write(line)
                self._log.flush()

    def tail(self, n: int = 40) -> str:
        return "\n".join(f"  | {line}" for line in self.lines[-n:]) + f"\n  (log: {self.log_path})"

    def stop(self, sig: signal.Signals = signal.SIGINT) -> None:
        """Signal the server process itself (not its group) and wait for it to exit;
        after STOP_TIMEOUT_S it is killed and what it left behind is stopped."""
        proc = self.proc
        if proc is None:
            return
        t0 = time.monotonic()
        if proc.poll() is None:
            print(f"bench: stopping {self.name} ({sig.name} to pid {proc.pid})", flush=True)
            proc.send_signal(sig)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                print(f"bench: {self.name} still running after {STOP_TIMEOUT_S:.0f}s; killing")
                proc.kill()
                proc.wait(timeout=30)
                stop_bench_processes(grace_s=10.0, state_dir=self.state_dir)
        self.stop_s = time.monotonic() - t0
        if self._reader is not None:
            self._reader.join(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        print(
            f"bench: {self.name} exited with {proc.returncode} after {self.stop_s:.1f}s",
            flush=True,
        )
        self.proc = None


def bench_processes(state_dir: Path = STATE_DIR) -> list[Any]:
    """Processes tied to the bench state folder (Ray, HAProxy, Postgres), by their
    command line or their CAIRN_STATE_DIR; none of them is this process."""
    import psutil

    marker = str(state_dir)
    mine = {os.getpid(), os.getppid()}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
        if proc.pid in mine:
            continue
        with contextlib.suppress(psutil.Error):
            cmdline = proc.info.get("cmdline") or []
            env = proc.info.get("environ") or {}
            if (
                any(part == marker or part.startswith(marker + os.sep) for part in cmdline)
                or env.get("CAIRN_STATE_DIR") == marker
            ):
                found.append(proc)
    return found


def _describe(proc: Any) -> str:
    with contextlib.suppress(Exception):
        return f"{proc.pid} {' '.join(proc.cmdline())[:120]}"
    return str(proc.pid)


def leftover_processes(wait_s: float = 15.0, state_dir: Path = STATE_DIR) -> list[str]:
    """bench_processes() still alive after giving them ``wait_s`` to finish exiting."""
    deadline = time.monotonic() + wait_s
    while True:
        found = bench_processes(state_dir)
        if not found or time.monotonic() > deadline:
            return [_describe(p) for p in found]
        time.sleep(1.0)


def stop_bench_processes(grace_s: float, state_dir: Path = STATE_DIR) -> list[str]:
    """Terminate what a killed server left behind in the bench state folder.

    Only the roots are signalled (a Postgres postmaster, not its backends; a
    raylet, not its workers); what is still alive after ``grace_s`` is killed.
    """
    import psutil

    found = bench_processes(state_dir)
    pids = {p.pid for p in found}
    roots = []
    for proc in found:
        with contextlib.suppress(psutil.Error):
            if proc.ppid() not in pids:
                roots.append(proc)
    described = [_describe(p) for p in roots]
    for proc in roots:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    psutil.wait_procs(roots, timeout=grace_s)
    for proc in bench_processes(state_dir):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if described:
        print("bench: stopped processes left in the bench state folder:", *described, sep="\n  ")
    return described


# ------------------------------------------------------------ the measurement


def post_script(tmp: Path) -> Path:
    path = tmp / "register.lua"
    body = json.dumps(REGISTER_BODY, separators=(",", ":"))
    path.write_text(POST_SCRIPT.format(body=body))
    return path


def measure_url(
    wrk: str,
    label: str,
    url: str,
    *,
    duration: int,
    warmup: int,
    connections: int,
    script: Path | None,
) -> WrkResult:
    """A warm-up run, then the measured one; prints a line (and wrk's own output
    when there were errors)."""
    if warmup:
        run_wrk(wrk, url, duration=warmup, connections=connections, script=script)
    result, raw = run_wrk(wrk, url, duration=duration, connections=connections, script=script)
    print(
        f"bench: {label:<50} {result.requests_per_s:>9.1f} req/s  "
        f"p50 {result.latency_ms.get(50, float('nan')):.2f} ms  "
        f"p99 {result.latency_ms.get(99, float('nan')):.2f} ms  "
        f"errors {result.errors_text()}",
        flush=True,
    )
    if result.errors:
        print(raw, flush=True)
    return result


def measure_server(
    server: Server,
    routes: list[Route],
    *,
    wrk: str,
    script: Path,
    duration: int,
    warmup: int,
    connections: int,
) -> Iterator[Measurement]:
    status, reply = http_json("POST", f"{server.base}/api/agents/register", REGISTER_BODY)
    if status != 201:
        raise RuntimeError(f"{server.name}: register answered {status}: {reply}")
    username = reply["data"]["username"]
    status, reply = http_json("GET", f"{server.base}/api/agents/{username}")
    if status != 200:
        raise RuntimeError(f"{server.name}: profile answered {status}: {reply}")
    for route in routes:
        if route.key == "profile":
            url, lua = f"{server.base}/api/agents/{username}", None
        else:
            url, lua = f"{server.base}/api/agents/register", script
        result = measure_url(
            wrk,
            f"{server.name:<13} {route.label}",
            url,
            duration=duration,
            warmup=warmup,
            connections=connections,
            script=lua,
        )
        yield Measurement(route, server.name, result)


@contextlib.contextmanager
def serve_running(
    port: int, env: dict[str, str], state_dir: Path, *, keep_postgres: bool = False
) -> Iterator[Server]:
    """``cairn run --port PORT`` with ``env`` for the block; stopped with Ctrl-C
    after it, and anything of the run left behind is stopped too (but the
    embedded Postgres when ``keep_postgres``: this process is attached to it)."""
    ports = [port] + [
        int(v) for k, v in env.items() if k.startswith("CAIRN_") and k.endswith("_PORT")
    ]
    for used in ports:
        if port_in_use(used):
            raise SystemExit(f"bench: {HOST}:{used} is already in use")
    serve = Server(
        "Ray Serve",
        [str(Path(sys.executable).parent / "cairn"), "run", "--port", str(port)],
        port,
        state_dir / "serve.log",
        state_dir=state_dir,
    )
    try:
        serve.start(env, SERVE_START_TIMEOUT_S, ready_text="serving on")
        yield serve
    finally:
        serve.stop(signal.SIGINT)
        left = leftover_processes(state_dir=state_dir)
        if keep_postgres:
            left = [p for p in left if "bin/postgres" not in p]
        if left:
            print("bench: WARNING: still running:", *left, sep="\n  ")
            stop_bench_processes(grace_s=10.0, state_dir=state_dir)


# ------------------------------------------------------------------ reporting


def section_head(start_mark: str, title: str, script: str, load_before: float) -> list[str]:
    """The first lines of a benchmark's docs section: mark, title, provenance,
    date and machine."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [
        start_mark,
        f"## {title}",
        "",
        f"_Written by `benchmarks/{script}`; rerun to replace this section._",
        "",
        f"- Date: {now}",
        machine_line(load_before),
    ]


def serve_table(rows: list[tuple[str, WrkResult]]) -> list[str]:
    """A Markdown table of routes measured through Serve."""
    lines = [
        "| Through Serve | req/s | p50 ms | p90 ms | p99 ms | errors |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, r in rows:
        lines.append(
            f"| `{label}` | {r.requests_per_s:,.0f} | {r.latency_ms.get(50, 0):.2f} | "
            f"{r.latency_ms.get(90, 0):.2f} | {r.latency_ms.get(99, 0):.2f} | "
            f"{r.errors_text()} |"
        )
    return lines


def machine_line(load_before: float) -> str:
    """The docs' line about the machine a benchmark ran on."""
    return (
        f"- Machine: `nproc` = {len(os.sched_getaffinity(0))}, {cpu_model()}; "
        f"Linux {platform.release()}, Python {platform.python_version()}; 1-minute load "
        f"average before the run {load_before:.2f}"
    )


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _fmt_ms(result: WrkResult, pct: int) -> str:
    value = result.latency_ms.get(pct)
    return f"{value:.2f}" if value is not None else "n/a"


def _show(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def results_table(measurements: list[Measurement]) -> list[str]:
    rows = [
        "| Route | Server | req/s | p50 ms | p90 ms | p99 ms | errors |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for m in measurements:
        r = m.result
        rows.append(
            f"| `{m.route.label}` | {m.server} | {r.requests_per_s:,.0f} | {_fmt_ms(r, 50)} | "
            f"{_fmt_ms(r, 90)} | {_fmt_ms(r, 99)} | {r.errors_text()} |"
        )
    return rows


def ratio_rows(measurements: list[Measurement]) -> list[tuple[str, float, float]]:
    """(route label, Serve/uvicorn req/s, Serve/uvicorn p50) per route measured on both."""
    by: dict[tuple[str, str], WrkResult] = {(m.route.key, m.server): m.result for m in measurements}
    out = []
    for route in ROUTES.values():
        plain, serve = by.get((route.key, "uvicorn")), by.get((route.key, "Ray Serve"))
        if plain is None or serve is None or not plain.requests_per_s:
            continue
        p50 = (
            serve.latency_ms[50] / plain.latency_ms[50]
            if plain.latency_ms.get(50) and 50 in serve.latency_ms
            else float("nan")
        )
        out.append((route.label, serve.requests_per_s / plain.requests_per_s, p50))
    return out


def ratio_table(measurements: list[Measurement]) -> list[str]:
    rows = [
        "| Route | Serve / uvicorn req/s | Serve / uvicorn p50 |",
        "|---|---:|---:|",
    ]
    for label, rps, p50 in ratio_rows(measurements):
        rows.append(f"| `{label}` | {rps:.2f}x | {p50:.2f}x |")
    return rows


def docs_section(
    measurements: list[Measurement],
    *,
    args: argparse.Namespace,
    wrk_ver: str,
    serve_info: str,
    argv: list[str],
    load_before: float,
) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    this_run = (
        f" (this run: `.venv/bin/python -m benchmarks.http_bench {' '.join(argv)}`)" if argv else ""
    )
    lines = [
        START_MARK,
        "## HTTP: plain uvicorn vs Ray Serve",
        "",
        "_Written by `benchmarks/http_bench.py`; rerun to replace this section._",
        "",
        f"- Date: {now}",
        machine_line(load_before) + " (other work on the machine skews results)",
        f"- Load: {wrk_ver}, `-t{THREADS} -c{args.connections} -d{args.duration}s --latency`, "
        f"after a {args.warmup} s warm-up run of the same route; wrk runs on the same machine "
        "as the server, and the two servers are measured one after the other.",
        "- Plain uvicorn: `benchmarks/uvicorn_app.py` (`create_app` + `uvicorn.run`, one "
        f"worker, in-process rate limiter) on {HOST}:{UVICORN_PORT}.",
        f"- Ray Serve: `cairn run --port {SERVE_PORT}` ({serve_info}).",
        f"- Rate limits raised for the run (else register is refused after 10/hour): "
        f"`CAIRN_RATELIMIT_REGISTRATION={RATE_LIMIT}`, `CAIRN_RATELIMIT_GENERAL={RATE_LIMIT}`; "
        f"state and embedded Postgres in `{_show(STATE_DIR)}`.",
        "- Routes: `GET /api/agents/{username}` reads one registered agent's profile; "
        f"`POST /api/agents/register` with body `{json.dumps(REGISTER_BODY)}` creates an "
        "agent and an API key per request.",
        "",
        *results_table(measurements),
        "",
        *ratio_table(measurements),
        "",
        f"Reproduce: `make bench`{this_run}.",
        END_MARK,
    ]
    return "\n".join(lines) + "\n"


def write_docs(
    section: str, path: Path = DOCS, start_mark: str = START_MARK, end_mark: str = END_MARK
) -> None:
    """Put ``section`` (which starts and ends with the marks) into the docs page,
    replacing what stood between the marks."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start, end = text.find(start_mark), text.find(end_mark)
    if start != -1 and end > start:
        text = text[:start] + section + text[end + len(end_mark) :].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# ----------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.http_bench",
        description="wrk against the same app under plain uvicorn and under Ray Serve.",
    )
    wrk_options(parser, connections=32)
    parser.add_argument(
        "--routes",
        default=",".join(ROUTES),
        help=f"comma-separated, from: {', '.join(ROUTES)} (default: all)",
    )
    args = parser.parse_args(argv)
    keys = [k.strip() for k in args.routes.split(",") if k.strip()]
    unknown = [k for k in keys if k not in ROUTES]
    if unknown or not keys:
        parser.error(f"--routes: unknown {unknown or 'empty'}; choose from {', '.join(ROUTES)}")
    if args.duration < 1 or args.warmup < 0 or args.connections < THREADS:
        parser.error(f"need --duration >= 1, --warmup >= 0, --connections >= {THREADS}")
    args.route_list = [ROUTES[k] for k in keys]
    return args


def wrk_options(parser: argparse.ArgumentParser, *, connections: int) -> None:
    """The options every benchmark takes: wrk's run and whether to write the docs."""
    parser.add_argument("--duration", type=int, default=15, help="seconds per route (15)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up seconds per route (3)")
    parser.add_argument(
        "--connections", type=int, default=connections, help=f"wrk connections ({connections})"
    )
    parser.add_argument(
        "--no-docs", action="store_true", help="print only; leave docs/benchmarks.md alone"
    )


def _terminate(signum: int, _: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the servers a benchmark started are stopped."""
    signal.signal(signal.SIGTERM, _terminate)


def main(argv: list[str] | None = None) -> int:
    raw_argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    stop_on_sigterm()
    wrk = ensure_wrk()
    wrk_ver = wrk_version(wrk)
    env = server_env()
    bin_dir = Path(sys.executable).parent

    from serve_app.settings import Settings

    cairn_env = {k.removeprefix("CAIRN_").lower(): v for k, v in env.items() if k[:6] == "CAIRN_"}
    bench_settings = Settings.model_validate(cairn_env)
    serve_info = (
        f"{bench_settings.ingress_replicas} `Api` replicas, "
        f"{bench_settings.ingress_num_cpus} CPU each, proxy `{bench_settings.serve_proxy}`"
    )
    print(
        f"bench: {wrk_ver}; -t{THREADS} -c{args.connections} -d{args.duration}s "
        f"(+{args.warmup}s warm-up) per route; routes: "
        f"{', '.join(r.label for r in args.route_list)}",
        flush=True,
    )
    print(
        f"bench: rate limits raised for the run: CAIRN_RATELIMIT_REGISTRATION={RATE_LIMIT}, "
        f"CAIRN_RATELIMIT_GENERAL={RATE_LIMIT}; state in {STATE_DIR}",
        flush=True,
    )

    load_before = os.getloadavg()[0]
    print(f"bench: 1-minute load average now {load_before:.2f}", flush=True)
    measurements: list[Measurement] = []
    plain = Server(
        "uvicorn",
        [
            str(bin_dir / "python"),
            "-m",
            "benchmarks.uvicorn_app",
            "--host",
            HOST,
            "--port",
            str(UVICORN_PORT),
        ],
        UVICORN_PORT,
        STATE_DIR / "uvicorn.log",
    )
    serve = Server(
        "Ray Serve",
        [str(bin_dir / "cairn"), "run", "--port", str(SERVE_PORT)],
        SERVE_PORT,
        STATE_DIR / "serve.log",
    )
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        script = post_script(Path(tmp))
        opts: dict[str, Any] = {
            "wrk": wrk,
            "script": script,
            "duration": args.duration,
            "warmup": args.warmup,
            "connections": args.connections,
        }
        try:
            for port in (int(BENCH_ENV[k]) for k in BENCH_ENV if k.endswith("_PORT")):
                if port_in_use(port):
                    raise RuntimeError(f"{HOST}:{port} is already in use (a HAProxy port)")
            print("bench: starting plain uvicorn (one worker)", flush=True)
            plain.start(env, UVICORN_START_TIMEOUT_S)
            measurements += measure_server(plain, args.route_list, **opts)
            plain.stop(signal.SIGINT)

            print("bench: starting Ray Serve (cairn run)", flush=True)
            serve.start(env, SERVE_START_TIMEOUT_S, ready_text="serving on")
            measurements += measure_server(serve, args.route_list, **opts)
        finally:
            plain.stop(signal.SIGINT)
            serve.stop(signal.SIGINT)
            left = leftover_processes()
            if left:
                print("bench: WARNING: still running after both servers exited:", *left, sep="\n  ")
                stop_bench_processes(grace_s=10.0)

    print()
    print("\n".join(results_table(measurements)))
    print()
    print("\n".join(ratio_table(measurements)))
    print(
        f"\nRay Serve: {serve_info}; ready in {serve.ready_s:.1f}s, stopped in {serve.stop_s:.1f}s"
    )
    if not args.no_docs:
        write_docs(
            docs_section(
                measurements,
                args=args,
                wrk_ver=wrk_ver,
                serve_info=serve_info,
                argv=raw_argv,
                load_before=load_before,
            )
        )
        print(f"bench: results written to {DOCS.relative_to(ROOT)}")
    return 1 if any(m.result.errors for m in measurements) else 0


if __name__ == "__main__":
    sys.exit(main())
