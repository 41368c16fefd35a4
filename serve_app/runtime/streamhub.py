"""The replica's one ear on Postgres: a single LISTEN connection whose
messages ("these recipients have new notifications") wake the replica's open
streams. Plain asyncio: the message source is passed in (the repository's
``listen`` in the app), so it runs the same in Serve, uvicorn and tests.

A wake only says "look now": each stream reads its own rows after its own
cursor, and also looks on every heartbeat, so a message lost while the
listener reconnects delays a notification, never loses it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from serve_app.runtime.listener import Listener, Source

log = logging.getLogger("cairn.streams")


class StreamsFull(Exception):
    """This replica holds as many streams as it may."""


class Subscription:
    """One open stream's doorbell."""

    def __init__(self, hub: StreamHub, recipient: str) -> None:
        self.recipient = recipient
        self._hub = hub
        self._rung = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self._hub.closed

    def ring(self) -> None:
        self._rung.set()

    async def wait(self, seconds: float) -> bool:
        """Wait for a ring (True) or ``seconds`` (False). A ring that
        came while the stream was busy is not lost: it answers at once."""
        if not self._rung.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rung.wait(), seconds)
        rung = self._rung.is_set()
        self._rung.clear()
        return rung

    def close(self) -> None:
        self._hub._remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class StreamHub:
    """The open streams of one process, by recipient, and the listener that
    rings them. The listener starts with the first stream and reconnects
    (with backoff) whenever its connection fails, e.g. a database restart."""

    def __init__(
        self,
        source: Source,
        *,
        max_streams: int,
        retry_s: float = 0.5,
        retry_max_s: float = 15.0,
    ) -> None:
        self._source = source
        self.max_streams = max_streams
        self._listener = Listener(
            "notification listener", log, retry_s=retry_s, retry_max_s=retry_max_s
        )
        self._subs: dict[str, set[Subscription]] = {}
        self._count = 0
        self._task: asyncio.Task[None] | None = None
        self.closed = False
        self.listening = False
        self.connects = 0  # successful LISTENs (1 + reconnects)
        # Moves whenever the listener connects or loses its connection: a
        # stream that saw the same epoch, listening, before and after a wait
        # knows that every notification in between rang it.
        self.epoch = 0

    @property
    def open_streams(self) -> int:
        return self._count

    def subscribe(self, recipient: str) -> Subscription:
        if self._count >= self.max_streams:
            raise StreamsFull(f"{self._count} streams open")
        sub = Subscription(self, recipient)
        self._subs.setdefault(recipient, set()).add(sub)
        self._count += 1
        if self._task is None and not self.closed:
            self._task = asyncio.get_running_loop().create_task(self._listen())
        return sub

    def _remove(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.recipient)
        if subs is None or sub not in subs:
            return
        subs.discard(sub)
        self._count -= 1
        if not subs:
            del self._subs[sub.recipient]

    def ring(self, recipients: Iterable[str]) -> None:
        for recipient in recipients:
            for sub in self._subs.get(recipient, ()):
                sub.ring()

    def ring_all(self) -> None:
        for subs in self._subs.values():
            for sub in subs:
                sub.ring()

    def _ready(self) -> None:
        self.listening = True
        self.connects += 1
        self.epoch += 1
        # Whatever committed while nobody listened: every stream looks now.
        self.ring_all()

    def _lost(self) -> None:
        self.listening = False
        self.epoch += 1

    async def _listen(self) -> None:
        await self._listener.run(
            self._source, self._ready, self.ring, self._lost, lambda: self.closed
        )

    async def close(self) -> None:
        """Stop listening; open streams see ``closed`` and end."""
        self.closed = True
        self.ring_all()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.listening = False
        self.epoch += 1
