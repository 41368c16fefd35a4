"""Trending as seen by the routes: ``record`` vote events, ask for the ``top``.

``LocalTrending`` keeps a TrendingCounter in this process (API tests, a single
uvicorn); ``RayTrending`` talks to the cluster's TrendingActor, and keeps the
rankings it got for up to ``RANKING_TTL_S`` (a ``RankingCache``) so a busy
replica does not make an actor call per feed read. Both are rebuilt from the
votes in Postgres before their first answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from actors.trending import HORIZON_DAYS, Event, TrendingCounter
from serve_app.runtime.cluster_actor import ClusterActor
from storage.repositories.trending import recent_pattern_votes

log = logging.getLogger("cairn.trending")

# How many patterns a ranking holds at most (docs/decisions/resources.md, "Trending").
MAX_RANKED = 1000
# How long a replica answers rankings from its own copy: a vote recorded
# through another replica shows up in this one's rankings within this bound;
# one recorded through this replica, at once
# (docs/decisions/deployment-and-operations.md, "Serve path performance").
RANKING_TTL_S = 1.0

Ranking = list[tuple[str, int]]


class Trending(Protocol):
    async def record(self, events: list[Event]) -> None: ...

    async def top(self, days: int, limit: int = MAX_RANKED) -> list[tuple[str, int]] | None:
        """The ranking, or None when the counter cannot answer now."""
        ...

    async def stats(self) -> dict[str, Any] | None:
        """Size and start time of the counter, or None when it cannot answer."""
        ...


class LocalTrending:
    def __init__(self, database_url: str) -> None:
        self._database_url = database_url
        self._counter = TrendingCounter()
        self._loaded = False
        self._lock = asyncio.Lock()

    async def _ensure_loaded(self) -> None:
        async with self._lock:
            if not self._loaded:
                votes = await asyncio.to_thread(
                    lambda: list(recent_pattern_votes(self._database_url, HORIZON_DAYS))
                )
                self._counter.load(votes, time.time())
                self._loaded = True

    async def record(self, events: list[Event]) -> None:
        # Not loaded yet: the load will read this vote from Postgres anyway.
        if await self._loaded_or_none():
            self._counter.apply(events, time.time())

    async def top(self, days: int, limit: int = MAX_RANKED) -> list[tuple[str, int]] | None:
        if not await self._loaded_or_none():
            return None
        return self._counter.top(days, limit, time.time())

    async def stats(self) -> dict[str, Any] | None:
        if not await self._loaded_or_none():
            return None
        return {**self._counter.stats(), "where": "in-process"}

    async def _loaded_or_none(self) -> bool:
        try:
            await self._ensure_loaded()
        except Exception as exc:
            log.warning("trending counter could not be loaded from Postgres: %s", exc)
            return False
        return True


class RankingCache:
    """Rankings by (days, limit), each answered from a copy for at most
    ``ttl_s`` after it was fetched.

    Concurrent readers of a missing or expired ranking share one fetch.
    ``invalidate()`` (called once a vote went through this process) drops every
    copy and every fetch in flight, so a reader that comes after it sees the
    vote. A failed fetch (None) is not kept."""

    def __init__(
        self,
        fetch: Callable[[int, int], Awaitable[Ranking | None]],
        ttl_s: float = RANKING_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl_s = ttl_s
        self._clock = clock
        self._copies: dict[tuple[int, int], tuple[float, Ranking]] = {}
        self._fetching: dict[tuple[int, int], asyncio.Future[Ranking | None]] = {}
        self._generation = 0
        self.fetches = 0  # calls made to ``fetch`` (for tests and /api/health)

    def invalidate(self) -> None:
        self._generation += 1
        self._copies.clear()
        self._fetching.clear()

    async def top(self, days: int, limit: int) -> Ranking | None:
        key = (days, limit)
        copy = self._copies.get(key)
        if copy is not None and self._clock() < copy[0]:
            return copy[1]
        pending = self._fetching.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key))
            self._fetching[key] = pending
        return await asyncio.shield(pending)

    async def _load(self, key: tuple[int, int]) -> Ranking | None:
        generation, started = self._generation, self._clock()
        try:
            self.fetches += 1
            ranked = await self._fetch(*key)
        finally:
            if self._fetching.get(key) is asyncio.current_task():
                del self._fetching[key]
        # Kept only if no vote went through here meanwhile, and until ttl_s
        # after it was asked for: a copy is never older than the bound.
        if ranked is not None and generation == self._generation:
            self._copies[key] = (started + self._ttl_s, ranked)
        return ranked


class RayTrending:
    """The cluster's TrendingActor, with a deadline on every call, and its
    rankings kept for ``RANKING_TTL_S`` in this replica (``RankingCache``).

    A call that misses its deadline is not cancelled: an event still reaches
    the actor (Ray keeps it queued while the actor restarts)."""

    def __init__(
        self, database_url: str, timeout_s: float = 2.0, ttl_s: float = RANKING_TTL_S
    ) -> None:
        from actors.trending_actor import get_or_create

        self._actor = ClusterActor("trending actor", lambda: get_or_create(database_url), timeout_s)
        self.rankings = RankingCache(self._top, ttl_s)

    async def record(self, events: list[Event]) -> None:
        try:
            await self._actor.call("apply", events)
        except Exception as exc:
            log.warning("trending event not confirmed (%s); the actor gets it later", exc)
        # Read-your-writes through this replica: the next ranking is fetched anew.
        self.rankings.invalidate()

    async def top(self, days: int, limit: int = MAX_RANKED) -> list[tuple[str, int]] | None:
        return await self.rankings.top(days, limit)

    async def _top(self, days: int, limit: int) -> Ranking | None:
        try:
            ranked: Ranking = await self._actor.call("top", days, limit)
        except Exception as exc:
            log.warning("trending actor unavailable (%s); ranking from Postgres", exc)
            return None
        return ranked

    async def stats(self) -> dict[str, Any] | None:
        try:
            stats: dict[str, Any] = await self._actor.call("stats")
        except Exception:
            return None
        return {**stats, "where": "actor"}
