"""The RateLimiter Ray actor: one shard of the rate-limit windows.

Actor methods run one at a time, so a batch of hits is applied atomically and
no two replicas can both take the last slot of a window.
"""

from __future__ import annotations

import time

import ray

from actors.ratelimit import WindowLimiter

# One request to a shard: (key, limit, window_s, cost).
HitRequest = tuple[str, int, float, int]
HitResult = tuple[bool, int, int, float]

NAMESPACE = "cairn"


def shard_name(index: int) -> str:
    return f"cairn-ratelimit-{index}"


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class RateLimiterShard:
    """Holds the windows of the keys that hash to this shard."""

    def __init__(self) -> None:
        self._limiter = WindowLimiter()
        self._started = time.time()

    def hit_many(self, requests: list[HitRequest]) -> list[HitResult]:
        now = time.time()
        return [
            self._limiter.hit(k, lim, win, now, cost).as_tuple() for k, lim, win, cost in requests
        ]

    def stats(self) -> dict[str, float]:
        return {"keys": float(len(self._limiter)), "started": self._started}


def get_or_create_shards(count: int) -> list[ray.actor.ActorHandle]:
    """Named, detached shards: every ingress replica finds the same ones."""
    return [
        RateLimiterShard.options(  # type: ignore[attr-defined]
            name=shard_name(i),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
        ).remote()
        for i in range(count)
    ]
