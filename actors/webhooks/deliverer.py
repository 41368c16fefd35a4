"""The Deliverer: webhooks out of the outbox, at least once
(docs/decisions/events.md, "Webhooks").

Two steps, each its own short transactions in Postgres, so a crash anywhere
loses nothing (the next deliverer resumes from what is committed):

- Match: read the outbox past the deliverer's durable cursor (its row locked,
  so one matcher at a time), match each event to the active subscriptions
  that want it, and write one delivery row per (event, subscription) with the
  exact body to send, moving the cursor in the same transaction.
- Deliver: claim due deliveries (SKIP LOCKED, a lease pushed into their
  ``next_attempt_at``), only as many of an endpoint's as it has free slots
  (at most ``concurrency`` per endpoint in flight), each
  POSTed in a task of its own with a total timeout, so a slow endpoint holds
  only its own slots; record the outcome: delivered, a retry on the schedule
  (exponential with jitter, 8 tries over about 27 hours), or out of tries.
  ``410 Gone`` stops the subscription; a run of deliveries out of tries
  disables it; its owner is notified either way.

Every request goes through the outbound guard (actors/netguard.py): a URL's
literal address checked, a host's addresses checked when it is resolved at
connect time, no redirects, no proxies, the reply read up to a cap.

A plain class (tests drive it directly); ``actors.webhooks.actor`` runs it as
a Ray actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession
from standardwebhooks import Webhook as Signer

from actors.netguard import PublicResolver, url_problem
from actors.webhooks.compaction import Compactor
from storage.db import listen as db_listen
from storage.db import make_engine, make_sessionmaker
from storage.models.social import WEBHOOK_DISABLED
from storage.models.webhooks import CONTENT_EVENTS, Webhook
from storage.repositories import events as events_repo
from storage.repositories import notifications as notification_repo
from storage.repositories import webhooks as repo

log = logging.getLogger("cairn.webhooks")

NOTIFICATION = "notification.created"

# Seconds before each try after the first (Standard Webhooks' and Svix's
# schedule): 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: eight tries over 27.6
# hours, each wait drawn within +-20 % (jitter: the retries of many
# deliveries to an endpoint that came back do not arrive at once).
SCHEDULE = (5.0, 300.0, 1800.0, 7200.0, 18_000.0, 36_000.0, 36_000.0)
JITTER = 0.2
# Deliveries out of tries in a row (each after ~27 h of failures) that
# disable a subscription.
DISABLE_AFTER = 5
# Finished deliveries are kept 30 days (CAIRN_WEBHOOK_DELIVERY_RETENTION_DAYS),
# and the last 50 of each subscription (what its delivery log shows) always.
RETENTION_S = 30 * 86_400.0
KEEP = 50


@dataclass(frozen=True)
class DeliveryConfig:
    database_url: str
    allow_loopback: bool = False
    timeout_s: float = 10.0
    concurrency: int = 16  # per endpoint (docs/decisions/events.md: 4 until 2026-11-30)
    poll_s: float = 1.0
    # Matching runs at most this often: commits' notices arriving closer
    # together are matched in one transaction (a match costs several
    # statements however few events it reads; at 80 commits a second, one
    # each was a fifth of the actor's time). Delivering is not held back.
    match_gap_s: float = 0.05
    batch: int = 500
    claim: int = 200
    max_reply_bytes: int = 65_536
    # An idle connection to an endpoint is kept this long for its next
    # delivery (under the idle limits of common servers: Node's 5 s, nginx's
    # and aiohttp's 75 s), so a busy endpoint is not connected to per try.
    keepalive_s: float = 4.0
    # Outcomes are written in batches (one transaction, one statement for
    # the rows): when ``record_batch`` are waiting, or ``record_wait_s``
    # after the first of them, whichever comes first.
    record_batch: int = 200
    record_wait_s: float = 0.01
    schedule: tuple[float, ...] = SCHEDULE
    jitter: float = JITTER
    disable_after: int = DISABLE_AFTER
    # Retention: finished deliveries older than ``retention_s`` are deleted,
    # at most ``prune_batch`` a statement, every ``prune_every_s``; the
    # newest ``keep`` of each subscription stay (its delivery log).
    retention_s: float = RETENTION_S
    keep: int = KEEP
    prune_batch: int = 1000
    prune_every_s: float = 600.0
    # Compaction of the outbox (actors/webhooks/compaction.py): events older
    # than ``events_keep_s`` and superseded are deleted, a pass at most every
    # ``compact_every_s``, ``compact_step`` positions a step.
    events_keep_s: float = 7 * 86_400.0
    compact_every_s: float = 3600.0
    compact_step: int = 10_000


@dataclass
class Outcome:
    """A finished try waiting to be written; ``done`` is set once it is."""

    due: repo.Due
    attempt: repo.Attempt
    done: asyncio.Future[None]

    @property
    def ok(self) -> bool:
        return self.attempt.state == "delivered"

    @property
    def gone(self) -> bool:
        return self.attempt.status == 410

    @property
    def out_of_tries(self) -> bool:
        return self.attempt.state == "failed" and not self.gone


@dataclass
class Stats:
    matched: int = 0
    delivered: int = 0
    failed_tries: int = 0
    resent: int = 0  # sent again at once: a kept connection closed under it
    disabled: int = 0
    pruned: int = 0
    compacted: int = 0
    in_flight: int = 0
    cursor: int = 0


def retry_in(schedule: tuple[float, ...], attempts: int, jitter: float) -> float | None:
    """Seconds until the next try after ``attempts`` tries (None: out of tries)."""
    if attempts > len(schedule):
        return None
    wait = schedule[attempts - 1]
    return wait * (1 + random.uniform(-jitter, jitter))


def sign(
    secret: str,
    previous: str | None,
    previous_until: datetime | None,
    msg_id: str,
    body: str,
    now: datetime,
) -> str:
    """The ``webhook-signature`` header: ``v1,<base64>`` by the secret, and by
    the previous one too during a rotation's overlap."""
    signatures = [Signer(secret).sign(msg_id, now, body)]
    if previous and previous_until is not None and previous_until > now:
        signatures.append(Signer(previous).sign(msg_id, now, body))
    return " ".join(signatures)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def _body(type_: str, occurred: datetime, data: dict[str, Any]) -> str:
    return json.dumps(
        {"type": type_, "timestamp": _iso(occurred), "data": data}, separators=(",", ":")
    )


def _tags(item: dict[str, Any]) -> set[str]:
    raw = item.get("tags") or item.get("use_case_tags") or []
    return {str(t).lower() for t in raw}


class Deliverer:
    def __init__(self, config: DeliveryConfig) -> None:
        self.config = config
        self._engine: AsyncEngine | None = None
        self._sessions: async_sessionmaker[AsyncSession] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._in_flight: dict[uuid.UUID, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        # Whether the outbox may hold events not matched yet: set by a commit's
        # notice, a ping or a poll; a step woken only by a try ending does not
        # read the outbox (its cursor lock and query, per try, cost as much as
        # the claim).
        self._unmatched = True
        self._matched_at = 0.0  # monotonic time the last match ended
        self._match_timer: asyncio.TimerHandle | None = None
        # Outcomes not yet written, in the order their tries ended, and the
        # one task writing them.
        self._outcomes: list[Outcome] = []
        self._full = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self.write_failures = 0
        self._pruned_at = 0.0  # monotonic time of the last prune (0: due now)
        self._compactor = Compactor(
            config.events_keep_s, config.compact_every_s, config.compact_step
        )
        self.stats = Stats()

    # --- plumbing --------------------------------------------------------------------

    def sessions(self) -> async_sessionmaker[AsyncSession]:
        if self._sessions is None:
            self._engine = make_engine(self.config.database_url, pool_size=4)
            self._sessions = make_sessionmaker(self._engine)
        return self._sessions

    def http(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            # The guard's resolver checks every new connection's address; a
            # kept one was checked when it was made.
            connector = aiohttp.TCPConnector(
                resolver=PublicResolver(allow_loopback=self.config.allow_loopback),
                limit=0,
                keepalive_timeout=self.config.keepalive_s,
            )
            self._http = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,
                timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
            )
        return self._http

    async def close(self) -> None:
        await self.idle()
        if self._http is not None:
            await self._http.close()
        if self._engine is not None:
            await self._engine.dispose()

    def wake(self) -> None:
        self._unmatched = True
        self._wake.set()

    async def idle(self) -> None:
        """Wait for every delivery in flight to end."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def listen(self) -> None:
        """Wake on every commit that wrote events (the outbox's notice), and
        on pings and redeliveries; reconnects after a failure (the poll
        covers the gap)."""
        while True:
            try:
                async for _ in db_listen(
                    self.config.database_url,
                    events_repo.CHANNEL,
                    self._on_listening,
                    check_s=30.0,
                    application_name="cairn-webhooks",
                ):
                    self.wake()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("webhook wake-ups lost (%s); polling meanwhile", exc)
            await asyncio.sleep(self.config.poll_s)

    async def _on_listening(self) -> None:
        self.wake()  # anything committed before the LISTEN is matched now

    async def run(self) -> None:
        """Match and deliver until cancelled, waking on every commit with
        events (``listen``), on ``wake`` or every poll."""
        listener = asyncio.get_running_loop().create_task(self.listen())
        try:
            await self._loop()
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener

    async def _loop(self) -> None:
        while True:
            unmatched = self._unmatched and self._match_now()
            if unmatched:
                self._unmatched = False
            try:
                await self.step(match=unmatched)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._unmatched = True
                log.exception("webhook step failed; trying again")
            try:
                async with asyncio.timeout(self.config.poll_s):
                    await self._wake.wait()
            except TimeoutError:
                self._unmatched = True  # the poll: notices may have been lost
            self._wake.clear()

    def _match_now(self) -> bool:
        """Whether the match may run now; if it ran less than ``match_gap_s``
        ago, a wake is set for when it may (the events wait in the outbox)."""
        wait = self._matched_at + self.config.match_gap_s - time.monotonic()
        if wait <= 0:
            return True
        if self._match_timer is None:

            def due() -> None:
                self._match_timer = None
                self._wake.set()

            self._match_timer = asyncio.get_running_loop().call_later(wait, due)
        return False

    async def step(self, match: bool = True) -> None:
        """Match every new event (unless ``match`` is false), then start every
        due delivery there is room for."""
        while match and await self.match() >= self.config.batch:
            pass
        if match:
            self._matched_at = time.monotonic()
        await self.deliver()
        # One bounded batch a step while there is more: deleting never holds
        # up matching and delivering for long.
        due = time.monotonic() - self._pruned_at >= self.config.prune_every_s
        if due and await self.prune() < self.config.prune_batch:
            self._pruned_at = time.monotonic()
        # The outbox's compaction, one range of positions a step while a pass
        # runs: it waits for nothing the deliverer has not matched.
        await self._compactor.step_once(self.sessions())
        self.stats.compacted = self._compactor.deleted

    # --- retention -------------------------------------------------------------------

    async def prune(self) -> int:
        """Delete one batch of finished deliveries past the retention (but
        each subscription's newest ``keep``); how many went."""
        async with self.sessions()() as session, session.begin():
            gone = await repo.prune_deliveries(
                session, self.config.retention_s, self.config.keep, self.config.prune_batch
            )
        self.stats.pruned += gone
        return gone

    # --- match -----------------------------------------------------------------------

    async def match(self) -> int:
        """Match one batch of events past the cursor; how many were read."""
        async with self.sessions()() as session, session.begin():
            cursor = await repo.lock_cursor(session)
            found = await repo.events_after(session, cursor, self.config.batch)
            if not found:
                self.stats.cursor = cursor
                return 0
            hooks = await repo.active_hooks(session)
            rows = await self._rows(session, hooks, found) if hooks else []
            await repo.add_deliveries(session, rows)
            await repo.move_cursor(session, found[-1].position)
        self.stats.cursor = found[-1].position
        self.stats.matched += len(rows)
        return len(found)

    async def _rows(
        self, session: AsyncSession, hooks: list[Webhook], found: list[repo.OutboxEvent]
    ) -> list[dict[str, Any]]:
        first, last = found[0].position, found[-1].position
        kinds = {e.kind for e in found if e.type in CONTENT_EVENTS}
        items = {k: await repo.public_state(session, k, first, last) for k in kinds}
        followed: dict[uuid.UUID, set[str]] = {}
        if any(h.filters.get("followed_only") for h in hooks):
            owners = [h.agent_id for h in hooks if h.filters.get("followed_only")]
            followed = await repo.followed_by(session, owners)
        askers: dict[str, str] = {}
        if any(h.filters.get("mine_only") for h in hooks):
            questions = [
                str(items["answer"][str(e.subject_id)]["question_id"])
                for e in found
                if e.kind == "answer" and str(e.subject_id) in items.get("answer", {})
            ]
            askers = await repo.question_authors(session, questions) if questions else {}
        rows: list[dict[str, Any]] = []
        for event in found:
            if event.type == NOTIFICATION:
                rows.extend(self._notification_rows(hooks, event))
                continue
            if event.type not in CONTENT_EVENTS:
                continue
            item = items.get(event.kind, {}).get(str(event.subject_id))
            if item is None:
                continue  # not public now: nothing about it leaves
            data = {
                "id": str(event.subject_id),
                "kind": event.kind,
                "actor_id": str(event.actor_id) if event.actor_id else None,
                "item": item,
            }
            body = _body(event.type, event.created_at, data)
            for hook in hooks:
                if event.position <= hook.since_position or event.type not in hook.events:
                    continue
                if not self._passes(hook, event, item, followed, askers):
                    continue
                rows.append(self._row(hook, event, event.type, body))
        return rows

    def _notification_rows(
        self, hooks: list[Webhook], event: repo.OutboxEvent
    ) -> list[dict[str, Any]]:
        recipient = str(event.payload.get("recipient_id"))
        name = f"notification.{event.payload.get('notification')}"
        data = {
            "notification": event.payload.get("notification"),
            "recipient_id": recipient,
            "target_type": event.payload.get("target_type"),
            "target_id": str(event.subject_id),
            "actor_id": str(event.actor_id) if event.actor_id else None,
        }
        body = _body(name, event.created_at, data)
        return [
            self._row(hook, event, name, body)
            for hook in hooks
            if str(hook.agent_id) == recipient
            and name in hook.events
            and event.position > hook.since_position
        ]

    @staticmethod
    def _passes(
        hook: Webhook,
        event: repo.OutboxEvent,
        item: dict[str, Any],
        followed: dict[uuid.UUID, set[str]],
        askers: dict[str, str],
    ) -> bool:
        filters = hook.filters or {}
        author = str(item.get("author_id") or item.get("agent_id") or "")
        if filters.get("mine_only"):
            mine = author == str(hook.agent_id)
            if event.kind == "answer":
                mine = mine or askers.get(str(item.get("question_id"))) == str(hook.agent_id)
            if not mine:
                return False
        if filters.get("followed_only") and author not in followed.get(hook.agent_id, set()):
            return False
        if event.kind in ("pattern", "question"):
            tags = filters.get("tags")
            if tags and not _tags(item) & set(tags):
                return False
            categories = filters.get("categories")
            if categories and str(item.get("category_id")) not in categories:
                return False
        return True

    @staticmethod
    def _row(hook: Webhook, event: repo.OutboxEvent, type_: str, body: str) -> dict[str, Any]:
        return {
            "webhook_id": hook.id,
            "event_id": event.id,
            "position": event.position,
            "type": type_,
            "body": body,
        }

    # --- deliver ---------------------------------------------------------------------

    def _lease_s(self) -> float:
        # A claimed delivery starts at once (the claim takes no more of an
        # endpoint's than it has free slots): the lease covers its one try,
        # at most the timeout, and writing the outcome. A deliverer that
        # dies, or a Postgres that goes away before the outcome is written,
        # leaves it to be tried again when the lease ends: the drill's tail
        # (docs/benchmarks.md). Longer than that only when recording takes
        # over 10 s, which costs a duplicate (receivers dedupe by
        # webhook-id), never a loss.
        return self.config.timeout_s + 10

    async def deliver(self) -> int:
        """Claim due deliveries for the endpoints with room and start them; how many."""
        async with self.sessions()() as session, session.begin():
            due = await repo.claim_due(
                session,
                self.config.claim,
                self._lease_s(),
                self.config.concurrency,
                self._in_flight,
            )
        for d in due:
            self._in_flight[d.webhook_id] = self._in_flight.get(d.webhook_id, 0) + 1
            task = asyncio.get_running_loop().create_task(self._attempt(d))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return len(due)

    async def _attempt(self, due: repo.Due) -> None:
        try:
            try:
                status, error, latency_ms = await self._post(due)
            finally:
                # The endpoint's slot bounds its requests in flight, not our
                # bookkeeping: the next request may start while this outcome
                # is written (the row stays leased until then).
                self._in_flight[due.webhook_id] -= 1
                if self._in_flight[due.webhook_id] <= 0:
                    del self._in_flight[due.webhook_id]
                self._wake.set()
            await self._queue(self.outcome(due, status, error, latency_ms))
        except Exception:
            log.exception("webhook delivery %s: recording failed", due.id)
        finally:
            self._wake.set()

    def outcome(
        self, due: repo.Due, status: int | None, error: str | None, latency_ms: int
    ) -> Outcome:
        """What a try's answer means: delivered, a retry on the schedule (its
        jitter drawn now, so a batch written again waits the same), or out
        of tries (at once for ``410 Gone``)."""
        if status is not None and 200 <= status < 300:
            state, wait, error = "delivered", None, None
        else:
            gone = status == 410
            attempts = due.attempts + 1
            wait = None if gone else retry_in(self.config.schedule, attempts, self.config.jitter)
            state = "pending" if wait is not None else "failed"
        attempt = repo.Attempt(due.id, due.attempts, state, status, latency_ms, error, wait)
        return Outcome(due, attempt, asyncio.get_running_loop().create_future())

    async def _queue(self, outcome: Outcome) -> None:
        """Hand the outcome to the writer and wait until it is written."""
        self._outcomes.append(outcome)
        if len(self._outcomes) >= self.config.record_batch:
            self._full.set()
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_outcomes())
        await outcome.done

    async def _write_outcomes(self) -> None:
        """Write the waiting outcomes a batch at a time until none is left.

        A batch whose transaction fails (Postgres restarting, a connection
        lost) stays at the head of the queue and is written again after a
        pause: nothing of it was committed, or (a COMMIT whose answer was
        lost) all of it was, and then writing it again matches no row
        (``repo.record_attempts``). An outcome never written (the deliverer
        died) leaves its row leased: the try is made again when the lease
        ends, a duplicate at most."""
        pause = 0.0
        while self._outcomes:
            if len(self._outcomes) < self.config.record_batch or pause:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(self.config.record_wait_s, pause)):
                        await (asyncio.sleep(pause) if pause else self._full.wait())
            self._full.clear()
            batch = self._outcomes[: self.config.record_batch]
            try:
                await self.record(batch)
            except Exception as exc:
                self.write_failures += 1
                pause = min(max(2 * pause, 0.2), 5.0)
                log.warning("webhook outcomes not written (%s); again in %.1f s", exc, pause)
                continue
            pause = 0.0
            del self._outcomes[: len(batch)]
            for outcome in batch:
                if not outcome.done.done():
                    outcome.done.set_result(None)

    async def record(self, batch: list[Outcome]) -> None:
        """Write a batch of outcomes in one transaction: the rows in one
        statement; then, per subscription in the order the tries ended, a
        success ending its run of failures, ``410 Gone`` stopping it, a
        delivery out of tries counting towards disabling it."""
        async with self.sessions()() as session, session.begin():
            applied = await repo.record_attempts(session, [o.attempt for o in batch])
            done = [o for o in batch if o.due.id in applied]
            # Most batches are successes only: one statement for their
            # subscriptions. Those with a failure run through in order.
            eventful = {o.due.webhook_id for o in done if not o.ok and o.attempt.state == "failed"}
            await repo.reset_failures(
                session, list({o.due.webhook_id for o in done if o.ok} - eventful)
            )
            for o in done:
                if o.due.webhook_id not in eventful:
                    continue
                if o.ok:
                    await repo.succeeded(session, o.due.webhook_id)
                elif o.gone:
                    await self._disable(session, o.due.webhook_id, "gone")
                elif o.out_of_tries:
                    failures = await repo.failed(session, o.due.webhook_id)
                    if failures >= self.config.disable_after:
                        await self._disable(session, o.due.webhook_id, "failing")
        for o in done:
            if o.ok:
                self.stats.delivered += 1
            else:
                self.stats.failed_tries += 1

    async def _post(self, due: repo.Due) -> tuple[int | None, str | None, int]:
        started = time.monotonic()

        def took() -> int:
            return int((time.monotonic() - started) * 1000)

        problem = url_problem(due.url, allow_loopback=self.config.allow_loopback)
        if problem is not None:
            return None, f"refused: {problem}", took()
        now = datetime.now(UTC)
        msg_id = str(due.event_id)
        headers = {
            "content-type": "application/json",
            "user-agent": "Cairn-Webhooks/1",
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": sign(
                due.secret, due.previous_secret, due.previous_until, msg_id, due.body, now
            ),
        }
        # A kept connection the endpoint closed as the request went out
        # (its idle limit shorter than ours) ends at once, before any answer:
        # sent again once, on a fresh connection. At least once either way
        # (the same webhook-id; receivers dedupe by it).
        resend = True
        while True:
            try:
                async with self.http().post(
                    due.url, data=due.body.encode(), headers=headers, allow_redirects=False
                ) as resp:
                    read = 0
                    async for chunk in resp.content.iter_chunked(16_384):
                        read += len(chunk)
                        if read > self.config.max_reply_bytes:
                            break  # the status is all that counts; stop reading
                    error = None if resp.status < 300 else f"HTTP {resp.status}"
                    return resp.status, error, took()
            except aiohttp.ServerDisconnectedError as exc:
                if resend and took() < 1000:
                    resend = False
                    self.stats.resent += 1
                    continue
                return None, f"{type(exc).__name__}: {exc}"[:500], took()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                return None, f"{type(exc).__name__}: {exc}"[:500], took()

    async def _disable(self, session: AsyncSession, hook_id: uuid.UUID, reason: str) -> None:
        stopped = await repo.disable(session, hook_id, reason)
        if stopped is None:
            return
        owner, url = stopped
        self.stats.disabled += 1
        why = "answered 410 Gone" if reason == "gone" else "failed every try of a run of events"
        await notification_repo.add(
            session,
            [
                {
                    "recipient_id": owner,
                    "kind": WEBHOOK_DISABLED,
                    "actor_id": None,
                    "target_type": "agent",
                    "target_id": owner,
                    "target_title": f"Webhook {url} stopped: it {why}"[:300],
                    "target_slug": await repo.username(session, owner),
                    "data": {"webhook_id": str(hook_id), "reason": reason},
                }
            ],
            mail=False,
        )
        events_repo.stage(
            session,
            NOTIFICATION,
            "notification",
            owner,
            None,
            {"recipient_id": str(owner), "notification": WEBHOOK_DISABLED, "target_type": "agent"},
        )

    async def backlog(self) -> dict[str, Any]:
        """What is left to do (for stats)."""
        async with self.sessions()() as session:
            return {
                "next_due_in_s": await repo.next_due_in(session),
                "in_flight": sum(self._in_flight.values()),
                "cursor": self.stats.cursor,
                "matched": self.stats.matched,
                "delivered": self.stats.delivered,
                "failed_tries": self.stats.failed_tries,
                "resent": self.stats.resent,
                "disabled": self.stats.disabled,
                "pruned": self.stats.pruned,
                "compacted": self.stats.compacted,
            }
