"""Keys' last use written in batches (serve_app/runtime/lastuse.py)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from serve_app.runtime.lastuse import LastUse

DEADLINE_S = 10.0


class Writes:
    def __init__(self, fail: bool = False) -> None:
        self.batches: list[list[tuple[uuid.UUID, datetime]]] = []
        self.fail = fail

    async def __call__(self, batch: list[tuple[uuid.UUID, datetime]]) -> None:
        if self.fail:
            raise RuntimeError("database down")
        self.batches.append(batch)


async def until(condition: object) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_uses_go_out_in_one_batch_per_period_the_latest_per_key() -> None:
    writes = Writes()
    last = LastUse(writes, every_s=0.05)
    now = datetime.now(UTC)
    keys = [uuid.uuid4() for _ in range(300)]
    for key in keys:
        last.record(key, now)
    last.record(keys[0], now + timedelta(seconds=5))
    last.record(keys[0], now)  # an earlier time does not move it back
    assert writes.batches == []  # nothing waits for the write
    await until(lambda: writes.batches)
    (batch,) = writes.batches
    assert len(batch) == 300 and dict(batch)[keys[0]] == now + timedelta(seconds=5)
    await last.close()


async def test_a_full_batch_goes_out_at_once() -> None:
    writes = Writes()
    last = LastUse(writes, every_s=60, max_pending=10)
    now = datetime.now(UTC)
    for _ in range(10):
        last.record(uuid.uuid4(), now)
    await until(lambda: writes.batches)
    assert len(writes.batches[0]) == 10
    await last.close()


async def test_a_failed_write_is_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    writes = Writes(fail=True)
    last = LastUse(writes, every_s=0.01)
    last.record(uuid.uuid4(), datetime.now(UTC))
    await until(lambda: last.writes == 1)
    await until(lambda: "could not record the last use" in caplog.text)
    assert last.pending == 0
    await last.close()


async def test_close_writes_what_is_left() -> None:
    writes = Writes()
    last = LastUse(writes, every_s=3600)
    key = uuid.uuid4()
    last.record(key, datetime.now(UTC))
    await last.close()
    assert [k for k, _ in writes.batches[0]] == [key]
