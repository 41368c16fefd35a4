"""Compaction of the outbox (docs/decisions/events.md, "Compaction").

The change feed shows each subject as it is now, so an event followed by a
later event of the same subject shows no reader anything: the Compactor
deletes such events once they are older than the age kept and the webhook
deliverer has matched past them. It works a bounded range of positions per
call, each in its own short transaction, so the deliverer that drives it
never stops for long; a pass reads only the events that crossed the horizon
since the last pass (a restarted deliverer starts one pass from the start).
"""

from __future__ import annotations

import time

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.repositories import events as events_repo


class Compactor:
    def __init__(self, keep_s: float, every_s: float = 3600.0, step: int = 10_000) -> None:
        self.keep_s = keep_s  # events younger than this are never touched
        self.every_s = every_s  # a new pass at most this often
        self.step = step  # positions a call walks
        self.done_to = 0  # positions up to here have driven their deletions
        self.horizon = 0
        self.next_pass = 0.0  # monotonic
        self.deleted = 0

    async def step_once(self, sessions: async_sessionmaker[AsyncSession]) -> bool:
        """Compact one range of positions; True while this pass has more."""
        if self.done_to >= self.horizon:
            if time.monotonic() < self.next_pass:
                return False
            self.next_pass = time.monotonic() + self.every_s
            async with sessions() as session:
                self.horizon = await events_repo.compaction_horizon(session, self.keep_s)
            if self.done_to >= self.horizon:
                return False
        stop = min(self.done_to + self.step, self.horizon)
        async with sessions() as session, session.begin():
            self.deleted += await events_repo.compact_range(session, self.done_to, stop)
        self.done_to = stop
        return self.done_to < self.horizon

    async def run(self, sessions: async_sessionmaker[AsyncSession]) -> int:
        """A whole pass now (tests, operators); the events deleted by it."""
        before, self.next_pass = self.deleted, 0.0
        while await self.step_once(sessions):
            pass
        return self.deleted - before
