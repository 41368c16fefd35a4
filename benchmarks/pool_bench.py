"""What checking a pooled connection on checkout costs: a cheap read (one
autocommit SELECT on a pooled connection, as ReadDb routes do) with no check,
with Cairn's check (``storage.db.dropped``: is the idle socket readable, no
round trip) and with SQLAlchemy's ``pool_pre_ping`` (a round trip), on the
embedded Postgres over its unix socket. Prints medians and p90s.

    python -m benchmarks.pool_bench [--n 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import event

from storage.db import _on_checkout, dropped, fetch_one, make_engine, make_sessionmaker
from storage.embedded import start_embedded, stop_server

VARIANTS = ("none", "dropped", "pre_ping")


async def _run(url: str, n: int, variant: str) -> list[float]:
    engine = make_engine(url, pool_size=2, max_overflow=0, pre_ping=variant == "pre_ping")
    if variant != "dropped":
        event.remove(engine.sync_engine, "checkout", _on_checkout)
    sessions = make_sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"))
    timings = []
    try:
        for i in range(n + 200):
            t0 = time.perf_counter()
            async with sessions() as session:
                await fetch_one(session, "SELECT count(*) FROM pg_class WHERE oid = 1259", {})
            if i >= 200:  # warm-up
                timings.append((time.perf_counter() - t0) * 1e6)
    finally:
        await engine.dispose()
    return timings


async def _check_alone(url: str, n: int = 100_000) -> float:
    """Microseconds per ``dropped`` call on a live pooled connection."""
    engine = make_engine(url, pool_size=1, max_overflow=0)
    try:
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            t0 = time.perf_counter()
            for _ in range(n):
                assert not dropped(raw.dbapi_connection)
            return (time.perf_counter() - t0) / n * 1e6
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cairn-poolbench-") as tmp:
        url = start_embedded(Path(tmp))
        results: dict[str, list[float]] = {v: [] for v in VARIANTS}
        try:
            for _ in range(3):  # interleaved rounds, so drift hits all alike
                for variant in VARIANTS:
                    results[variant] += asyncio.run(_run(url, args.n, variant))
            alone = asyncio.run(_check_alone(url))
        finally:
            stop_server(Path(tmp))
    for variant, t in results.items():
        print(
            f"{variant:9} median {statistics.median(t):7.1f} us  "
            f"p90 {statistics.quantiles(t, n=10)[-1]:7.1f} us  ({len(t)} reads)"
        )
    print(f"dropped() alone: {alone:.2f} us per call")


if __name__ == "__main__":
    main()
