"""One LISTEN follower for the replica's ears on Postgres (the stream hub's
notifications, the key cache's credential changes): it follows a message
source, hands each message on, and when the connection fails or ends it
reports the loss and connects again after a pause that doubles from
``retry_s`` up to ``retry_max_s`` (back to ``retry_s`` once it listens).

Plain asyncio: the source is passed in (a repository's ``listen`` in the
app), so it runs the same in Serve, uvicorn and tests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

# Calls its argument once it listens, then yields each message's ids until
# the connection fails (by raising).
Source = Callable[[Callable[[], Awaitable[None]]], AsyncIterator[list[str]]]


class Listener:
    """``run`` follows ``source`` until ``closed()``: ``ready()`` on every
    (re)connection, ``handle(ids)`` for each message, ``lost()`` after every
    failure, before the pause."""

    def __init__(
        self,
        what: str,
        log: logging.Logger,
        *,
        retry_s: float = 0.5,
        retry_max_s: float = 15.0,
    ) -> None:
        self.what = what
        self._log = log
        self.retry_s = retry_s
        self.retry_max_s = retry_max_s
        self.delay = retry_s

    async def run(
        self,
        source: Source,
        ready: Callable[[], None],
        handle: Callable[[list[str]], None],
        lost: Callable[[], None],
        closed: Callable[[], bool],
    ) -> None:
        async def listening() -> None:
            self.delay = self.retry_s
            ready()

        while not closed():
            try:
                async for ids in source(listening):
                    handle(ids)
                self._log.warning("%s ended; reconnecting", self.what)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._log.warning("%s failed (%s); retrying in %.1fs", self.what, exc, self.delay)
            lost()
            await asyncio.sleep(self.delay)
            self.delay = min(self.delay * 2, self.retry_max_s)
