"""When each API key was last used, written in batches: an agent's first call
of the minute records the time here and goes on, and the replica writes
what it recorded in one statement at most every ``every_s`` (as the
rate-limit reports are batched; docs/decisions/admission.md,
"Verified API keys kept in the replica (issue 32)").

``last_used_at`` is what an owner reads to tell a key in use from a leaked
or forgotten one, shown to the minute: it reaches Postgres up to
``every_s`` late, and what a replica had not written when it died is lost
(at most ``every_s`` of it). It never holds up a request, and the write of
a failed request is not undone with it (the key was used all the same).
Plain asyncio: the writer is passed in."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime

log = logging.getLogger("cairn.lastuse")

# Writes (key id, used at) pairs; raises on failure.
Writer = Callable[[list[tuple[uuid.UUID, datetime]]], Awaitable[object]]


class LastUse:
    def __init__(self, write: Writer, every_s: float = 1.0, max_pending: int = 10_000) -> None:
        self._write = write
        self.every_s = every_s
        self.max_pending = max_pending
        self._pending: dict[uuid.UUID, datetime] = {}
        self._task: asyncio.Task[None] | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._closed = False
        self.writes = 0  # statements sent (tests and the bench read it)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def record(self, key_id: uuid.UUID, at: datetime) -> None:
        """Key ``key_id`` was used at ``at`` (written with the next batch)."""
        earlier = self._pending.get(key_id)
        if earlier is None or at > earlier:
            self._pending[key_id] = at
        if self._closed:
            return
        if len(self._pending) >= self.max_pending:
            self._start_flush()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        """Every ``every_s`` while there is something to write; ends when idle."""
        while self._pending and not self._closed:
            await asyncio.sleep(self.every_s)
            self._start_flush()
            if self._flushing is not None:
                await asyncio.wait([self._flushing])

    def _start_flush(self) -> None:
        if self._flushing is not None and not self._flushing.done():
            return  # one statement at a time; the rest go with the next
        if self._pending:
            self._flushing = asyncio.ensure_future(self.flush())

    async def flush(self) -> None:
        """Write what was recorded (dropped, with a warning, if it fails)."""
        batch, self._pending = list(self._pending.items()), {}
        if not batch:
            return
        try:
            self.writes += 1
            await self._write(batch)
        except Exception as exc:
            log.warning("could not record the last use of %d API keys (%s)", len(batch), exc)

    async def close(self) -> None:
        """Write what is left and stop."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._flushing is not None:
            await asyncio.wait([self._flushing])  # its batch is already out of _pending
        await self.flush()
