"""Webhook claims and outcomes (actors/webhooks/deliverer.py): a claim takes
no more of an endpoint's due rows than it has free slots, oldest first, and
a busy endpoint's backlog holds up no other; outcomes are written in batches
(``Deliverer.record``): a batch whose transaction dies mid-way is written
again and loses nothing; a batch written twice records each try once; a
subscription's outcomes in one batch count in the order the tries ended
(docs/decisions/events.md, "Webhooks")."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import httpx
import psycopg

from actors.webhooks.deliverer import Deliverer
from storage.db import libpq_url
from storage.repositories import webhooks as repo
from tests.api.conftest import register, scalar
from tests.api.test_webhook_delivery import (  # noqa: F401 - fixtures used by name
    DEADLINE_S,
    Make,
    Receiver,
    ask_and_answer,
    deliverers,
    receiver,
    subscribe,
    until,
)
from tests.api.test_webhooks import settings  # noqa: F401 - fixture used by name

ROW = "SELECT state, attempts, last_status FROM webhook_deliveries WHERE webhook_id = %s"


def rows(database: str, hook_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(libpq_url(database)) as db:
        return [tuple(r) for r in db.execute(ROW, (hook_id,)).fetchall()]


async def claimed(deliverer: Deliverer, database: str, attempts: int = 0) -> list[repo.Due]:
    """Match what is new, each row at ``attempts`` tries made, and claim
    every due delivery (as ``deliver`` does)."""
    await deliverer.match()
    with psycopg.connect(libpq_url(database), autocommit=True) as db:
        db.execute("UPDATE webhook_deliveries SET attempts = %s", (attempts,))
    async with deliverer.sessions()() as session, session.begin():
        return await repo.claim_due(session, 100, 60.0, concurrency=4)


async def test_a_claim_takes_no_more_of_an_endpoint_than_it_has_free_slots(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    deliverers: Make,  # noqa: F811
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Claim Asker"), await register(client, "Claim Helper")
    # Nothing is sent to these: the claims below are made by hand.
    hot = await subscribe(client, asker, "http://127.0.0.1:9/hot", ["answer.created"])
    cool = await subscribe(client, asker, "http://127.0.0.1:9/cool", ["answer.created"])
    other = await register(client, "Claim Asker Two")  # five questions an hour each
    for n in range(6):
        await ask_and_answer(client, asker if n % 2 else other, answerer, n)
    deliverer = deliverers()
    await deliverer.match()
    # hot's backlog is older than all of cool's: first in line.
    with psycopg.connect(libpq_url(database), autocommit=True) as db:
        db.execute(
            "UPDATE webhook_deliveries SET next_attempt_at = now() - interval '1 hour'"
            " WHERE webhook_id = %s",
            (hot["id"],),
        )
    hot_id = uuid.UUID(hot["id"])

    async def claim(limit: int, in_flight: dict[uuid.UUID, int]) -> Counter[str]:
        async with deliverer.sessions()() as session, session.begin():
            found = await repo.claim_due(session, limit, 60.0, 4, in_flight)
        return Counter(str(d.webhook_id) for d in found if str(d.webhook_id) in ours)

    ours = {hot["id"], cool["id"]}
    # hot has 3 of its 4 slots in flight: one of its rows, and four of cool's.
    assert await claim(100, {hot_id: 3}) == {hot["id"]: 1, cool["id"]: 4}
    # hot full: none of its rows, and its older backlog holds up none of cool's.
    assert await claim(100, {hot_id: 4}) == {cool["id"]: 2}
    # Under a limit, the oldest due rows first; a leased row is not claimed again.
    assert await claim(2, {}) == {hot["id"]: 2}
    # What was not claimed is untouched: still due now.
    due_now = (
        "SELECT count(*) FROM webhook_deliveries"
        " WHERE webhook_id = %s AND state = 'pending' AND next_attempt_at <= now()"
    )
    assert scalar(database, due_now, hot["id"]) == 3
    assert scalar(database, due_now, cool["id"]) == 0


async def test_a_batch_whose_transaction_dies_midway_is_written_again_once(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    receiver: Receiver,  # noqa: F811
    deliverers: Make,  # noqa: F811
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Cut Asker"), await register(client, "Cut Helper")
    hook = await subscribe(client, asker, f"{receiver.base}/cut", ["answer.created"])
    await ask_and_answer(client, asker, answerer)
    # A run of failures to end: the batch's second statement then updates
    # the subscription's row, which this test holds locked, so the batch's
    # transaction waits there with its deliveries' UPDATE done; its
    # connection is then cut (as a Postgres restart does).
    with psycopg.connect(libpq_url(database), autocommit=True) as db:
        db.execute("UPDATE webhooks SET failures = 1 WHERE id = %s", (hook["id"],))
    deliverer = deliverers()
    assert await deliverer.match() > 0
    with psycopg.connect(libpq_url(database)) as holder:
        # (Not FOR UPDATE: a delivery row's foreign key check may read it.)
        holder.execute("SELECT 1 FROM webhooks WHERE id = %s FOR NO KEY UPDATE", (hook["id"],))
        running = asyncio.get_running_loop().create_task(
            until(deliverer, lambda: deliverer.write_failures >= 1)
        )
        deadline = time.monotonic() + DEADLINE_S
        with psycopg.connect(libpq_url(database), autocommit=True) as admin:
            while True:
                waiting = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE 'UPDATE webhooks SET failures%%'"
                ).fetchall()
                if waiting:
                    break
                assert time.monotonic() < deadline and not running.done(), "never blocked"
                await asyncio.sleep(0.02)  # polling Postgres for the blocked write
            admin.execute("SELECT pg_terminate_backend(%s)", (waiting[0][0],))
        await running
        # Nothing of the batch was committed: the row is still as claimed.
        assert rows(database, hook["id"]) == [("pending", 0, None)]
        holder.rollback()
    # The batch is written again after its pause: the try counted once.
    await until(deliverer, lambda: deliverer.stats.delivered == 1)
    await deliverer.idle()
    assert rows(database, hook["id"]) == [("delivered", 1, 200)]
    assert scalar(database, "SELECT failures FROM webhooks WHERE id = %s", hook["id"]) == 0
    assert len(receiver.at("/cut")) == 1


async def test_a_batch_written_twice_records_each_try_once(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    deliverers: Make,  # noqa: F811
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Twice Asker"), await register(client, "Twice Helper")
    # Nothing is sent to it: the outcomes below are written by hand.
    hook = await subscribe(client, asker, "http://127.0.0.1:9/twice", ["answer.created"])
    await ask_and_answer(client, asker, answerer)
    deliverer = deliverers()
    [due] = await claimed(deliverer, database)
    # A COMMIT whose answer was lost: the same batch again.
    retry = [deliverer.outcome(due, 503, "HTTP 503", 7)]
    await deliverer.record(retry)
    await deliverer.record(retry)
    assert rows(database, hook["id"]) == [("pending", 1, 503)]
    assert deliverer.stats.failed_tries == 1
    # An outcome of a try the row has moved past (a lease that ran out, the
    # row tried again meanwhile) changes nothing either.
    await deliverer.record([deliverer.outcome(due, 200, None, 5)])
    assert rows(database, hook["id"]) == [("pending", 1, 503)]
    assert deliverer.stats.delivered == 0


async def test_a_subscriptions_outcomes_in_one_batch_count_in_order(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    deliverers: Make,  # noqa: F811
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Order Asker"), await register(client, "Order Helper")
    # Nothing is sent to these: the outcomes below are written by hand.
    ends = await subscribe(client, asker, "http://127.0.0.1:9/ends", ["answer.created"])
    stops = await subscribe(client, asker, "http://127.0.0.1:9/stops", ["answer.created"])
    for n in range(3):
        await ask_and_answer(client, asker, answerer, n)
    deliverer = deliverers(disable_after=2)
    # Every row at its last try (the fixture's schedule: three retries).
    due = await claimed(deliverer, database, attempts=3)
    by_hook: dict[str, list[repo.Due]] = {ends["id"]: [], stops["id"]: []}
    for d in due:
        by_hook[str(d.webhook_id)].append(d)
    e, s = by_hook[ends["id"]], by_hook[stops["id"]]
    await deliverer.record(
        [
            # ends: out of tries, then a success (the run ends), then out of
            # tries again: one failure in its run, still on.
            deliverer.outcome(e[0], 500, "HTTP 500", 3),
            deliverer.outcome(e[1], 200, None, 3),
            deliverer.outcome(e[2], None, "TimeoutError", 10_000),
            # stops: out of tries twice in a row: disabled, its last row cancelled.
            deliverer.outcome(s[0], 500, "HTTP 500", 3),
            deliverer.outcome(s[1], 500, "HTTP 500", 3),
        ]
    )
    hooks = "SELECT active, failures, disabled_reason FROM webhooks WHERE id = %s"
    with psycopg.connect(libpq_url(database)) as db:
        assert db.execute(hooks, (ends["id"],)).fetchone() == (True, 1, None)
        assert db.execute(hooks, (stops["id"],)).fetchone() == (False, 2, "failing")
    assert sorted(r[0] for r in rows(database, stops["id"])) == ["cancelled", "failed", "failed"]
    assert deliverer.stats.disabled == 1
    notices = await client.get("/api/notifications", headers=asker.auth)
    assert [n["kind"] for n in notices.json()["data"]].count("webhook_disabled") == 1
