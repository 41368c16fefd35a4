"""Rate limiting as seen by the routes: one async ``hit(rule, subject)``.

``LocalRateLimiter`` keeps windows in this process (API tests, a single
uvicorn). ``RayRateLimiter`` shares the windows of every replica through the
sharded ``RateLimiterShard`` actors (exact across replicas), and keeps the
actor hop — about 2 ms of CPU on this hardware — off most requests:

* **leases**: while a window has plenty of room the actor grants a small block
  of tokens, which this replica spends locally; blocks are counted as spent when
  granted, so the limit is never exceeded, and shrink to one token per request
  near the limit. A key whose block was spent within ``GROW_WITHIN_S`` of its
  grant asks for twice as many next time (up to ``LEASE_WANT_MAX``), so a busy
  key costs one hop per few hundred requests, an occasional one no more tokens
  held than before. Unused tokens go back after ``RELEASE_IDLE_S`` without use; a
  request refused while other replicas still hold tokens waits for them and
  retries, so exactly ``limit`` requests are admitted.
* **full windows** are refused locally until they reset;
* **batching**: at most one call per shard is in flight; what arrives meanwhile
  goes in the next call.

If a shard cannot be reached, each replica falls back to a local window.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Protocol

from actors.ratelimit import Decision, Grant, LeaseLimiter, Rule

log = logging.getLogger("cairn.ratelimit")


class RateLimiter(Protocol):
    async def hit(self, rule: Rule, subject: str) -> Decision: ...

    def cache_entries(self) -> int: ...

    async def available(self) -> bool:
        """Whether the shared windows answer now (else each replica counts alone)."""
        ...


def _key(rule: Rule, subject: str) -> str:
    return f"{rule.name}:{subject}"


class LocalRateLimiter:
    def __init__(self, clock: Any = time.time) -> None:
        self._limiter = LeaseLimiter()
        self._clock = clock

    async def hit(self, rule: Rule, subject: str) -> Decision:
        return self._limiter.hit(_key(rule, subject), rule.limit, rule.window_s, self._clock())

    def cache_entries(self) -> int:
        return len(self._limiter)

    async def available(self) -> bool:
        return True


@dataclass
class _Credit:
    """Tokens of a leased block this replica may still spend."""

    tokens: int
    remaining: int  # the window's remaining tokens when the block was granted
    reset_at: float
    last_used: float
    shard: int
    granted: int = 0  # the block's size
    granted_at: float = 0.0


_Pending = list[tuple[tuple[Any, ...], "asyncio.Future[Any]"]]


class RayRateLimiter:
    """Client of the RateLimiterShard actors (created on first use)."""

    CALL_TIMEOUT_S = 2.0
    LEASE_WANT = 16  # a key's first block
    LEASE_WANT_MAX = 256
    GROW_WITHIN_S = 1.0
    RELEASE_IDLE_S = 0.25
    RETRIES = 8  # while tokens are leased elsewhere: up to ~RETRIES * RELEASE_IDLE_S

    def __init__(self, shards: int) -> None:
        self._shard_count = shards
        self._handles: list[Any] | None = None
        self._client = uuid.uuid4().hex
        self._pending: list[_Pending] = [[] for _ in range(shards)]
        self._flush_scheduled = [False] * shards
        self._in_flight = [False] * shards
        self._credits: dict[str, _Credit] = {}
        self._want: dict[str, int] = {}  # keys asking for more than LEASE_WANT
        self._acquiring: dict[str, asyncio.Future[None]] = {}
        self._full_until: dict[str, tuple[float, int]] = {}  # key -> (reset_at, limit)
        self._fallback = LeaseLimiter()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._releaser: asyncio.Task[None] | None = None

    def _shards(self) -> list[Any]:
        if self._handles is None:
            from actors.ratelimit_actor import get_or_create_shards

            self._handles = get_or_create_shards(self._shard_count)
        return self._handles

    def cache_entries(self) -> int:
        return len(self._full_until) + len(self._fallback) + len(self._credits)

    async def available(self) -> bool:
        """Every shard answers an empty batch within the call deadline."""
        try:
            calls = [shard.apply.remote(self._client, []) for shard in self._shards()]
            await asyncio.wait_for(asyncio.gather(*calls), timeout=self.CALL_TIMEOUT_S)
        except Exception as exc:
            log.warning("rate-limit shards unavailable (%s)", type(exc).__name__)
            return False
        return True

    async def hit(self, rule: Rule, subject: str) -> Decision:
        key = _key(rule, subject)
        shard = zlib.crc32(subject.encode()) % self._shard_count
        retries = 0
        while True:
            now = time.time()
            full = self._full_until.get(key)
            if full is not None:
                if now < full[0]:
                    return Decision(False, full[1], 0, full[0])
                del self._full_until[key]
            credit = self._credits.get(key)
            if credit is not None:
                if now < credit.reset_at and credit.tokens > 0:
                    credit.tokens -= 1
                    credit.last_used = now
                    return Decision(
                        True, rule.limit, credit.remaining + credit.tokens, credit.reset_at
                    )
                del self._credits[key]  # spent or expired: the next acquire settles it
                self._grow(key, credit, now)
            acquiring = self._acquiring.get(key)
            if acquiring is not None:
                # Another request here is fetching a block for this key: share it.
                await asyncio.wait([acquiring])
                continue
            grant = await self._acquire(shard, key, rule)
            if grant is None or grant.granted <= 1:
                self._want.pop(key, None)  # no block to grow from
            if grant is None:  # shard unreachable: this replica's own window
                return self._fallback.hit(key, rule.limit, rule.window_s, time.time())
            if grant.granted:
                if grant.granted > 1:
                    at = time.time()
                    self._credits[key] = _Credit(
                        grant.granted - 1,
                        grant.remaining,
                        grant.reset_at,
                        at,
                        shard,
                        grant.granted,
                        at,
                    )
                    self._ensure_releaser()
                return Decision(
                    True, rule.limit, grant.remaining + grant.granted - 1, grant.reset_at
                )
            if grant.leased_elsewhere and retries < self.RETRIES:
                # Other replicas hold tokens they may not use: wait for them.
                retries += 1
                await asyncio.sleep(self.RELEASE_IDLE_S)
                continue
            if not grant.leased_elsewhere:
                self._remember_full(key, grant.reset_at, rule.limit)
            return Decision(False, rule.limit, 0, grant.reset_at)

    async def _acquire(self, shard: int, key: str, rule: Rule) -> Grant | None:
        marker: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acquiring[key] = marker
        try:
            want = self._want.get(key, self.LEASE_WANT)
            op = ("acquire", key, rule.limit, float(rule.window_s), want)
            answer = await self._call(shard, op)
            return Grant.from_tuple(answer) if answer is not None else None
        finally:
            del self._acquiring[key]
            marker.set_result(None)

    def _grow(self, key: str, credit: _Credit, now: float) -> None:
        """After a block is used up: twice the size next time if it went fast,
        back to the first size if it took longer (or the window ended)."""
        if credit.tokens == 0 and now - credit.granted_at < self.GROW_WITHIN_S:
            self._want[key] = min(self.LEASE_WANT_MAX, 2 * max(credit.granted, self.LEASE_WANT))
        else:
            self._want.pop(key, None)

    def _remember_full(self, key: str, reset_at: float, limit: int) -> None:
        self._full_until[key] = (reset_at, limit)
        if len(self._full_until) > 100_000:
            now = time.time()
            self._full_until = {k: v for k, v in self._full_until.items() if v[0] > now}

    def _ensure_releaser(self) -> None:
        if self._releaser is None or self._releaser.done():
            self._releaser = asyncio.ensure_future(self._release_idle_blocks())

    async def _release_idle_blocks(self) -> None:
        """Give back the unused tokens of blocks nobody has used for a while."""
        while self._credits:
            await asyncio.sleep(self.RELEASE_IDLE_S)
            now = time.time()
            for key, credit in list(self._credits.items()):
                if now >= credit.reset_at:
                    del self._credits[key]
                    self._want.pop(key, None)
                elif now - credit.last_used >= self.RELEASE_IDLE_S:
                    del self._credits[key]
                    self._want.pop(key, None)
                    if credit.tokens:
                        op = ("release", key, credit.tokens, credit.reset_at)
                        task = asyncio.ensure_future(self._call(credit.shard, op))
                        self._tasks.add(task)
                        task.add_done_callback(self._tasks.discard)

    async def _call(self, shard: int, op: tuple[Any, ...]) -> Any:
        """Queue one operation for ``shard``; None if the shard is unreachable."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[shard].append((op, future))
        if not self._flush_scheduled[shard] and not self._in_flight[shard]:
            self._flush_scheduled[shard] = True
            loop.call_soon(self._start_flush, shard)
        return await future

    def _start_flush(self, shard: int) -> None:
        self._flush_scheduled[shard] = False
        batch, self._pending[shard] = self._pending[shard], []
        if not batch:
            return
        self._in_flight[shard] = True
        task = asyncio.ensure_future(self._flush(shard, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, shard: int, batch: _Pending) -> None:
        ops = [op for op, _ in batch]
        try:
            answers: list[Any]
            try:
                ref = self._shards()[shard].apply.remote(self._client, ops)
                answers = await asyncio.wait_for(ref, timeout=self.CALL_TIMEOUT_S)
                if len(answers) != len(ops):
                    raise RuntimeError(f"shard answered {len(answers)} of {len(ops)} operations")
            except Exception as exc:  # actor restarting or unreachable: degrade, don't fail
                log.warning("rate-limit shard %d unavailable (%s); using local windows", shard, exc)
                answers = [None] * len(ops)
            for (_, future), answer in zip(batch, answers, strict=True):
                if not future.done():
                    future.set_result(answer)
        finally:
            self._in_flight[shard] = False
            if self._pending[shard]:
                self._start_flush(shard)
