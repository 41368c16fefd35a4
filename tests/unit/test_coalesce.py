"""embeddings.coalesce: calls that wait while a batch runs go together in the next."""

from __future__ import annotations

import asyncio

import pytest

from embeddings.coalesce import Coalescer


class Recorder:
    """A batch function that records its batches and runs until released."""

    def __init__(self, hold: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()
        if not hold:
            self.release.set()
        self.fail_on: int | None = None

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(items)
        await self.release.wait()
        if self.fail_on in items:
            raise ValueError("no")
        return [i * 10 for i in items]


async def test_a_lone_call_runs_at_once() -> None:
    run = Recorder()
    batch = Coalescer(run)
    assert await asyncio.wait_for(batch(1), 1.0) == 10
    assert run.batches == [[1]]


async def test_calls_waiting_while_a_batch_runs_go_together_in_the_next() -> None:
    run = Recorder(hold=True)
    batch = Coalescer(run, max_batch=3)
    first = asyncio.ensure_future(batch(1))
    await asyncio.sleep(0.01)
    assert run.batches == [[1]]  # sent at once, alone
    rest = [asyncio.ensure_future(batch(i)) for i in range(2, 7)]
    await asyncio.sleep(0.01)
    assert run.batches == [[1]]  # the others wait for it
    run.release.set()
    assert await first == 10
    assert await asyncio.gather(*rest) == [20, 30, 40, 50, 60]
    # In arrival order, at most max_batch a batch.
    assert run.batches == [[1], [2, 3, 4], [5, 6]]
    assert batch.stats() == {"calls": 3, "items": 6, "waiting": 0}


async def test_concurrency_runs_that_many_batches_at_once() -> None:
    run = Recorder(hold=True)
    batch = Coalescer(run, concurrency=2)
    first = asyncio.ensure_future(batch(1))
    await asyncio.sleep(0.01)
    second = [asyncio.ensure_future(batch(i)) for i in (2, 3)]
    await asyncio.sleep(0.01)
    third = asyncio.ensure_future(batch(4))
    await asyncio.sleep(0.01)
    # Two batches run; the call after them waits for one to end.
    assert run.batches == [[1], [2, 3]]
    run.release.set()
    assert [await first, *await asyncio.gather(*second), await third] == [10, 20, 30, 40]
    assert run.batches == [[1], [2, 3], [4]]


async def test_an_error_reaches_the_callers_of_its_batch_only() -> None:
    run = Recorder(hold=True)
    run.fail_on = 2
    batch = Coalescer(run)
    first = asyncio.ensure_future(batch(1))
    await asyncio.sleep(0.01)
    failing = [asyncio.ensure_future(batch(i)) for i in (2, 3)]
    await asyncio.sleep(0)
    run.release.set()
    assert await first == 10
    for call in failing:
        with pytest.raises(ValueError):
            await call
    assert await batch(4) == 40  # the next call runs as usual


async def test_a_caller_that_gave_up_is_not_run_for() -> None:
    run = Recorder(hold=True)
    batch = Coalescer(run)
    first = asyncio.ensure_future(batch(1))
    await asyncio.sleep(0.01)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(batch(2), 0.01)
    kept = asyncio.ensure_future(batch(3))
    await asyncio.sleep(0)
    run.release.set()
    assert (await first, await kept) == (10, 30)
    assert run.batches == [[1], [3]]


async def test_a_wrong_number_of_results_is_an_error() -> None:
    async def short(items: list[int]) -> list[int]:
        return items[:-1]

    batch = Coalescer(short)
    with pytest.raises(RuntimeError, match="a batch of 1 got 0 results"):
        await batch(1)
    with pytest.raises(ValueError):
        Coalescer(short, max_batch=0)
