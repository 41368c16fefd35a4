"""Rate limiting as seen by the routes: one async ``hit(rule, subject)``.

``LocalRateLimiter`` keeps windows in this process (API tests, a single
uvicorn). ``RayRateLimiter`` asks the sharded ``RateLimiterShard`` actors, so
every replica shares one count. It batches the hits of one event-loop turn
into one actor call per shard, answers refusals locally while a window is
known to be full (a fixed window cannot reopen before ``reset_at``), and falls
back to a local window if a shard cannot be reached. At most one call per
shard is in flight: hits that arrive meanwhile wait for it and go together in
the next call, so under load many requests share one actor hop.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from typing import Any, Protocol

from actors.ratelimit import Decision, Rule, WindowLimiter

log = logging.getLogger("cairn.ratelimit")


class RateLimiter(Protocol):
    async def hit(self, rule: Rule, subject: str) -> Decision: ...

    def cache_entries(self) -> int: ...


def _key(rule: Rule, subject: str) -> str:
    return f"{rule.name}:{subject}"


class LocalRateLimiter:
    def __init__(self, clock: Any = time.time) -> None:
        self._limiter = WindowLimiter()
        self._clock = clock

    async def hit(self, rule: Rule, subject: str) -> Decision:
        return self._limiter.hit(_key(rule, subject), rule.limit, rule.window_s, self._clock())

    def cache_entries(self) -> int:
        return len(self._limiter)


class RayRateLimiter:
    """Client of the RateLimiterShard actors (created on first use)."""

    CALL_TIMEOUT_S = 2.0

    def __init__(self, shards: int) -> None:
        self._shard_count = shards
        self._handles: list[Any] | None = None
        self._pending: list[list[tuple[tuple[str, int, float, int], asyncio.Future[Decision]]]] = [
            [] for _ in range(shards)
        ]
        self._flush_scheduled = [False] * shards
        self._in_flight = [False] * shards
        self._full_until: dict[str, tuple[float, int]] = {}  # key -> (reset_at, limit)
        self._fallback = WindowLimiter()
        self._tasks: set[asyncio.Task[None]] = set()

    def _shards(self) -> list[Any]:
        if self._handles is None:
            from actors.ratelimit_actor import get_or_create_shards

            self._handles = get_or_create_shards(self._shard_count)
        return self._handles

    def cache_entries(self) -> int:
        return len(self._full_until) + len(self._fallback)

    async def hit(self, rule: Rule, subject: str) -> Decision:
        key = _key(rule, subject)
        now = time.time()
        full = self._full_until.get(key)
        if full is not None:
            if now < full[0]:
                return Decision(False, full[1], 0, full[0])
            del self._full_until[key]
        shard = zlib.crc32(subject.encode()) % self._shard_count
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Decision] = loop.create_future()
        self._pending[shard].append(((key, rule.limit, float(rule.window_s), 1), future))
        if not self._flush_scheduled[shard] and not self._in_flight[shard]:
            self._flush_scheduled[shard] = True
            loop.call_soon(self._start_flush, shard)
        decision = await future
        if not decision.allowed:
            self._full_until[key] = (decision.reset_at, decision.limit)
            if len(self._full_until) > 100_000:
                self._full_until = {k: v for k, v in self._full_until.items() if v[0] > now}
        return decision

    def _start_flush(self, shard: int) -> None:
        self._flush_scheduled[shard] = False
        batch, self._pending[shard] = self._pending[shard], []
        if not batch:
            return
        self._in_flight[shard] = True
        task = asyncio.ensure_future(self._flush(shard, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _flush_done(self, shard: int) -> None:
        self._in_flight[shard] = False
        if self._pending[shard]:
            self._start_flush(shard)

    async def _flush(
        self, shard: int, batch: list[tuple[tuple[str, int, float, int], asyncio.Future[Decision]]]
    ) -> None:
        requests = [req for req, _ in batch]
        try:
            try:
                ref = self._shards()[shard].hit_many.remote(requests)
                results = await asyncio.wait_for(ref, timeout=self.CALL_TIMEOUT_S)
                decisions = [Decision.from_tuple(r) for r in results]
                if len(decisions) != len(requests):
                    raise RuntimeError(f"shard answered {len(decisions)} of {len(requests)} hits")
            except Exception as exc:  # actor restarting or unreachable: degrade, don't fail
                log.warning(
                    "rate-limit shard %d unavailable (%s); using the local window", shard, exc
                )
                now = time.time()
                decisions = [
                    self._fallback.hit(k, lim, win, now, cost) for k, lim, win, cost in requests
                ]
            for (_, future), decision in zip(batch, decisions, strict=True):
                if not future.done():
                    future.set_result(decision)
        finally:
            self._flush_done(shard)
