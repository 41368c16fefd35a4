"""The gauges an Api replica samples (serve_app/http/observe.py) read real
state: the pool's waiters from a real engine over Postgres, the index copies'
lag."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from serve_app.http.observe import copy_lag_s, pool_waiters
from storage.db import make_engine


async def test_pool_waiters_counts_requests_waiting_for_a_connection(database: str) -> None:
    engine = make_engine(database, pool_size=1, max_overflow=0)
    try:
        assert pool_waiters(engine) == 0  # no queue made yet: nobody waits
        async with engine.connect() as held:
            await held.execute(text("SELECT 1"))
            assert pool_waiters(engine) == 0

            async def wait_for_one() -> None:
                async with engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))

            waiting = [asyncio.create_task(wait_for_one()) for _ in range(2)]
            for _ in range(100):
                if pool_waiters(engine) == 2:
                    break
                await asyncio.sleep(0.01)
            assert pool_waiters(engine) == 2
        await asyncio.gather(*waiting)
        assert pool_waiters(engine) == 0
    finally:
        await engine.dispose()


def test_copy_lag_is_read_only_off_an_index_copy() -> None:
    assert copy_lag_s(object()) is None
    assert copy_lag_s(None) is None
