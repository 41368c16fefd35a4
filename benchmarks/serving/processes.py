"""Where a server's CPU goes: its processes by kind (``process_kind``),
their CPU time over a run (``CpuMeter``, ``tree_cpu_s``), py-spy on the app
processes (``py_spy``) and HAProxy's own timers (``haproxy_timers``)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import Server


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
    if name == "redis-server":
        return "Redis"
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
    """CPU seconds of a server's processes (its process tree, the bench's
    Postgres, and ``extra``: its Redis) between start() and stop(), by process_kind."""

    def __init__(self, server: Server, extra: tuple[int, ...] = ()) -> None:
        self.server, self.extra = server, extra
        self._before: dict[int, tuple[str, float]] = {}

    def _sample(self) -> dict[int, tuple[str, float]]:
        import psutil

        assert self.server.proc is not None
        out: dict[int, tuple[str, float]] = {}
        procs = [*process_tree(self.server.proc.pid), *postgres_processes(self.server.state_dir)]
        procs += [p for pid in self.extra for p in process_tree(pid)]
        for proc in procs:
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


@contextlib.contextmanager
def py_spy(server: Server, seconds: int, out: Path) -> Iterator[list[Path]]:
    """``py-spy record`` (raw collapsed stacks, 100 Hz) meanwhile on each
    process that runs the app: the Api replicas, or the uvicorn workers."""
    assert server.proc is not None
    kinds = ("Api replicas", "uvicorn workers")
    pids = [p.pid for p in process_tree(server.proc.pid) if process_kind(p) in kinds]
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    files = [out.with_name(f"{out.name}-{pid}.txt") for pid in pids]
    record = [exe, "record", "--nonblocking", "-r", "100", "-d", str(seconds), "-f", "raw"]
    null, targets = subprocess.DEVNULL, zip(pids, files, strict=True)
    procs = [
        subprocess.Popen([*record, "-o", str(path), "-p", str(pid)], stdout=null, stderr=null)
        for pid, path in targets
    ]
    try:
        yield files
    finally:
        for proc in procs:
            try:
                proc.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                proc.kill()


def tree_cpu_s(pid: int) -> float:
    import psutil

    total = 0.0
    for proc in process_tree(pid):
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system
    return total


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
