"""A benchmark's service: ``cairn run`` (or another server command) as a
subprocess, its environment, calls to it, and whatever of it outlives it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from benchmarks.harness.results import ROOT, pct
from benchmarks.harness.wrk import ensure_wrk, wrk_version

HOST = "127.0.0.1"
SERVE_START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 120.0
RATE_LIMIT = "100000000/hour"
# Removed from the servers' environment: a benchmark always uses its own
# embedded Postgres and a local Ray.
DROPPED_ENV = ("CAIRN_DATABASE_URL", "CAIRN_PORT", "RAY_ADDRESS")
# Every benchmark's server takes this operator token: /api/health shows the
# parts' figures (index progress, replicas' copies) only to staff and to it.
OPERATOR_TOKEN = "bench-operator-token"
OPERATOR = {"X-Operator-Token": OPERATOR_TOKEN}
# The authenticated read under load (``probe``): requests, and how many at a time.
PROBES = 400
PROBE_CONCURRENCY = 8


def bench_env(state_dir: Path, slot: int, *limits: str, **settings: str) -> dict[str, str]:
    """A benchmark's service settings: its state folder, the loopback host, the
    rate limits named (``"general"``: CAIRN_RATELIMIT_GENERAL) raised out of
    the way, HAProxy's ports moved by ``slot`` (one per benchmark), and more."""
    return {
        "CAIRN_STATE_DIR": str(state_dir),
        "CAIRN_HOST": HOST,
        **{f"CAIRN_RATELIMIT_{name.upper()}": RATE_LIMIT for name in limits},
        "CAIRN_HAPROXY_STATS_PORT": str(18404 + 10 * slot),
        "CAIRN_HAPROXY_METRICS_PORT": str(19101 + 10 * slot),
        "CAIRN_FALLBACK_PROXY_PORT": str(18500 + 10 * slot),
        **settings,
    }


def server_env(bench_env: dict[str, str]) -> dict[str, str]:
    """This environment without DROPPED_ENV (dropped from this process's too),
    with the benchmark's settings."""
    for key in DROPPED_ENV:
        os.environ.pop(key, None)
    env = dict(os.environ)
    env["CAIRN_OPERATOR_TOKEN"] = OPERATOR_TOKEN
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


def health(base: str) -> dict[str, Any] | None:
    """/api/health as the operator sees it (the search parts' progress, the
    replicas' copies), or None while it does not answer 200."""
    with contextlib.suppress(OSError):
        status, body = http_json("GET", base + "/api/health", timeout=10, headers=OPERATOR)
        if status == 200 and isinstance(body, dict):
            return body
    return None


def api_call(base: str, method: str, path: str, key: str | None = None, body: Any = None) -> Any:
    """One API call with an optional key; its ``data`` (or whole body); raises on >= 300."""
    status, data = http_json(method, base + path, body, 30, bearer(key) if key else {})
    if status >= 300:
        raise RuntimeError(f"{method} {path} answered {status}: {data}")
    return data["data"] if isinstance(data, dict) and "data" in data else data


def new_agent(base: str, name: str) -> dict[str, Any]:
    """A new agent (its ``api_key``, ``username``, ``agent_id``, …)."""
    return dict(api_call(base, "POST", "/api/agents/register", body={"name": name}))


async def register(http: httpx.AsyncClient, name: str) -> dict[str, Any]:
    response = await http.post("/api/agents/register", json={"name": name})
    response.raise_for_status()
    return dict(response.json()["data"])


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def probe(
    http: httpx.AsyncClient, key: str, *, budget_s: float = 180, until: Any = None, min_s: float = 0
) -> dict[str, Any]:
    """An authenticated read, ``GET /api/agents/me``, PROBE_CONCURRENCY at a
    time: while ``until`` (an event) is unset, then PROBES more, and on until
    ``min_s`` have passed; ``budget_s`` at most. Its latency (ms) and its
    failures by kind (a status, an error)."""
    latencies: list[float] = []
    failed: Counter[str] = Counter()
    after = 0  # requests sent once ``until`` was set (or from the start)
    begun = time.perf_counter()

    def more() -> bool:
        nonlocal after
        elapsed = time.perf_counter() - begun
        if elapsed > budget_s:
            return False
        if until is not None and not until.is_set():
            return True
        after += 1
        return after <= PROBES or elapsed < min_s

    async def worker() -> None:
        while more():
            t0 = time.perf_counter()
            try:
                response = await http.get("/api/agents/me", headers=bearer(key), timeout=10.0)
            except httpx.HTTPError as exc:
                timeout = isinstance(exc, httpx.TimeoutException)
                failed["timeout" if timeout else type(exc).__name__] += 1
                continue
            if response.status_code == 200:
                latencies.append((time.perf_counter() - t0) * 1000)
            else:
                failed[str(response.status_code)] += 1

    await asyncio.gather(*(worker() for _ in range(PROBE_CONCURRENCY)))
    elapsed = time.perf_counter() - begun
    return {
        "requests": len(latencies) + sum(failed.values()),
        "seconds": elapsed,
        "rps": len(latencies) / elapsed if elapsed else float("nan"),
        "mean": sum(latencies) / len(latencies) if latencies else float("nan"),
        "p50": pct(latencies, 50),
        "p99": pct(latencies, 99),
        "max": max(latencies, default=float("nan")),
        "failed": dict(failed),
    }


def _terminate(signum: int, _: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so the servers a benchmark started are stopped."""
    signal.signal(signal.SIGTERM, _terminate)


def fresh_state(state_dir: Path) -> None:
    """An empty state folder (its own new database), refused while processes
    of an earlier run still use it."""
    if leftover_processes(wait_s=0, state_dir=state_dir):
        raise SystemExit(f"bench: processes of an earlier run still use {state_dir}")
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.mkdir(parents=True)


def fresh_serve_run(state_dir: Path, bench_env: dict[str, str]) -> tuple[dict[str, str], str, str]:
    """A benchmark's start on an empty state folder: its environment, wrk, wrk's version."""
    stop_on_sigterm()
    env = server_env(bench_env)
    wrk = ensure_wrk()
    fresh_state(state_dir)
    return env, wrk, wrk_version(wrk)


def prepare_here(bench_env: dict[str, str]) -> tuple[dict[str, str], Any, Any]:
    """For a benchmark that seeds the service's database itself: the server's
    environment, this process's settings and its prepared state (the embedded
    Postgres migrated, which this process stays attached to: ``keep_postgres``)."""
    env = server_env(bench_env)
    os.environ.update(bench_env)
    from serve_app.launch.bootstrap import prepare
    from serve_app.settings import get_settings

    get_settings.cache_clear()
    settings = get_settings()
    return env, settings, prepare(settings)


@dataclass
class Server:
    """A server subprocess, its output to a log file and a ring of lines.
    ``own_session`` False: it stays in this session (this process's CPU
    autogroup, with wrk) in a process group of its own; either way a Ctrl-C
    reaches it only through stop(), so Ray is not interrupted mid-shutdown."""

    name: str
    cmd: list[str]
    port: int
    log_path: Path
    state_dir: Path
    own_session: bool = True
    lines: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    ready_s: float = 0.0
    _reader: threading.Thread | None = None
    _log: IO[str] | None = None

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, env: dict[str, str], timeout: float, ready_text: str | None = None) -> None:
        if port_in_use(self.port):
            raise RuntimeError(f"{HOST}:{self.port} is already in use; stop what runs there")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=self.own_session,
            process_group=None if self.own_session else 0,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        while time.monotonic() < t0 + timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited while starting:\n{self.tail()}")
            if (ready_text and any(ready_text in line for line in self.lines)) or self._healthy():
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
        with contextlib.suppress(OSError):
            return http_json("GET", f"{self.base}/api/health", timeout=3)[0] == 200
        return False

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

    def stop(self) -> None:
        """Ctrl-C to the server process itself (not its group), and wait for it to
        exit; after STOP_TIMEOUT_S it is killed and what it left behind is stopped."""
        proc = self.proc
        if proc is None:
            return
        t0 = time.monotonic()
        if proc.poll() is None:
            print(f"bench: stopping {self.name} (SIGINT to pid {proc.pid})", flush=True)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                print(f"bench: {self.name} still running after {STOP_TIMEOUT_S:.0f}s; killing")
                proc.kill()
                proc.wait(timeout=30)
                stop_bench_processes(grace_s=10.0, state_dir=self.state_dir)
        if self._reader is not None:
            self._reader.join(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        took = time.monotonic() - t0
        print(f"bench: {self.name} exited with {proc.returncode} after {took:.1f}s", flush=True)
        self.proc = None


def bench_processes(state_dir: Path) -> list[Any]:
    """Processes tied to a benchmark's state folder (Ray, HAProxy, Postgres), by their
    command line or their CAIRN_STATE_DIR; none of them is this process."""
    import psutil

    marker, mine, found = str(state_dir), {os.getpid(), os.getppid()}, []
    for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
        with contextlib.suppress(psutil.Error):
            cmdline, env = proc.info.get("cmdline") or [], proc.info.get("environ") or {}
            ours = any(part == marker or part.startswith(marker + os.sep) for part in cmdline)
            if proc.pid not in mine and (ours or env.get("CAIRN_STATE_DIR") == marker):
                found.append(proc)
    return found


def _describe(proc: Any) -> str:
    with contextlib.suppress(Exception):
        return f"{proc.pid} {' '.join(proc.cmdline())[:120]}"
    return str(proc.pid)


def leftover_processes(*, state_dir: Path, wait_s: float = 15.0) -> list[str]:
    """bench_processes() still alive after giving them ``wait_s`` to finish exiting."""
    deadline = time.monotonic() + wait_s
    while True:
        found = bench_processes(state_dir)
        if not found or time.monotonic() > deadline:
            return [_describe(p) for p in found]
        time.sleep(1.0)


def stop_bench_processes(*, grace_s: float, state_dir: Path) -> list[str]:
    """Terminate what a killed server left behind in the bench state folder:
    only the roots (a Postgres postmaster, not its backends; a raylet, not its
    workers); what is still alive after ``grace_s`` is killed."""
    import psutil

    found = bench_processes(state_dir)
    pids, roots = {p.pid for p in found}, []
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


def ports_free(env: dict[str, str], *ports: int) -> None:
    """Refuse to start while any of ``ports``, or of the ports the settings
    ``env`` name (HAProxy's stats and metrics, …), is in use."""
    named = [int(v) for k, v in env.items() if k.startswith("CAIRN_") and k.endswith("_PORT")]
    for port in [*ports, *named]:
        if port_in_use(port):
            raise SystemExit(f"bench: {HOST}:{port} is already in use")


def stop_servers(servers: list[Server], state_dir: Path, keep_postgres: bool = False) -> None:
    """Stop ``servers`` with Ctrl-C, then anything of the run left behind in
    ``state_dir`` (but its embedded Postgres with ``keep_postgres``: this
    process is attached to it)."""
    for server in servers:
        server.stop()
    left = leftover_processes(state_dir=state_dir)
    if keep_postgres:
        left = [p for p in left if "bin/postgres" not in p]
    if left:
        print("bench: WARNING: still running:", *left, sep="\n  ")
        stop_bench_processes(grace_s=10.0, state_dir=state_dir)


@contextlib.contextmanager
def serve_running(
    port: int, env: dict[str, str], state_dir: Path, *, keep_postgres: bool = False
) -> Iterator[Server]:
    """``cairn run --port PORT`` with ``env`` for the block (``stop_servers`` after it)."""
    ports_free(env, port)
    cmd = [str(Path(sys.executable).parent / "cairn"), "run", "--port", str(port)]
    serve = Server("Ray Serve", cmd, port, state_dir / "serve.log", state_dir=state_dir)
    try:
        serve.start(env, SERVE_START_TIMEOUT_S, ready_text="serving on")
        yield serve
    finally:
        stop_servers([serve], state_dir, keep_postgres)
