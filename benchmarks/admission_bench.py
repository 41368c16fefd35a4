"""What admission costs the replica per request, in process, for cold callers.

``admit()`` (serve_app/http/admission.py) is called directly, one request at
a time, on an app built by ``create_app`` over a real (embedded) Postgres,
with each mix of callers the HTTP bench uses, and the time and the CPU of
the calling thread (the event loop: admission, the limiter's batched
reports, the key check's psycopg work) are divided by the requests:

* ``ips``: a new client address per request (anonymous read, ``anon_read``);
* ``keys-cold``: a new agent key per request (each key's first call here);
* ``keys-warm``: the same keys again, each a few times (the calls after an
  agent's first on this replica).

The limiter is ``RayRateLimiter`` over real RateLimiterShard actors on a
local Ray (``--limiter ray``, what a Serve replica runs) or the in-process
windows (``--limiter local``, what each uvicorn worker runs). No HTTP, no
Serve: only the replica-side cost of admission. Postgres's own CPU is not in
the figures (another process); ``--rate`` paces the requests (the limiter's
batched reports then cost per request what they cost at that rate);
``--profile DIR`` writes a cProfile of each mix.

    .venv/bin/python -m benchmarks.admission_bench --keys 3000
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import secrets
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from fastapi import Response
from starlette.requests import Request

from serve_app.app import create_app
from serve_app.context import AppContext
from serve_app.http import admission
from serve_app.kit import keys
from serve_app.runtime.ratelimit import LocalRateLimiter, RateLimiter, RayRateLimiter
from serve_app.settings import Settings
from storage.db import libpq_url
from storage.embedded import start_embedded
from storage.migrate import upgrade

ROOT = Path(__file__).resolve().parents[1]
STATE_DIR = ROOT / ".cairn" / "bench-admission"
DATABASE = "cairn_admission_bench"
SECRET = b"admission-bench-secret-0123456789abcdef"
PROXY = "127.0.0.1"


def seed_keys(url: str, n: int) -> list[str]:
    """``n`` agents, each with a live key (written straight to Postgres)."""
    made: list[str] = []
    rows_agents = []
    rows_keys = []
    run = secrets.token_hex(3)
    for i in range(n):
        new = keys.generate_key()
        agent_id = uuid.uuid4()
        name = f"bench_{run}_{i}"
        rows_agents.append((agent_id, name, name, name))
        rows_keys.append((uuid.uuid4(), agent_id, new.key_id, keys.hash_secret(SECRET, new.key)))
        made.append(new.key)
    with psycopg.connect(libpq_url(url)) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO agents (id, username, name, display_name) VALUES (%s, %s, %s, %s)",
            rows_agents,
        )
        cur.executemany(
            "INSERT INTO api_keys (id, agent_id, key_id, key_hash) VALUES (%s, %s, %s, %s)",
            rows_keys,
        )
    return made


def request(ip: str | None = None, key: str | None = None) -> Request:
    headers = []
    if ip is not None:
        headers.append((b"x-forwarded-for", ip.encode()))
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/agents/someone",
        "headers": headers,
        "client": (PROXY, 40000),
        "query_string": b"",
    }
    return Request(scope)


async def one(ctx: AppContext, conn: Request) -> None:
    found = await admission.admit(ctx, conn, admission.READ)
    Response().headers.update(found.headers)


async def timed(
    name: str,
    ctx: AppContext,
    conns: list[Request],
    profile: cProfile.Profile | None,
    rate: float | None = None,
) -> dict[str, Any]:
    # The requests are built before the clock starts (a real replica gets them
    # parsed): only admission is timed.
    started_wall = time.perf_counter()
    started_cpu = time.thread_time()
    started_proc = time.process_time()
    if profile is not None:
        profile.enable()
    for i, conn in enumerate(conns):
        if rate:
            # Paced: the limiter's batched reports then cost what they cost
            # at this rate (idle waiting uses no CPU).
            due = started_wall + i / rate
            if due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
        await one(ctx, conn)
    if profile is not None:
        profile.disable()
    wall = time.perf_counter() - started_wall
    cpu = time.thread_time() - started_cpu
    proc = time.process_time() - started_proc
    n = len(conns)
    return {
        "mix": name,
        "requests": n,
        "wall_us": 1e6 * wall / n,
        "loop_cpu_us": 1e6 * cpu / n,
        "process_cpu_us": 1e6 * proc / n,
    }


def limiter_of(
    kind: str, sync_interval: float | None = None
) -> tuple[RateLimiter, Callable[[], None]]:
    if kind == "local":
        return LocalRateLimiter(), lambda: None
    import ray

    from actors.ratelimit_actor import RateLimiterShard

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    handles = [RateLimiterShard.remote() for _ in range(2)]  # type: ignore[attr-defined]
    ray.get([h.stats.remote() for h in handles])
    limiter = RayRateLimiter(2, replicas=2)
    limiter._handles = handles  # the shards a replica would find by name
    if sync_interval is not None:
        limiter.SYNC_INTERVAL_S = sync_interval
    return limiter, ray.shutdown


async def settle(limiter: RateLimiter) -> None:
    """Let the limiter's batched reports of the warm-up go out."""
    await asyncio.sleep(0.3)


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    url = start_embedded(STATE_DIR, args.database)
    upgrade(url)
    settings = Settings(
        public_base_url="https://cairn.example",
        state_dir=str(STATE_DIR),
        trusted_proxies=[f"{PROXY}/32"],
        # Every request a new subject: nothing is refused at these limits.
        ratelimit_general="100000/hour",
        ratelimit_anon_read="100000/minute",
        **({"key_cache_ttl_s": args.key_cache_ttl} if args.key_cache_ttl is not None else {}),
    )
    limiter, stop = limiter_of(args.limiter, args.sync_interval)
    app = create_app(settings, database_url=url, secret=SECRET, limiter=limiter, pool_size=4)
    ctx: AppContext = app.state.ctx
    results: list[dict[str, Any]] = []
    # The key cache follows credential changes once its listener listens
    # (as the app's lifespan starts it). getattr: the bench also runs
    # against code from before the cache, for a before/after.
    cache = getattr(ctx, "key_cache", None)
    if cache is not None:
        cache.start()
        for _ in range(500):
            if cache.listening or not cache.enabled:
                break
            await asyncio.sleep(0.01)
    try:
        all_keys = seed_keys(url, args.keys + args.warmup)
        warm_keys, bench_keys = all_keys[: args.warmup], all_keys[args.warmup :]
        base = secrets.randbelow(200)
        ips = [f"10.{base}.{i // 256 % 256}.{i % 256}" for i in range(args.ips + args.warmup)]
        # Warm-up: the pool, the limiter's ticker, the code paths.
        for ip in ips[: args.warmup]:
            await one(ctx, request(ip=ip))
        for key in warm_keys:
            await one(ctx, request(key=key))
        await settle(limiter)
        mixes: list[tuple[str, Callable[[], list[Request]]]] = [
            ("ips", lambda: [request(ip=ip) for ip in ips[args.warmup :]]),
            ("keys-cold", lambda: [request(key=k) for k in bench_keys]),
            (
                "keys-warm",
                lambda: [request(key=k) for _ in range(args.repeat) for k in bench_keys],
            ),
        ]
        for name, build in mixes:
            if args.mixes and name not in args.mixes:
                continue
            conns = build()
            profile = cProfile.Profile() if args.profile else None
            results.append(await timed(name, ctx, conns, profile, args.rate))
            if profile is not None:
                Path(args.profile).mkdir(parents=True, exist_ok=True)
                profile.dump_stats(Path(args.profile) / f"{name}.prof")
            await settle(limiter)
    finally:
        if cache is not None:
            await cache.close()
        last_use = getattr(ctx, "last_use", None)
        if last_use is not None:
            await last_use.close()
        await ctx.engine.dispose()
        stop()
    return results


async def repeated(args: argparse.Namespace) -> list[dict[str, Any]]:
    rounds = [await run(args) for _ in range(args.rounds)]
    out = []
    for i, first in enumerate(rounds[0]):
        row = dict(first)
        for field in ("wall_us", "loop_cpu_us", "process_cpu_us"):
            row[field] = statistics.median(r[i][field] for r in rounds)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limiter", choices=("ray", "local"), default="ray")
    parser.add_argument(
        "--database", default=DATABASE, help=f"in the bench's embedded Postgres ({DATABASE})"
    )
    parser.add_argument("--ips", type=int, default=3000, help="new addresses (3000)")
    parser.add_argument("--keys", type=int, default=3000, help="new agent keys (3000)")
    parser.add_argument("--repeat", type=int, default=3, help="calls of each key, warm (3)")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--mixes", nargs="*", default=None)
    parser.add_argument(
        "--key-cache-ttl", type=float, default=None, help="CAIRN_KEY_CACHE_TTL_S for this run"
    )
    parser.add_argument(
        "--sync-interval", type=float, default=None, help="the Ray limiter's report interval"
    )
    parser.add_argument(
        "--rate", type=float, default=None, help="requests a second (default: back to back)"
    )
    parser.add_argument(
        "--profile", default=None, help="a folder for a cProfile of each mix's timed part"
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()
    results = asyncio.run(repeated(args))
    after = os.getloadavg()
    print(
        f"limiter {args.limiter}; load average before {load[0]:.2f}, after {after[0]:.2f}; "
        f"median of {args.rounds} round(s)"
    )
    print(f"{'mix':<10} {'requests':>8} {'wall us':>9} {'loop CPU us':>12} {'process CPU us':>15}")
    for r in results:
        print(
            f"{r['mix']:<10} {r['requests']:>8} {r['wall_us']:>9.1f} {r['loop_cpu_us']:>12.1f} "
            f"{r['process_cpu_us']:>15.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
