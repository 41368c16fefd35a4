"""The dispatcher as seen by the routes: ``wake`` it after a commit that queued
work, ask it for ``stats``.

``LocalDispatch`` runs a Dispatcher on this process's event loop (API tests,
a single uvicorn); ``RayDispatch`` talks to the cluster's DispatchActor. The
work itself is queued in Postgres either way, so a lost wake-up only delays
it until the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from actors.dispatch.dispatcher import DispatchConfig, Dispatcher
from serve_app.runtime.cluster_actor import ClusterActor
from serve_app.settings import Settings

log = logging.getLogger("cairn.dispatch")


def dispatch_config(settings: Settings, database_url: str, secret: bytes) -> DispatchConfig:
    """The dispatcher's settings; ``secret`` is the app's HMAC key (the one
    that checks the verification tokens the dispatcher mails)."""
    return DispatchConfig(
        database_url=database_url,
        base_url=settings.base_url,
        secret=secret,
        smtp_url=settings.smtp_address,
        mail_from=settings.mail_sender,
        fanout_batch_size=settings.fanout_batch_size,
        mail_max_attempts=settings.mail_max_attempts,
        mail_retry_base_s=settings.mail_retry_base_s,
        poll_s=settings.dispatch_poll_s,
        notice_throttle_s=settings.notice_throttle_hours * 3600,
    )


class Dispatch(Protocol):
    async def wake(self) -> None: ...

    async def stats(self) -> dict[str, Any] | None:
        """Queue lengths and counters, or None when the dispatcher cannot answer."""
        ...

    async def close(self) -> None: ...


class LocalDispatch:
    """A Dispatcher in this process: each ``wake`` drains the queues in a task
    of this event loop (wake-ups during a drain make it go round once more).

    There is no timer: mail due for a retry goes out at the next wake-up. In
    production the DispatchActor also polls (``CAIRN_DISPATCH_POLL_S``)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self._task: asyncio.Task[None] | None = None
        self._again = False

    async def wake(self) -> None:
        self._again = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        while self._again:
            self._again = False
            await self.dispatcher.drain_safely()

    async def idle(self) -> None:
        """Wait for the drain under way, if any, to end."""
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._task)

    async def settle(self, within_s: float = 60.0) -> None:
        """Wait until nothing is due (tests): the drain under way ends, then
        one more drain here raises what goes wrong."""
        async with asyncio.timeout(within_s):
            await self.idle()
            await self.dispatcher.drain()

    async def stats(self) -> dict[str, Any] | None:
        try:
            return {**await self.dispatcher.stats(), "where": "in-process"}
        except Exception as exc:
            log.warning("dispatcher stats unavailable: %s", exc)
            return None

    async def close(self) -> None:
        await self.idle()
        await self.dispatcher.close()


class RayDispatch:
    """The cluster's DispatchActor; a wake-up is fire-and-forget."""

    def __init__(self, config: DispatchConfig, timeout_s: float = 2.0) -> None:
        from actors.dispatch.actor import get_or_create

        self._actor = ClusterActor("dispatcher", lambda: get_or_create(config), timeout_s)

    async def wake(self) -> None:
        try:
            self._actor.send("wake")
        except Exception as exc:
            log.warning("dispatcher wake-up not sent (%s); it polls anyway", exc)

    async def stats(self) -> dict[str, Any] | None:
        try:
            stats: dict[str, Any] = await self._actor.call("stats")
        except Exception:
            return None
        return {**stats, "where": "actor"}

    async def close(self) -> None:
        return None
