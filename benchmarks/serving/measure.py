"""One measured run of a route on a server (a warm-up, then wrk with the
server's CPU time, and py-spy with --profile), and the wait for the search
index to go idle between runs."""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import Server, WrkResult, health, print_run, run_wrk
from benchmarks.profile_split import admission_files, split_files
from benchmarks.serving.processes import CpuMeter, haproxy_timers, py_spy
from benchmarks.serving.routes import Route, route_script


@dataclass
class Run:
    route: Route
    server: str
    round: int
    result: WrkResult
    cpu_s: dict[str, float]
    haproxy: dict[str, float] | None = None
    profile: dict[str, float] | None = None  # component -> share of the app's busy samples
    admission: dict[str, float] | None = None  # admission step -> share of the busy samples

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000.0 * sum(self.cpu_s.values()) / max(1, self.result.requests)


def fmt_ms(result: WrkResult, pct: int) -> str:
    value = result.latency_ms.get(pct)
    return f"{value:.2f}" if value is not None else "n/a"


def measure(
    server: Server,
    route: Route,
    facts: dict[str, Any],
    run: int,
    wrk: str,
    tmp: Path,
    args: argparse.Namespace,
    extra_pids: tuple[int, ...] = (),
) -> Run:
    """A warm-up run, then the measured one (round ``run``) with the server's
    CPU time (and ``extra_pids``', its Redis), and with --profile py-spy on
    the app processes."""
    go = functools.partial(run_wrk, wrk, connections=args.connections, timeout_s=10)
    if args.warmup:  # round 0's warm-up has a round of its own (-1: its own vote set)
        url, script = route_script(tmp, route, facts, server.name, run or -1, warmup=True)
        go(server.base + url, duration=args.warmup, script=script)
    url, script = route_script(tmp, route, facts, server.name, run)
    meter = CpuMeter(server, extra_pids)
    spy: contextlib.AbstractContextManager[list[Path]] = contextlib.nullcontext([])
    if args.profile:
        where = Path(args.keep_profiles) if args.keep_profiles else tmp
        where.mkdir(parents=True, exist_ok=True)
        name = f"spy-{route.key}-{server.name.split()[-1]}-{run}"
        spy = py_spy(server, args.duration, where / name)
    with spy as files:
        meter.start()
        result, raw = go(server.base + url, duration=args.duration, script=script)
        cpu = meter.stop()
    timers = haproxy_timers(server.state_dir) if server.name == "Ray Serve" else None
    made = Run(route, server.name, run, result, cpu, timers)
    if files := [f for f in files if f.exists()]:
        made.profile, made.admission = split_files(files), admission_files(files)
    label = f"round {run + 1} {server.name:<13} {route.label}"
    print_run(label, result, raw, f"  CPU {made.cpu_ms_per_request:.2f} ms/request")
    return made


# Answers in a row that must find the Api replica's copy of the vector index
# built: each comes from one replica (HAProxy spreads them).
REPLICAS_READY_IN_A_ROW = 8


def wait_index_idle(base: str, timeout: float = 600.0) -> None:
    """Until the VectorIndex has embedded every queued row (no background
    embedding overlaps the next run) and the Api replicas' copies are built."""
    deadline, in_a_row = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        body = health(base)
        search = body.get("search") if body is not None else None
        if body is not None and search is None:
            return
        if search is not None:
            replica = search.get("replica")
            idle = search.get("ready") and search.get("pending_jobs") == 0
            in_a_row = in_a_row + 1 if idle and (replica is None or replica["ready"]) else 0
            if in_a_row >= (1 if replica is None else REPLICAS_READY_IN_A_ROW):
                return
        time.sleep(0.3 if in_a_row else 1.0)
    raise RuntimeError(f"search index still busy after {timeout:.0f}s")
