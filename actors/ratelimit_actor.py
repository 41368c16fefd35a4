"""The RateLimiter Ray actor: one shard of the rate-limit windows.

Actor methods run one at a time, so a batch of operations is applied
atomically and no two replicas can both take the last token of a window.
"""

from __future__ import annotations

import time
from typing import Any

import ray

from actors.cluster import singleton
from actors.ratelimit import LeaseLimiter

# Operations a client sends in one call:
#   ("acquire", key, limit, window_s, want) -> Grant.as_tuple()
#   ("release", key, unused, reset_at)      -> None
#   ("sync", key, limit, window_s, used, holding, want) -> Grant.as_tuple()
Op = tuple[Any, ...]

# A client that called within this many seconds counts as an active replica
# (``sync`` tells each client how many there are: the size of its local share).
ACTIVE_CLIENT_S = 30.0


def shard_name(index: int) -> str:
    return f"cairn-ratelimit-{index}"


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class RateLimiterShard:
    """Holds the windows of the keys that hash to this shard."""

    def __init__(self) -> None:
        self._limiter = LeaseLimiter()
        self._started = time.time()
        self._calls = 0
        self._clients: dict[str, float] = {}  # client -> last call

    def sync(self, client: str, ops: list[Op]) -> tuple[int, list[Any]]:
        """``apply``, and how many clients (ingress replicas) called lately."""
        answers = self.apply(client, ops)
        now = time.time()
        self._clients[client] = now
        if len(self._clients) > 64:
            self._clients = {c: t for c, t in self._clients.items() if now - t < ACTIVE_CLIENT_S}
        active = sum(1 for t in self._clients.values() if now - t < ACTIVE_CLIENT_S)
        return max(1, active), answers

    def apply(self, client: str, ops: list[Op]) -> list[Any]:
        self._calls += 1
        now = time.time()
        out: list[Any] = []
        for op in ops:
            if op[0] == "acquire":
                _, key, limit, window_s, want = op
                grant = self._limiter.acquire(key, limit, window_s, want, client, now)
                out.append(grant.as_tuple())
            elif op[0] == "release":
                _, key, unused, reset_at = op
                self._limiter.release(key, client, unused, reset_at, now)
                out.append(None)
            elif op[0] == "sync":
                _, key, limit, window_s, used, holding, want = op
                grant = self._limiter.sync(key, limit, window_s, used, holding, want, client, now)
                out.append(grant.as_tuple())
            else:
                raise ValueError(f"unknown rate-limit operation {op[0]!r}")
        return out

    def stats(self) -> dict[str, float]:
        return {
            "keys": float(len(self._limiter)),
            "calls": float(self._calls),
            "started": self._started,
        }


def get_or_create_shards(count: int) -> list[ray.actor.ActorHandle]:
    """Named, detached shards: every ingress replica finds the same ones."""
    return [singleton(RateLimiterShard, shard_name(i)) for i in range(count)]
