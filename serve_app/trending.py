"""Trending as seen by the routes: ``record`` vote events, ask for the ``top``.

``LocalTrending`` keeps a TrendingCounter in this process (API tests, a single
uvicorn); ``RayTrending`` talks to the cluster's TrendingActor. Both are
rebuilt from the votes in Postgres before their first answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from actors.trending import HORIZON_DAYS, Event, TrendingCounter
from serve_app.cluster_actor import ClusterActor
from storage.repositories.trending import recent_pattern_votes

log = logging.getLogger("cairn.trending")

# How many patterns a ranking holds at most (docs/decisions.md, "Trending").
MAX_RANKED = 1000


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


class RayTrending:
    """The cluster's TrendingActor, with a deadline on every call.

    A call that misses its deadline is not cancelled: an event still reaches
    the actor (Ray keeps it queued while the actor restarts)."""

    def __init__(self, database_url: str, timeout_s: float = 2.0) -> None:
        from actors.trending_actor import get_or_create

        self._actor = ClusterActor("trending actor", lambda: get_or_create(database_url), timeout_s)

    async def record(self, events: list[Event]) -> None:
        try:
            await self._actor.call("apply", events)
        except Exception as exc:
            log.warning("trending event not confirmed (%s); the actor gets it later", exc)

    async def top(self, days: int, limit: int = MAX_RANKED) -> list[tuple[str, int]] | None:
        try:
            ranked: list[tuple[str, int]] = await self._actor.call("top", days, limit)
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
