"""How many idle notification streams one Api replica holds while the API
still answers quickly (docs/benchmarks.md, "Notification streams: idle streams
per replica"): the probe, a follow's delivery and the memory at each level.

    .venv/bin/python -m benchmarks.stream_bench [--levels 0,100,200] [--no-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from collections import Counter
from typing import Any

import httpx

from benchmarks import harness
from benchmarks.harness import PROBES

STATE_DIR = harness.ROOT / ".cairn" / "bench-stream"
MARKS = ("<!-- stream-bench:start -->", "<!-- stream-bench:end -->")
PORT = 8107
AGENTS = 50
DELIVERIES = 20
OPEN_WAIT_S = 60.0
PROBE_BUDGET_S = 90.0  # a level whose requests time out stops probing after this
# Every stream comes from this one address: its per-address cap (50) out of the way.
SETTINGS = {"CAIRN_INGRESS_REPLICAS": "1", "CAIRN_SEARCH_SEMANTIC": "false",
            "CAIRN_STREAM_MAX_PER_ADDRESS": "100000"}  # fmt: skip
BENCH_ENV = harness.bench_env(STATE_DIR, 6, "registration", "general", **SETTINGS)


class Streams:
    """N idle streams, each opened up to its ``ready`` event, then drained."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.tasks: list[asyncio.Task[None]] = []
        self.refused: Counter[int] = Counter()
        self.events: list[asyncio.Event] = []

    async def _one(self, agent: dict[str, Any], opened: asyncio.Event) -> None:
        headers = harness.bearer(agent["api_key"])
        async with self.http.stream(
            "GET", "/api/notifications/stream", headers=headers
        ) as response:
            if response.status_code != 200:
                self.refused[response.status_code] += 1
                opened.set()
                return
            async for line in response.aiter_lines():
                if line.startswith("event: ready"):
                    opened.set()

    async def open(self, agents: list[dict[str, Any]], count: int) -> float:
        """Open ``count`` streams (in waves of 50, as clients arrive); the
        seconds until all answered or OPEN_WAIT_S passed."""
        started, self.events = time.perf_counter(), []
        for i in range(count):
            self.events.append(opened := asyncio.Event())
            self.tasks.append(asyncio.create_task(self._one(agents[i % len(agents)], opened)))
            if i % 50 == 49:
                await self._settle(started)
        await self._settle(started)
        return time.perf_counter() - started

    async def _settle(self, started: float) -> None:
        left = OPEN_WAIT_S - (time.perf_counter() - started)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self.events)), max(left, 0))

    @property
    def waiting(self) -> int:
        """Streams still without an answer (queued behind the replica's slots)."""
        return sum(1 for e in self.events if not e.is_set())

    @property
    def open_now(self) -> int:
        return sum(1 for t in self.tasks if not t.done())

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()


async def probed(http: httpx.AsyncClient, agent: dict[str, Any]) -> dict[str, Any]:
    """The probe, its requests not sent within the budget counted as failed."""
    found = await harness.probe(http, agent["api_key"], budget_s=PROBE_BUDGET_S)
    return {**found, "failed": sum(found["failed"].values()) + PROBES - found["requests"]}


async def deliveries(
    http: httpx.AsyncClient, target: dict[str, Any], fans: list[dict[str, Any]]
) -> list[float]:
    """Follow → notification event on the target's open stream, in ms."""
    times: list[float] = []
    headers = harness.bearer(target["api_key"])
    async with http.stream("GET", "/api/notifications/stream", headers=headers) as response:
        if response.status_code != 200:
            return times
        lines = response.aiter_lines()
        async for line in lines:
            if line.startswith("event: ready"):
                break
        for fan in fans:
            t0 = time.perf_counter()
            path = f"/api/agents/{target['username']}/follow"
            answer = await http.post(path, headers=harness.bearer(fan["api_key"]))
            answer.raise_for_status()
            async for line in lines:
                if line.startswith("event: notification"):
                    times.append((time.perf_counter() - t0) * 1000)
                    break
    return times


async def run_levels(base: str, levels: list[int]) -> list[dict[str, Any]]:
    limits = httpx.Limits(max_connections=max(levels) + 100, max_keepalive_connections=100)
    timeout = httpx.Timeout(30.0, read=None)
    rows = []
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=timeout) as http:
        agents = [await harness.register(http, f"stream bench {i}") for i in range(AGENTS)]
        prober = await harness.register(http, "stream bench prober")
        for level in levels:
            streams = Streams(http)
            opened_s = await streams.open(agents, level)
            target = await harness.register(http, f"stream bench target {level}")
            fans = [await harness.register(http, f"fan {level} {i}") for i in range(DELIVERIES)]
            row = {"streams": level, "open": streams.open_now - streams.waiting,
                   "queued": streams.waiting, "refused": dict(streams.refused), "open_s": opened_s,
                   "probe": await probed(http, prober), "delivery": [],
                   "memory_mb": 0.0}  # fmt: skip
            # No deliveries when the stream cannot open (queued) within a minute.
            with contextlib.suppress(TimeoutError):
                row["delivery"] = await asyncio.wait_for(
                    deliveries(http, target, fans), OPEN_WAIT_S
                )
            health = (await http.get("/api/health")).json()
            row["memory_mb"] = float(health["metrics"]["memory_usage_mb"])
            rows.append(row)
            print(row, flush=True)
            await streams.close()
    return rows


def section(rows: list[dict[str, Any]], load_before: float, env: dict[str, str]) -> str:
    ongoing = env.get("CAIRN_INGRESS_MAX_ONGOING_REQUESTS", "128")
    cap = env.get("CAIRN_STREAM_MAX_PER_REPLICA", "1000")
    lines = [
        *harness.section_head(MARKS[0], "stream_bench.py", load_before),
        f"- `CAIRN_INGRESS_MAX_ONGOING_REQUESTS={ongoing}`, `CAIRN_STREAM_MAX_PER_REPLICA={cap}`.",
        "",
        "| idle streams | open | queued | refused | open all (s) | probe req/s | p50 ms | p99 ms | "
        "max ms | failed | delivery p50 ms | delivery max ms | replica MB |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p, d = r["probe"], r["delivery"]
        refused = ", ".join(f"{k}: {v}" for k, v in r["refused"].items()) or "0"
        lines.append(
            f"| {r['streams']} | {r['open']} | {r['queued']} | {refused} | {r['open_s']:.1f} | "
            f"{p['rps']:.0f} | "
            f"{p['p50']:.1f} | {p['p99']:.1f} | {p['max']:.1f} | {p['failed']} | "
            f"{statistics.median(d) if d else float('nan'):.1f} | "
            f"{max(d, default=float('nan')):.1f} | {r['memory_mb']:.0f} |"
        )
    lines.append(MARKS[1])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream_bench")
    parser.add_argument("--levels", default="0,250,500,999")
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    harness.stop_on_sigterm()
    env = harness.server_env(BENCH_ENV)
    load_before = os.getloadavg()[0]
    harness.fresh_state(STATE_DIR)
    with harness.serve_running(PORT, env, STATE_DIR) as serve:
        rows = asyncio.run(run_levels(serve.base, levels))
    harness.publish(section(rows, load_before, env), *MARKS, args.no_docs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
