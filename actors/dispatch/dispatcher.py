"""The Dispatcher: the work that notifications leave behind, done off the
request path from two durable queues in Postgres.

- Follower fan-out: a new pattern queues one ``fanout_jobs`` row in its own
  transaction; here each batch of followers gets its notifications and the
  job's cursor moves in one transaction, so a crash at any point loses
  nothing and repeats nothing (the next worker resumes at the cursor).
- E-mail: due ``mail_outbox`` rows are locked (SKIP LOCKED, so several
  workers share the queue), sent over SMTP, and marked sent or rescheduled
  with exponential backoff in that same transaction.

A plain class (tests drive it directly); ``actors.dispatch.actor`` runs it as
a Ray actor, ``serve_app.runtime.dispatch`` in process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from actors.dispatch.mail import (
    VERIFY_EMAIL,
    Letter,
    Permanent,
    compose,
    parse_smtp_url,
    send_batch,
)
from storage.db import make_engine, make_sessionmaker
from storage.repositories import notifications as repo
from telemetry import metrics

log = logging.getLogger("cairn.dispatch")

# The longest wait between two tries of one message.
MAX_RETRY_S = 3600.0


# An address-verification token (serve_app/services/humans.py reads it back).
VERIFY_TOKEN_PREFIX = "cairn_v_"


def token_hash(secret: bytes, token: str) -> bytes:
    """HMAC-SHA256, the keyed hash every secret of Cairn is stored as
    (serve_app.kit.keys.hash_secret; actors cannot import serve_app)."""
    return hmac.new(secret, token.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class DispatchConfig:
    database_url: str
    base_url: str
    # The HMAC key: verification tokens are made here, at sending time, and
    # only their keyed hash is stored, so no usable token is ever at rest.
    secret: bytes
    smtp_url: str | None = None
    mail_from: str = "Cairn <noreply@localhost>"
    fanout_batch_size: int = 500
    mail_batch_size: int = 50
    mail_max_attempts: int = 8
    mail_retry_base_s: float = 30.0
    poll_s: float = 2.0
    notice_throttle_s: float = repo.DEFAULT_THROTTLE_S


class Dispatcher:
    def __init__(
        self,
        config: DispatchConfig,
        sessions: async_sessionmaker[AsyncSession] | None = None,
    ) -> None:
        self.config = config
        self._engine: AsyncEngine | None = None
        if sessions is None:
            self._engine = make_engine(config.database_url, pool_size=2, max_overflow=0)
            sessions = make_sessionmaker(self._engine)
        self._sessions = sessions
        # Fails fast on a malformed URL: better at start than at the first mail.
        self._smtp = parse_smtp_url(config.smtp_url) if config.smtp_url else None
        self._wakeup: asyncio.Event | None = None
        self.started = time.time()
        self.counters = {
            "fanout_batches": 0,
            "fanout_notifications": 0,
            "fanout_jobs_done": 0,
            "mail_sent": 0,
            "mail_retried": 0,
            "mail_failed": 0,
            "mail_cancelled": 0,
            "errors": 0,
        }
        # When the last drain failed, and whether the latest one did: the
        # exception text goes to the log only (it can carry SQL, addresses,
        # SMTP replies), never into /api/health.
        self.last_error_at: float | None = None
        self.failing = False

    @property
    def mail(self) -> bool:
        return self._smtp is not None

    # One step of each queue ----------------------------------------------------

    async def fanout_step(self) -> int:
        """Notify one batch of followers for the oldest pending job; returns
        the followers walked (0 when no job is pending)."""
        async with self._sessions() as session:
            job = await repo.claim_fanout(session)
            if job is None:
                await session.rollback()
                return 0
            if not await repo.target_public(session, job):
                # Archived, rejected or deleted meanwhile: no more news of it.
                await repo.cancel_fanout(session, job)
                await session.commit()
                log.info("fan-out of %s %s cancelled: no longer public", job.kind, job.target_id)
                return 1
            batch = await repo.fanout_batch(
                session,
                job,
                self.config.fanout_batch_size,
                mail=self.mail,
                throttle_s=self.config.notice_throttle_s,
            )
            await session.commit()
        self.counters["fanout_batches"] += 1
        self.counters["fanout_notifications"] += batch.made
        if batch.done:
            self.counters["fanout_jobs_done"] += 1
        return max(batch.seen, 1)

    async def mail_step(self) -> int:
        """Send one batch of due e-mail; returns the messages tried (0: none due)."""
        if self._smtp is None:
            return 0
        async with self._sessions() as session:
            due = await repo.claim_mail(session, self.config.mail_batch_size)
            if not due:
                await session.rollback()
                return 0
            sender, base_url = self.config.mail_from, self.config.base_url
            unwanted = await repo.unwanted_mail(session, [i.message.id for i in due])
            messages, tried = [], []
            for item in due:
                if item.message.id in unwanted:
                    why = "no longer wanted: mail off or account inactive"
                    await repo.mail_failed(session, item.message, why, None)
                    self.counters["mail_cancelled"] += 1
                    continue
                try:
                    # A savepoint: a database error building one message (its
                    # verification token) leaves the batch's transaction usable.
                    async with session.begin_nested():
                        letter = await self._letter(session, item)
                        messages.append(compose(letter, sender=sender, base_url=base_url))
                except Exception as exc:  # one message that cannot be built stops no other
                    await repo.mail_failed(session, item.message, f"not composed: {exc!r}", None)
                    self.counters["mail_failed"] += 1
                    metrics.MAIL_FAILURES.inc()
                    log.warning("mail %s could not be composed: %r", item.message.id, exc)
                    continue
                tried.append(item)
            # The rows stay locked while the server talks: no other worker can
            # send them, and a crash here rolls back to "pending" (retried).
            results = await asyncio.to_thread(send_batch, self._smtp, messages)
            sent = []
            for item, error in zip(tried, results, strict=True):
                if error is None:
                    sent.append(item.message.id)
                    continue
                retry_in = self._retry_in(item.message.attempts + 1, error)
                await repo.mail_failed(session, item.message, _describe(error), retry_in)
                self.counters["mail_retried" if retry_in is not None else "mail_failed"] += 1
                (metrics.MAIL_RETRIES if retry_in is not None else metrics.MAIL_FAILURES).inc()
                log.warning(
                    "mail %s to %s failed (attempt %d): %s",
                    item.message.id,
                    item.message.to_address,
                    item.message.attempts + 1,
                    _describe(error),
                )
            await repo.mail_sent(session, sent)
            await session.commit()
        self.counters["mail_sent"] += len(sent)
        return len(due)

    def _retry_in(self, attempts: int, error: Exception) -> timedelta | None:
        if isinstance(error, Permanent) or attempts >= self.config.mail_max_attempts:
            return None
        delay = min(self.config.mail_retry_base_s * 2 ** (attempts - 1), MAX_RETRY_S)
        return timedelta(seconds=delay)

    async def _letter(self, session: AsyncSession, item: repo.Outgoing) -> Letter:
        v = item.verification
        if v is not None:
            # A fresh token for this message; its hash lands with the "sent"
            # mark in this transaction (a retry makes another).
            token = VERIFY_TOKEN_PREFIX + secrets.token_urlsafe(32)
            await repo.set_verification_token(session, v.id, token_hash(self.config.secret, token))
            return Letter(
                message_id=str(item.message.id),
                to_address=item.message.to_address,
                to_name=item.recipient.display_name,
                for_agent=None,
                kind=VERIFY_EMAIL,
                actor=None,
                target_type=None,
                target_title=None,
                target_slug=None,
                data={
                    "token": token,
                    "expires_at": v.expires_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M"),
                },
            )
        n = item.notification
        assert n is not None  # ck_mail_one_source
        return Letter(
            message_id=str(item.message.id),
            to_address=item.message.to_address,
            to_name=item.recipient.display_name,
            for_agent=None if item.recipient.is_human else item.recipient.username,
            kind=n.kind,
            actor=item.actor.username if item.actor else None,
            target_type=n.target_type,
            target_title=n.target_title,
            target_slug=n.target_slug,
            data=dict(n.data or {}),
        )

    # Loops ------------------------------------------------------------------------

    async def drain(self) -> None:
        """Work both queues until neither has anything due."""
        while True:
            walked = await self.fanout_step()
            tried = await self.mail_step()
            if walked == 0 and tried == 0:
                return

    async def drain_safely(self) -> bool:
        """``drain``, but a failure is logged and counted rather than raised
        (the database restarting, a connection cut: the work stays queued and
        the next drain picks it up). False when it failed."""
        try:
            await self.drain()
        except asyncio.CancelledError:
            raise
        except Exception:
            self.counters["errors"] += 1
            self.last_error_at = time.time()
            self.failing = True
            log.exception("dispatch failed; the work stays queued")
            return False
        self.failing = False
        return True

    def wake(self) -> None:
        """New work was committed: look now rather than at the next poll."""
        if self._wakeup is not None:
            self._wakeup.set()

    async def run(self) -> None:
        """Forever: drain, then sleep until woken or ``poll_s`` passes (the poll
        finds retries coming due and work left by a worker that died)."""
        self._wakeup = asyncio.Event()
        while True:
            self._wakeup.clear()
            await self.drain_safely()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=self.config.poll_s)

    async def record_metrics(self) -> None:
        """Set the backlog gauges (telemetry/metrics.py) from the queues in Postgres."""
        async with self._sessions() as session:
            queued = await repo.queue_stats(session)
            await session.rollback()
        for queue, key in _BACKLOG:
            metrics.DISPATCH_BACKLOG.labels(queue).set(queued[key])

    async def stats(self) -> dict[str, Any]:
        async with self._sessions() as session:
            queued = await repo.queue_stats(session)
            await session.rollback()
        return {
            **queued,
            **self.counters,
            "mail_enabled": self.mail,
            "started": self.started,
            "state": "failing" if self.failing else "ok",
            "last_error_at": self.last_error_at,
        }

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()


# (backlog gauge label, queue_stats key)
_BACKLOG = (
    ("fanout_jobs", "fanout_jobs_pending"),
    ("followers_pending", "fanout_followers_pending"),
    ("mail_pending", "mail_pending"),
    ("mail_failed", "mail_failed"),
)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:500]
