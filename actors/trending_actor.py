"""The TrendingCounter Ray actor: one named, detached counter for the cluster.

It is rebuilt from the votes in Postgres whenever it starts (also after Ray
restarts it following a crash), before it answers anything, so no vote
committed before the restart is lost; events are idempotent, so one the
rebuild already saw does not count twice.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import ray

from actors.cluster import singleton
from actors.trending import HORIZON_DAYS, Event, TrendingCounter
from storage.repositories.trending import recent_pattern_votes

NAME = "cairn-trending"

log = logging.getLogger("cairn.trending")


# max_task_retries=-1: a call in flight when the actor dies runs again on the
# restarted one (harmless: events are idempotent, reads have no effect).
@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class TrendingActor:
    def __init__(self, database_url: str) -> None:
        self._database_url = database_url
        self._counter = TrendingCounter()
        self._loaded_at: float | None = None
        self._loaded_votes = 0
        self._started = time.time()

    def _ensure_loaded(self) -> None:
        # Lazily, not in __init__: a constructor that raises (database down)
        # would leave the actor dead for good; a failed call is retried.
        if self._loaded_at is None:
            began = time.time()
            self._loaded_votes = self._counter.load(
                recent_pattern_votes(self._database_url, HORIZON_DAYS), began
            )
            self._loaded_at = time.time()
            log.info(
                "trending rebuilt from %d votes in %.2f s",
                self._loaded_votes,
                self._loaded_at - began,
            )

    def apply(self, events: list[Event]) -> int:
        self._ensure_loaded()
        return self._counter.apply(events, time.time())

    def top(self, days: int, limit: int) -> list[tuple[str, int]]:
        self._ensure_loaded()
        return self._counter.top(days, limit, time.time())

    def stats(self) -> dict[str, Any]:
        self._ensure_loaded()
        return {
            **self._counter.stats(),
            "started": self._started,
            "loaded_at": self._loaded_at,
            "loaded_votes": self._loaded_votes,
        }


def get_or_create(database_url: str) -> ray.actor.ActorHandle:
    """The cluster's counter: every ingress replica finds the same one."""
    return singleton(TrendingActor, NAME, database_url)
