"""Work that must wait until the request's transaction has committed
(e.g. telling the TrendingCounter about a vote: a rolled-back vote must not
count), work to undo if it does not commit (a file written for it), and what
the request's session carries for the notifications made in it (whether to
queue e-mail, how to wake the dispatcher) and for the keys it changes (which
this process's key cache forgets once it commits)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from sqlmodel.ext.asyncio.session import AsyncSession

log = logging.getLogger("cairn.hooks")

Callback = Callable[[], Awaitable[object]]
Undo = Callable[[], object]
_KEY = "cairn.after_commit"
_ROLLBACK = "cairn.on_rollback"
_NOTIFY = "cairn.notify"
_WOKEN = "cairn.dispatch_woken"
_FORGET_KEYS = "cairn.forget_keys"
_AFTER_ROLLBACK = "cairn.after_rollback"
_KEY_CHECK = "cairn.key_check"
Work = Callable[[AsyncSession], Awaitable[object]]


@dataclass(frozen=True)
class Notify:
    mail: bool  # queue e-mail for the notifications that preferences allow
    wake: Callback  # tell the dispatcher that work was queued
    # The window of "one notice per (actor, recipient, kind)", in seconds.
    throttle_s: float = 24 * 3600.0


def set_notify(session: AsyncSession, notify: Notify) -> None:
    session.info[_NOTIFY] = notify


def mail_enabled(session: AsyncSession) -> bool:
    notify: Notify | None = session.info.get(_NOTIFY)
    return notify is not None and notify.mail


def throttle_s(session: AsyncSession) -> float:
    notify: Notify | None = session.info.get(_NOTIFY)
    return notify.throttle_s if notify is not None else Notify.throttle_s


def wake_dispatcher(session: AsyncSession) -> None:
    """Wake the dispatcher once this transaction has committed (once per transaction)."""
    notify: Notify | None = session.info.get(_NOTIFY)
    if notify is not None and not session.info.get(_WOKEN):
        session.info[_WOKEN] = True
        after_commit(session, notify.wake)


def set_key_cache(session: AsyncSession, forget: Callable[[Iterable[object]], None]) -> None:
    """How this process's key cache forgets an agent (serve_app/runtime/keycache.py)."""
    session.info[_FORGET_KEYS] = forget


def credentials_changed(session: AsyncSession, agent_id: object) -> None:
    """This transaction revokes or replaces the agent's keys or changes its
    standing: once it commits, this process's key cache forgets the agent,
    before the answer goes out (other processes hear it from Postgres)."""
    forget: Callable[[Iterable[object]], None] | None = session.info.get(_FORGET_KEYS)
    if forget is None:
        return

    async def forget_now() -> None:
        forget([agent_id])

    after_commit(session, forget_now)


def after_commit(session: AsyncSession, callback: Callback) -> None:
    session.info.setdefault(_KEY, []).append(callback)


async def run_after_commit(session: AsyncSession) -> None:
    """Run the callbacks of a committed transaction; a failure is logged, not
    raised: the write itself has landed."""
    session.info.pop(_WOKEN, None)
    session.info.pop(_ROLLBACK, None)
    session.info.pop(_AFTER_ROLLBACK, None)
    for callback in session.info.pop(_KEY, []):
        try:
            await callback()
        except Exception:
            log.exception("after-commit callback failed")


def on_rollback(session: AsyncSession, undo: Undo) -> None:
    """Undo work done outside the database (a file written for this
    transaction) if the transaction does not commit."""
    session.info.setdefault(_ROLLBACK, []).append(undo)


def set_key_check(session: AsyncSession, check: Callable[[str, bytes], bool]) -> None:
    """How to tell whether a full API key matches a stored keyed hash (the
    app's secret stays in the closure)."""
    session.info[_KEY_CHECK] = check


def key_matches(session: AsyncSession, key: str, stored: bytes) -> bool:
    check: Callable[[str, bytes], bool] | None = session.info.get(_KEY_CHECK)
    return check is not None and check(key, stored)


def after_rollback(session: AsyncSession, work: Work) -> None:
    """Database work that must land although this transaction will not
    (the content screen revokes a leaked key while it refuses the write that
    carried it): run in a fresh transaction of its own once this one has
    rolled back (serve_app/http/deps.py, ``transaction``)."""
    session.info.setdefault(_AFTER_ROLLBACK, []).append(work)


def take_after_rollback(session: AsyncSession) -> list[Work]:
    return list(session.info.pop(_AFTER_ROLLBACK, []))


def discard(session: AsyncSession) -> None:
    """The transaction will not commit: drop its after-commit work and run its undos."""
    session.info.pop(_KEY, None)
    session.info.pop(_WOKEN, None)
    for undo in reversed(session.info.pop(_ROLLBACK, [])):
        try:
            undo()
        except Exception:
            log.exception("on-rollback callback failed")
