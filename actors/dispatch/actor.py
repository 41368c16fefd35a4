"""The DispatchActor: the cluster's Dispatcher as one named, detached Ray actor.

Its loop starts with the actor and again whenever Ray restarts it after a
crash; all its work lives in Postgres, so the restarted loop carries on where
the dead one stopped (docs/decisions/notifications-and-streams.md, "Notifications").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import ray

from actors.cluster import singleton
from actors.dispatch.dispatcher import DispatchConfig, Dispatcher
from telemetry import metrics

NAME = "cairn-dispatch"
# How often the backlog gauges are read from Postgres.
METRICS_EVERY_S = 5.0

log = logging.getLogger("cairn.dispatch")


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class DispatchActor:
    def __init__(self, config: DispatchConfig) -> None:
        # An async actor's constructor runs on its event loop, so the loop
        # task starts here, on every (re)start.
        self._dispatcher = Dispatcher(config)
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._dispatcher.run())
        self._metrics = loop.create_task(self._record_metrics()) if metrics.enabled() else None

    async def _record_metrics(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self._dispatcher.record_metrics()
            await asyncio.sleep(METRICS_EVERY_S)

    async def wake(self) -> None:
        self._dispatcher.wake()

    async def stats(self) -> dict[str, Any]:
        return {**await self._dispatcher.stats(), "running": not self._task.done()}


def get_or_create(config: DispatchConfig) -> ray.actor.ActorHandle:
    """The cluster's dispatcher: every ingress replica finds the same one."""
    return singleton(DispatchActor, NAME, config)
