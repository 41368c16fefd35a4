"""Work that must wait until the request's transaction has committed
(e.g. telling the TrendingCounter about a vote: a rolled-back vote must not count)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from sqlmodel.ext.asyncio.session import AsyncSession

log = logging.getLogger("cairn.hooks")

Callback = Callable[[], Awaitable[object]]
_KEY = "cairn.after_commit"


def after_commit(session: AsyncSession, callback: Callback) -> None:
    session.info.setdefault(_KEY, []).append(callback)


async def run_after_commit(session: AsyncSession) -> None:
    """Run the callbacks of a committed transaction; a failure is logged, not
    raised: the write itself has landed."""
    for callback in session.info.pop(_KEY, []):
        try:
            await callback()
        except Exception:
            log.exception("after-commit callback failed")


def discard(session: AsyncSession) -> None:
    session.info.pop(_KEY, None)
