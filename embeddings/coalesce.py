"""Calls that arrive while one is running go together in the next one.

Two places use it. Each Api replica (and the VectorIndex) sends the queries
that waited while its call to the Embedder was out in one handle call
(``deployments.EmbedderQueries``): the call's fixed cost, on both sides and
in Ray, is paid once for all of them. The Embedder encodes the queries that
waited while it encoded as one batch: in fours a short query costs about a
third less CPU than alone (3.15 against 4.8 ms; docs/benchmarks.md, "New
queries at 100,000 patterns: the page read without the ORM, and queries that
wait together"), and Serve's ``@serve.batch``, used before, formed batches by a
fixed window (4 ms: 1.3 queries a batch at about 80 new queries a second,
the batches behind it then ran one by one). Here nothing waits on purpose: a
lone call runs at once, so a quiet service answers as fast as before, and
the calls that arrive meanwhile go together in the next batch, so batches
grow with the load and the work per item falls as traffic rises. At most
``concurrency`` batches run at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Coalescer(Generic[K, V]):
    def __init__(
        self,
        run: Callable[[list[K]], Awaitable[Sequence[V]]],
        max_batch: int = 64,
        concurrency: int = 1,
    ) -> None:
        """``run``: the results of a batch of items, in their order."""
        if max_batch < 1 or concurrency < 1:
            raise ValueError("max_batch and concurrency must be at least 1")
        self._run = run
        self.max_batch = max_batch
        self._concurrency = concurrency
        self._waiting: list[tuple[K, asyncio.Future[V]]] = []
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.calls = 0  # batches run
        self.items = 0  # items answered by them

    async def __call__(self, item: K) -> V:
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._running < self._concurrency:
            self._running += 1
            task = asyncio.ensure_future(self._drain())
            self._tasks.add(task)  # held until done, or it could be collected
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self.max_batch]
                del self._waiting[: self.max_batch]
                # A caller that gave up (a timeout) is not run for.
                batch = [(item, future) for item, future in batch if not future.done()]
                if batch:
                    await self._answer(batch)
        finally:
            self._running -= 1

    async def _answer(self, batch: list[tuple[K, asyncio.Future[V]]]) -> None:
        self.calls += 1
        try:
            results = await self._run([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"a batch of {len(batch)} got {len(results)} results")
        except BaseException as exc:
            # Each caller gets the error one call of its own would have raised.
            failure = exc if isinstance(exc, Exception) else asyncio.CancelledError()
            for _, future in batch:
                if not future.done():
                    future.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
            return
        self.items += len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            if not future.done():
                future.set_result(result)

    def stats(self) -> dict[str, int]:
        return {"calls": self.calls, "items": self.items, "waiting": len(self._waiting)}
