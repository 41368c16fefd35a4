"""The WebhookActor: the cluster's Deliverer as one named, detached Ray actor.

Its loop starts with the actor and again whenever Ray restarts it after a
crash; its cursor and every delivery live in Postgres, so the restarted loop
carries on where the dead one stopped (docs/decisions/events.md, "Webhooks").
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from actors.cluster import singleton
from actors.webhooks.deliverer import Deliverer, DeliveryConfig

NAME = "cairn-webhooks"


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class WebhookActor:
    def __init__(self, config: DeliveryConfig) -> None:
        # An async actor's constructor runs on its event loop, so the loop
        # task starts here, on every (re)start.
        self._deliverer = Deliverer(config)
        self._task = asyncio.get_running_loop().create_task(self._deliverer.run())

    async def wake(self) -> None:
        self._deliverer.wake()

    async def stats(self) -> dict[str, Any]:
        return {**await self._deliverer.backlog(), "running": not self._task.done()}


def get_or_create(config: DeliveryConfig) -> ray.actor.ActorHandle:
    """The cluster's deliverer: every ingress replica finds the same one."""
    return singleton(WebhookActor, NAME, config)
