"""Rate limiting as seen by the routes: one async ``hit(rule, subject)``.

``LocalRateLimiter`` keeps windows in this process (API tests, a single
uvicorn). ``RayRateLimiter`` shares the windows of every replica through the
sharded ``RateLimiterShard`` actors, which stay the authority on every count,
but are not asked on the request path (docs/decisions/rate-limits.md,
"Rate limits: local shares, reconciled in batches"):

* **local shares**: a replica admits a subject it has no word on yet, or one
  whose last reconciliation left room, on *credit*: at most
  ``credit_max = min(COLD_CREDIT, limit // (CREDIT_SHARE * replicas))``
  requests it has not reported yet. What it admitted is reported to the
  subject's shard in the next batch: **one call per shard every
  ``SYNC_INTERVAL_S``**, whatever the traffic (plus an early call when a
  request has to wait, or a busy subject's next block is due, below). The
  answer is the window's true count; it renews the credit from the room
  left (never more than a ``CREDIT_SHARE * replicas``-th of it) or says the
  subject is over its budget, which this replica then refuses locally until
  the window resets.
  Global overshoot per subject and window is at most ``replicas * credit_max``
  (each replica's unreported credit is at most ``credit_max``, and it learns
  "over" at its next report).
* **leases** for hot subjects: a subject that spends its credit before the
  next report asks for a block of tokens (counted as spent when granted, so
  they never over-admit), and a new block is asked for in the background (at
  once, not at the next interval) once half of one is spent; blocks that went
  fast double, up to ``LEASE_WANT_MAX``. Unused tokens go back after
  ``RELEASE_IDLE_S``.
* **the last tokens**: near the limit the credit shrinks to nothing and a
  request waits for its shard (one token per request, exact, as before); a
  rule too small for any credit (``credit_max`` 0: the write and sign-up
  limits) is always decided by the shard, exactly (``_exact_hit``).

If a shard cannot be reached, each replica decides the keys of that shard
against a local window (never a 500, no waiting) until a later batch gets
through.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import zlib
from dataclasses import dataclass, field
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


@dataclass(slots=True, eq=False)
class _Share:
    """This replica's part of one subject's window (local-share mode)."""

    limit: int
    window_s: float
    reset_at: float  # the shard's, once it has answered
    remaining: int  # the window's room at the shard's last answer (negative: over)
    credit: int  # requests this replica may still admit before reporting
    credit_max: int
    shard: int
    unreported: int = 0  # admitted on credit, not reported yet
    sent: int = 0  # of those, in the report now in flight
    tokens: int = 0  # of leased blocks (counted by the shard when granted)
    granted: int = 0  # the last block's size
    granted_at: float = 0.0
    want: int = 0  # tokens the next report asks for
    prefetched: bool = False  # a report already asks for the next block
    last_used: float = 0.0
    full: bool = False  # over budget: refused here until reset_at
    elsewhere: int = 0  # tokens other replicas hold (may come back)
    queued: bool = False  # due in the next report
    in_flight: bool = False
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def room(self) -> int:
        """X-RateLimit-Remaining as this replica sees it."""
        return max(0, self.remaining + self.tokens - self.unreported)


_Pending = list[tuple[tuple[Any, ...], "asyncio.Future[Any] | None"]]


class RayRateLimiter:
    """Client of the RateLimiterShard actors (created on first use).

    ``replicas``: how many ingress replicas share the windows (the size of
    each one's share until the shards report how many clients they see)."""

    CALL_TIMEOUT_S = 2.0
    LEASE_WANT = 16  # a key's first block
    LEASE_WANT_MAX = 256
    GROW_WITHIN_S = 1.0
    RELEASE_IDLE_S = 0.25
    RETRIES = 8  # while tokens are leased elsewhere: up to ~RETRIES * RELEASE_IDLE_S
    # Local shares (see the module's docstring and the decision).
    SYNC_INTERVAL_S = 0.25
    COLD_CREDIT = 8
    CREDIT_SHARE = 8
    DOWN_S = 1.0  # after a failed call, the shard's keys are decided locally this long
    MAX_SHARES = 200_000  # subjects with a live window tracked per replica
    SWEEP_S = 5.0

    def __init__(self, shards: int, replicas: int = 2) -> None:
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
        # Local shares.
        self._replicas = max(1, replicas)
        self._seen_clients = [0] * shards  # active clients each shard reported
        self._shares: dict[str, _Share] = {}
        self._dirty: list[dict[str, _Share]] = [{} for _ in range(shards)]
        self._urgent = [False] * shards
        self._down_until = [0.0] * shards
        self._leased: set[str] = set()  # shares holding lease tokens
        self._ticker: asyncio.Task[None] | None = None
        self._swept = 0.0
        self.calls = 0  # calls made to the shards (the bench and tests read it)

    def _shards(self) -> list[Any]:
        if self._handles is None:
            from actors.ratelimit_actor import get_or_create_shards

            self._handles = get_or_create_shards(self._shard_count)
        return self._handles

    def cache_entries(self) -> int:
        return len(self._full_until) + len(self._fallback) + len(self._credits) + len(self._shares)

    async def available(self) -> bool:
        """Every shard answers an empty batch within the call deadline."""
        try:
            calls = [shard.apply.remote(self._client, []) for shard in self._shards()]
            await asyncio.wait_for(asyncio.gather(*calls), timeout=self.CALL_TIMEOUT_S)
        except Exception as exc:
            log.warning("rate-limit shards unavailable (%s)", type(exc).__name__)
            return False
        return True

    # --- local shares ---------------------------------------------------------

    def replicas(self) -> int:
        """The number of replicas the windows are shared by (configured, or
        more if the shards have seen more clients)."""
        return max(self._replicas, *self._seen_clients)

    def unreported(self) -> int:
        """Requests admitted on credit whose report has not been answered yet."""
        return sum(share.unreported for share in self._shares.values())

    def credit_max(self, rule: Rule) -> int:
        """Requests of one subject a replica may admit before reporting them
        (0: the rule is decided by the shard, request by request)."""
        return min(self.COLD_CREDIT, rule.limit // (self.CREDIT_SHARE * self.replicas()))

    async def hit(self, rule: Rule, subject: str) -> Decision:
        key = _key(rule, subject)
        shard = zlib.crc32(subject.encode()) % self._shard_count
        credit_max = self.credit_max(rule)
        if credit_max <= 0:
            return await self._exact_hit(rule, key, shard)
        retries = 0
        while True:
            now = time.time()
            if self._down_until[shard] > now:
                return self._fallback.hit(key, rule.limit, rule.window_s, now)
            share = self._shares.get(key)
            if share is not None and now >= share.reset_at and not share.in_flight:
                self._drop(key, share)
                share = None
            if share is None:
                if len(self._shares) >= self.MAX_SHARES:
                    self._sweep(now, force=True)
                share = _Share(
                    rule.limit,
                    float(rule.window_s),
                    now + rule.window_s,
                    rule.limit,
                    credit_max,
                    credit_max,
                    shard,
                )
                self._shares[key] = share
            if share.full:
                return Decision(False, rule.limit, 0, share.reset_at)
            if share.tokens > 0:
                share.tokens -= 1
                share.last_used = now
                if (
                    not share.prefetched
                    and share.tokens <= share.granted // 2
                    and share.remaining > 0
                ):
                    # Half a block spent: ask for the next one now, in the
                    # background (not at the next interval: a busy subject
                    # would spend the other half first, and wait).
                    share.prefetched = True
                    share.want = max(share.want, self._next_want(share, now))
                    self._mark(key, share, urgent=True)
                return Decision(True, rule.limit, share.room(), share.reset_at)
            if share.credit > 0:
                share.credit -= 1
                share.unreported += 1
                share.last_used = now
                self._mark(key, share)
                return Decision(True, rule.limit, share.room(), share.reset_at)
            # Nothing to spend here: ask the shard now and wait for its answer.
            share.want = max(share.want, len(share.waiters) + 1, self._next_want(share, now))
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            share.waiters.append(waiter)
            self._mark(key, share, urgent=True)
            await waiter
            if self._down_until[shard] > time.time():
                continue  # decided by the local window
            if self._shares.get(key) is not share:
                continue  # the window ended meanwhile
            if share.tokens or share.credit or share.full:
                continue
            if share.elsewhere and retries < self.RETRIES:
                # Other replicas hold tokens they may not use: wait for them.
                retries += 1
                await asyncio.sleep(self.RELEASE_IDLE_S)
                continue
            if share.remaining > 0:
                continue  # room left, taken by others' waiters first: ask again
            return Decision(False, rule.limit, 0, share.reset_at)

    def _next_want(self, share: _Share, now: float) -> int:
        """A block twice the last one if that went within GROW_WITHIN_S."""
        if share.granted and now - share.granted_at < self.GROW_WITHIN_S:
            return min(self.LEASE_WANT_MAX, 2 * max(share.granted, self.LEASE_WANT // 2))
        return self.LEASE_WANT

    def _mark(self, key: str, share: _Share, urgent: bool = False) -> None:
        """Due in the shard's next report (``urgent``: a request waits for it)."""
        shard = share.shard
        if not share.queued:
            share.queued = True
            self._dirty[shard][key] = share
        if urgent:
            self._urgent[shard] = True
            if not self._in_flight[shard] and not self._flush_scheduled[shard]:
                self._flush_scheduled[shard] = True
                asyncio.get_running_loop().call_soon(self._start_flush, shard)
        self._ensure_ticker()

    def _drop(self, key: str, share: _Share) -> None:
        self._shares.pop(key, None)
        self._leased.discard(key)
        if share.queued:
            self._dirty[share.shard].pop(key, None)
            share.queued = False
        for waiter in share.waiters:
            if not waiter.done():
                waiter.set_result(None)
        share.waiters.clear()

    def _ensure_ticker(self) -> None:
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        """Every SYNC_INTERVAL_S: one report per shard with something to say,
        idle blocks given back, ended windows forgotten; ends when idle."""
        while True:
            await asyncio.sleep(self.SYNC_INTERVAL_S)
            now = time.time()
            self._release_idle(now)
            for shard in range(self._shard_count):
                if self._down_until[shard] > now or self._in_flight[shard]:
                    continue
                if (self._dirty[shard] or self._pending[shard]) and not self._flush_scheduled[
                    shard
                ]:
                    self._start_flush(shard)
            if now - self._swept >= self.SWEEP_S:
                self._sweep(now)
            busy = any(self._dirty) or any(self._pending) or any(self._in_flight)
            if not busy and not self._leased:
                self._ticker = None
                return

    def _release_idle(self, now: float) -> None:
        for key in list(self._leased):
            share = self._shares.get(key)
            if share is None:
                self._leased.discard(key)
                continue
            if now - share.last_used >= self.RELEASE_IDLE_S and not share.in_flight:
                # Unused tokens go back; a spent block is settled too (release
                # of 0), so the shard stops telling others it may come back.
                self._leased.discard(key)
                if now < share.reset_at:
                    op = ("release", key, share.tokens, share.reset_at)
                    self._pending[share.shard].append((op, None))
                share.remaining += share.tokens
                share.tokens = 0
                share.prefetched = False

    def _sweep(self, now: float, force: bool = False) -> None:
        """Forget ended windows; over MAX_SHARES (``force``), idle subjects
        too, least recently used first (such a subject starts over with a
        fresh credit: the overshoot bound assumes at most MAX_SHARES live
        subjects per replica)."""
        self._swept = now
        for key, share in list(self._shares.items()):
            if now >= share.reset_at and not share.in_flight and not share.queued:
                self._drop(key, share)
        if force and len(self._shares) >= self.MAX_SHARES:
            idle = [
                (share.last_used, key)
                for key, share in self._shares.items()
                if not (share.queued or share.in_flight or share.waiters or share.tokens)
            ]
            idle.sort()
            for _, key in idle[: len(self._shares) - self.MAX_SHARES * 9 // 10]:
                self._drop(key, self._shares[key])

    def _answer(self, key: str, share: _Share, answer: Any, clients: int) -> None:
        """A shard's answer to one report."""
        share.in_flight = False
        if answer is None:  # not delivered: report it again later
            share.sent = 0
        else:
            share.unreported -= share.sent
            share.sent = 0
            grant = Grant.from_tuple(answer)
            if self._shares.get(key) is share:
                now = time.time()
                share.reset_at = grant.reset_at
                share.remaining = grant.remaining
                share.elsewhere = grant.leased_elsewhere
                share.prefetched = False
                if grant.granted:
                    share.tokens += grant.granted
                    share.granted = grant.granted
                    share.granted_at = now
                    self._leased.add(key)
                replicas = max(self._replicas, clients)
                room = max(0, grant.remaining) // (self.CREDIT_SHARE * replicas)
                share.credit = max(0, min(share.credit_max, room) - share.unreported)
                share.full = (
                    grant.remaining <= 0
                    and grant.leased_elsewhere == 0
                    and share.tokens == 0
                    and share.credit == 0
                )
            elif grant.granted and time.time() < grant.reset_at:
                op = ("release", key, grant.granted, grant.reset_at)
                self._pending[share.shard].append((op, None))
        for waiter in share.waiters:
            if not waiter.done():
                waiter.set_result(None)
        share.waiters.clear()
        if share.unreported and self._shares.get(key) is share:
            self._mark(key, share)

    # --- exact, request by request ----------------------------------------------

    async def _exact_hit(self, rule: Rule, key: str, shard: int) -> Decision:
        """One request decided by its shard (tokens leased in blocks while
        the window has room): for rules too small for a local share."""
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
        if self._in_flight[shard]:
            return
        batch, self._pending[shard] = self._pending[shard], []
        reports, self._dirty[shard] = self._dirty[shard], {}
        self._urgent[shard] = False
        syncs: list[tuple[str, _Share]] = []
        for key, share in reports.items():
            share.queued = False
            if share.in_flight:  # cannot happen (one call per shard); keep it due
                self._dirty[shard][key] = share
                share.queued = True
                continue
            share.in_flight = True
            share.sent = share.unreported
            op = (
                "sync",
                key,
                share.limit,
                share.window_s,
                share.sent,
                share.tokens,
                share.want,
            )
            share.want = 0
            batch.append((op, None))
            syncs.append((key, share))
        if not batch:
            return
        self._in_flight[shard] = True
        task = asyncio.ensure_future(self._flush(shard, batch, syncs))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(
        self, shard: int, batch: _Pending, syncs: list[tuple[str, _Share]] | None = None
    ) -> None:
        ops = [op for op, _ in batch]
        syncs = syncs or []
        clients = 0
        try:
            answers: list[Any]
            try:
                self.calls += 1
                ref = self._shards()[shard].sync.remote(self._client, ops)
                clients, answers = await asyncio.wait_for(ref, timeout=self.CALL_TIMEOUT_S)
                if len(answers) != len(ops):
                    raise RuntimeError(f"shard answered {len(answers)} of {len(ops)} operations")
                self._seen_clients[shard] = int(clients)
                self._down_until[shard] = 0.0
            except Exception as exc:  # actor restarting or unreachable: degrade, don't fail
                log.warning("rate-limit shard %d unavailable (%s); using local windows", shard, exc)
                answers = [None] * len(ops)
                self._down_until[shard] = time.time() + self.DOWN_S
            sync_answers = iter(answers[len(ops) - len(syncs) :]) if syncs else iter(())
            for (_, future), answer in zip(batch, answers, strict=True):
                if future is not None and not future.done():
                    future.set_result(answer)
            for (key, share), answer in zip(syncs, sync_answers, strict=True):
                self._answer(key, share, answer, int(clients))
        finally:
            self._in_flight[shard] = False
            if self._urgent[shard] or any(f is not None for _, f in self._pending[shard]):
                self._start_flush(shard)
