"""RankingCache (a replica's copy of the trending rankings): the staleness
bound, read-your-writes after a vote through this replica, one fetch for many
readers, failures not kept."""

from __future__ import annotations

import asyncio

from serve_app.runtime.trending import RANKING_TTL_S, RankingCache


class Counter:
    """A stand-in for the TrendingActor's answers: a ranking that changes with
    each recorded vote; ``gate`` holds a fetch until the test releases it."""

    def __init__(self) -> None:
        self.score = 0
        self.calls = 0
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def top(self, days: int, limit: int) -> list[tuple[str, int]] | None:
        self.calls += 1
        seen = self.score  # what the counter holds when the call reaches it
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            return None
        return [("p", seen)][:limit]


async def reached(counter: Counter, calls: int) -> None:
    """Until ``calls`` fetches have reached the counter (no timing involved:
    each step of the event loop runs every ready task)."""
    for _ in range(100):
        if counter.calls >= calls:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{counter.calls} fetches, expected {calls}")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_copy_is_used_for_at_most_the_ttl() -> None:
    counter, clock = Counter(), Clock()
    cache = RankingCache(counter.top, ttl_s=1.0, clock=clock)
    assert await cache.top(7, 10) == [("p", 0)]
    counter.score = 1  # a vote through another replica
    clock.now += 0.99
    assert await cache.top(7, 10) == [("p", 0)]  # within the bound: the copy
    clock.now += 0.01
    assert await cache.top(7, 10) == [("p", 1)]  # at the bound: fetched again
    assert counter.calls == 2


async def test_each_window_and_limit_has_its_own_copy() -> None:
    counter, clock = Counter(), Clock()
    cache = RankingCache(counter.top, ttl_s=1.0, clock=clock)
    await cache.top(7, 10)
    await cache.top(1, 10)
    await cache.top(7, 0)
    await cache.top(7, 10)
    assert counter.calls == 3


async def test_a_vote_through_this_replica_is_seen_at_once() -> None:
    counter, clock = Counter(), Clock()
    cache = RankingCache(counter.top, ttl_s=60.0, clock=clock)
    assert await cache.top(7, 10) == [("p", 0)]
    counter.score = 1
    cache.invalidate()  # RayTrending.record, once the actor acknowledged
    assert await cache.top(7, 10) == [("p", 1)]


async def test_a_fetch_overtaken_by_a_vote_is_not_kept() -> None:
    counter, clock = Counter(), Clock()
    cache = RankingCache(counter.top, ttl_s=60.0, clock=clock)
    counter.gate = asyncio.Event()
    early = asyncio.ensure_future(cache.top(7, 10))
    await reached(counter, 1)  # the fetch reached the counter before the vote
    counter.score = 1
    cache.invalidate()
    # A reader after the vote does not join the older fetch.
    late = asyncio.ensure_future(cache.top(7, 10))
    await reached(counter, 2)
    counter.gate.set()
    assert await early == [("p", 0)]
    assert await late == [("p", 1)]
    counter.gate = None
    assert await cache.top(7, 10) == [("p", 1)]
    assert counter.calls == 2


async def test_concurrent_readers_share_one_fetch() -> None:
    counter, clock = Counter(), Clock()
    cache = RankingCache(counter.top, ttl_s=1.0, clock=clock)
    counter.gate = asyncio.Event()
    readers = [asyncio.ensure_future(cache.top(7, 10)) for _ in range(50)]
    await reached(counter, 1)
    for _ in range(5):
        await asyncio.sleep(0)
    counter.gate.set()
    assert await asyncio.gather(*readers) == [[("p", 0)]] * 50
    assert counter.calls == 1 and cache.fetches == 1


async def test_a_failed_fetch_is_not_kept() -> None:
    counter, clock = Counter(), Clock()
    cache = RankingCache(counter.top, ttl_s=1.0, clock=clock)
    counter.fail = True
    assert await cache.top(7, 10) is None
    counter.fail = False
    assert await cache.top(7, 10) == [("p", 0)]
    assert counter.calls == 2


def test_the_stated_bound() -> None:
    # docs/decisions/deployment-and-operations.md, "Serve path performance", states one second.
    assert RANKING_TTL_S == 1.0
