"""A bounded number of image checks (full decodes) at once per replica.

Judging an upload decodes the whole image (serve_app/kit/images.py): up to 40
megapixels and a few hundred milliseconds of CPU each. Without a bound, a
burst of uploads queues that many decodes on the replica's thread pool (and
keeps every body in memory meanwhile) while ordinary requests wait for CPU.
Here at most ``size`` checks run at once, each on this object's own threads;
a request waits up to ``wait_s`` for a slot, then is answered 503 with
``Retry-After`` (a bounded queue: nobody waits longer than that).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from serve_app.kit.errors import ServiceUnavailable

T = TypeVar("T")


class DecodeSlots:
    """At most ``size`` calls of :meth:`run` at once; a caller waits at most
    ``wait_s`` for its turn."""

    def __init__(self, size: int, wait_s: float) -> None:
        self.size = size
        self.wait_s = wait_s
        self._free = asyncio.Semaphore(size)
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix="cairn-decode")
        self.running = 0
        self.refused = 0

    async def run(self, fn: Callable[[bytes], T], data: bytes) -> T:
        """``fn(data)`` on a decode thread, once a slot is free (503 if none
        frees up within ``wait_s``)."""
        try:
            # asyncio.timeout, not wait_for: a slot granted just as the time
            # runs out is either kept or handed back, never lost.
            async with asyncio.timeout(self.wait_s):
                await self._free.acquire()
        except TimeoutError:
            self.refused += 1
            retry = max(1, math.ceil(self.wait_s))
            raise ServiceUnavailable(
                "Too many images are being checked right now; retry in a moment.",
                error="uploads_busy",
                headers={"Retry-After": str(retry)},
            ) from None
        loop = asyncio.get_running_loop()
        self.running += 1

        def release(_: Future[T]) -> None:
            # The slot frees when the decode itself ends, not when the request
            # does: a client that hangs up cannot leave its decode running
            # outside the bound.
            def free() -> None:
                self.running -= 1
                self._free.release()

            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(free)

        try:
            work = self._pool.submit(fn, data)
        except BaseException:
            self.running -= 1
            self._free.release()
            raise
        work.add_done_callback(release)
        return await asyncio.wrap_future(work)

    def stats(self) -> dict[str, int]:
        """Slots, decodes running now, requests refused since start."""
        return {"slots": self.size, "running": self.running, "refused": self.refused}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
