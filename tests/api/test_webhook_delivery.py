"""Webhook deliveries (actors/webhooks/deliverer.py), driven in process against
a real receiver on 127.0.0.1 and the real database: signed in the Standard
Webhooks format and verified with the `standardwebhooks` package, the same
webhook-id on every retry, 410 ending the subscription, a slow receiver not
delaying another, a kept connection reused (and one the receiver closed under
a delivery sent again at once), and a new deliverer resuming from the durable
cursor after a "crash" (docs/decisions/events.md, "Webhooks")."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from aiohttp import web
from standardwebhooks import Webhook

from actors.webhooks.deliverer import Deliverer, DeliveryConfig
from serve_app.schemas.webhooks import CONTENT_EVENTS
from storage.db import libpq_url
from tests.api.conftest import Registered, register, scalar
from tests.api.test_changes import edited_pattern
from tests.api.test_webhooks import settings  # noqa: F401 - fixture used by name

DEADLINE_S = 20.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """An HTTP receiver on 127.0.0.1: each path answers the statuses queued
    for it (200 once they run out); ``/slow`` waits until ``release`` is set."""

    base: str = ""
    got: list[Received] = field(default_factory=list)
    statuses: dict[str, list[int]] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.path == "/slow":
            await self.release.wait()
        self.got.append(Received(request.path, dict(request.headers), body))
        queued = self.statuses.get(request.path) or []
        return web.Response(status=queued.pop(0) if queued else 200, text="ok")

    def at(self, path: str) -> list[Received]:
        return [r for r in self.got if r.path == path]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    found.base = f"http://127.0.0.1:{port}"
    yield found
    found.release.set()
    await runner.cleanup()


Make = Callable[..., Deliverer]


@pytest.fixture
async def deliverers(database: str) -> AsyncIterator[Make]:
    made: list[Deliverer] = []

    def make(**overrides: Any) -> Deliverer:
        values: dict[str, Any] = {
            "database_url": database,
            "allow_loopback": True,
            "timeout_s": 10.0,
            "schedule": (0.05, 0.05, 0.05),
            "jitter": 0.0,
            "disable_after": 2,
        }
        values.update(overrides)
        deliverer = Deliverer(DeliveryConfig(**values))
        made.append(deliverer)
        return deliverer

    yield make
    for deliverer in made:
        await deliverer.close()


async def until(deliverer: Deliverer, done: Callable[[], Awaitable[bool] | bool]) -> None:
    """Step the deliverer until ``done`` (polled, with a deadline)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        await deliverer.step()
        result = done()
        if await result if isinstance(result, Awaitable) else result:
            return
        assert time.monotonic() < deadline, "not done in time"
        await asyncio.sleep(0.02)  # a poll interval, not a wait for the result


async def subscribe(
    client: httpx.AsyncClient, agent: Registered, url: str, events: list[str], **extra: Any
) -> dict[str, Any]:
    response = await client.post(
        "/api/webhooks", json={"url": url, "events": events, **extra}, headers=agent.auth
    )
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def ask_and_answer(
    client: httpx.AsyncClient, asker: Registered, answerer: Registered, n: int = 0
) -> str:
    question = await client.post(
        "/api/questions",
        json={
            "title": f"How do I retry a flaky HTTP call, case {n}?",
            "body": "My agent calls an API that fails about one time in ten. What policy?",
        },
        headers=asker.auth,
    )
    assert question.status_code == 201, question.text
    slug = question.json()["data"]["slug"]
    answer = await client.post(
        f"/api/questions/{slug}/answers",
        json={"body": "Use exponential backoff with jitter and a cap on the tries."},
        headers=answerer.auth,
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["data"]["id"])


def event_id(database: str, type_: str, subject_id: str) -> str:
    return str(
        scalar(
            database,
            "SELECT id::text FROM events WHERE type = %s AND subject_id = %s",
            type_,
            subject_id,
        )
    )


async def test_an_answer_to_my_question_arrives_signed_and_verifies(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    receiver: Receiver,
    deliverers: Make,
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Scheduled Asker"), await register(client, "Helper")
    mine = await subscribe(
        client,
        asker,
        f"{receiver.base}/mine",
        ["answer.created", "notification.question_answer"],
        filters={"mine_only": True},
    )
    # Mine only: an answer by someone else to someone else's question is not.
    await ask_and_answer(client, answerer, await register(client, "Third Agent"), 1)
    answer_id = await ask_and_answer(client, asker, answerer, 2)
    # A rotation: both secrets sign during the overlap.
    rotated = await client.post(f"/api/webhooks/{mine['id']}/rotate-secret", headers=asker.auth)
    new_secret = rotated.json()["data"]["secret"]

    deliverer = deliverers()
    await until(deliverer, lambda: len(receiver.at("/mine")) >= 2)
    await deliverer.idle()
    got = {r.headers["webhook-id"]: r for r in receiver.at("/mine")}
    answered = got[event_id(database, "answer.created", answer_id)]
    for secret in (mine["secret"], new_secret):
        payload = Webhook(secret).verify(answered.body, answered.headers)
        assert payload["type"] == "answer.created"
        assert payload["data"]["id"] == answer_id
        assert payload["data"]["item"]["body"].startswith("Use exponential backoff")
    assert len(answered.headers["webhook-signature"].split(" ")) == 2
    notified = [Webhook(new_secret).verify(r.body, r.headers) for r in got.values()]
    assert sorted(p["type"] for p in notified) == [
        "answer.created",
        "notification.question_answer",
    ]
    log = await client.get(f"/api/webhooks/{mine['id']}/deliveries", headers=asker.auth)
    assert {d["state"] for d in log.json()["data"]} == {"delivered"}
    assert all(d["last_status"] == 200 for d in log.json()["data"])


async def test_a_retry_sends_the_same_id_and_410_ends_the_subscription(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    receiver: Receiver,
    deliverers: Make,
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Retry Asker"), await register(client, "Retry Helper")
    flaky = await subscribe(client, asker, f"{receiver.base}/flaky", ["answer.created"])
    gone = await subscribe(client, asker, f"{receiver.base}/gone", ["answer.created"])
    receiver.statuses = {"/flaky": [500, 503], "/gone": [410]}
    answer_id = await ask_and_answer(client, asker, answerer)

    deliverer = deliverers()
    await until(deliverer, lambda: len(receiver.at("/flaky")) == 3)
    await deliverer.idle()
    ids = {r.headers["webhook-id"] for r in receiver.at("/flaky")}
    assert ids == {event_id(database, "answer.created", answer_id)}
    log = await client.get(f"/api/webhooks/{flaky['id']}/deliveries", headers=asker.auth)
    [delivery] = log.json()["data"]
    assert (delivery["state"], delivery["attempts"], delivery["last_status"]) == (
        "delivered",
        3,
        200,
    )

    stopped = (await client.get(f"/api/webhooks/{gone['id']}", headers=asker.auth)).json()["data"]
    assert (stopped["active"], stopped["disabled_reason"]) == (False, "gone")
    assert len(receiver.at("/gone")) == 1
    notices = await client.get("/api/notifications", headers=asker.auth)
    assert "webhook_disabled" in {n["kind"] for n in notices.json()["data"]}

    # Manual redelivery: the same id again.
    again = await client.post(
        f"/api/webhooks/{flaky['id']}/deliveries/{delivery['id']}/redeliver", headers=asker.auth
    )
    assert again.status_code == 202
    await until(deliverer, lambda: len(receiver.at("/flaky")) == 4)
    assert receiver.at("/flaky")[-1].headers["webhook-id"] in ids


async def test_a_slow_receiver_does_not_delay_another(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    receiver: Receiver,
    deliverers: Make,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Busy Asker"), await register(client, "Busy Helper")
    await subscribe(client, asker, f"{receiver.base}/slow", ["answer.created"])
    await subscribe(client, asker, f"{receiver.base}/fast", ["answer.created"])
    for n in range(3):
        await ask_and_answer(client, asker, answerer, n)

    deliverer = deliverers(concurrency=1)
    # Every fast delivery lands while the slow endpoint holds its one slot.
    # (Outcomes are written in batches, just after the receiver has answered.)
    await until(
        deliverer,
        lambda: len(receiver.at("/fast")) == 3 and deliverer.stats.delivered == 3,
    )
    assert receiver.at("/slow") == []
    receiver.release.set()
    await until(deliverer, lambda: len(receiver.at("/slow")) == 3)


async def test_a_kept_connection_is_reused_and_one_closed_under_a_delivery_is_resent(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    deliverers: Make,
    database: str,
) -> None:
    """A receiver that answers the first request of each connection and
    closes a kept one when the next request comes (as a server whose idle
    limit ran out does): the second delivery goes out on the kept connection,
    is cut, and is sent again at once on a new one, not left to the retry
    schedule."""
    connections: list[int] = []
    answered: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                found = re.search(rb"(?i)content-length: *(\d+)", head)
                await reader.readexactly(int(found.group(1)) if found else 0)
                if answered and len(connections) == 1:
                    break  # the kept connection: closed, no answer
                msg_id = re.search(rb"(?i)webhook-id: *(\S+)", head)
                answered.append(msg_id.group(1).decode() if msg_id else "")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        settings(webhooks_allow_loopback=True)
        asker, answerer = await register(client, "Kept Asker"), await register(client, "Kept One")
        await subscribe(client, asker, f"http://127.0.0.1:{port}/kept", ["answer.created"])
        answers = [await ask_and_answer(client, asker, answerer, n) for n in range(2)]
        # One slot: the second delivery starts after the first, on its connection.
        deliverer = deliverers(concurrency=1)
        await until(deliverer, lambda: deliverer.stats.delivered == 2)
        assert len(connections) == 2
        assert deliverer.stats.resent == 1
        assert deliverer.stats.failed_tries == 0
        assert set(answered) == {event_id(database, "answer.created", a) for a in answers}
    finally:
        server.close()
        await server.wait_closed()


async def test_a_new_deliverer_resumes_from_the_durable_cursor(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    receiver: Receiver,
    deliverers: Make,
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Crash Asker"), await register(client, "Crash Helper")
    await subscribe(client, asker, f"{receiver.base}/resume", ["answer.created"])
    first = [await ask_and_answer(client, asker, answerer, n) for n in range(2)]

    # The first deliverer matches (the rows and its cursor commit) and dies
    # before it delivers anything.
    crashed = deliverers()
    assert await crashed.match() > 0
    await crashed.close()
    assert scalar(database, "SELECT count(*) FROM webhook_deliveries") == 2
    later = [await ask_and_answer(client, asker, answerer, n) for n in range(2, 4)]

    resumed = deliverers()
    await until(resumed, lambda: len(receiver.at("/resume")) >= 4)
    got = {r.headers["webhook-id"] for r in receiver.at("/resume")}
    assert got == {event_id(database, "answer.created", a) for a in first + later}
    # Matched once each: the second deliverer started past the first's cursor.
    assert scalar(database, "SELECT count(*) FROM webhook_deliveries") == 4


def test_the_deliverer_and_the_contract_name_the_same_events() -> None:
    from actors.webhooks import deliverer

    assert deliverer.CONTENT_EVENTS == CONTENT_EVENTS


async def test_a_commit_wakes_the_running_deliverer(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    receiver: Receiver,
    deliverers: Make,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Woken Asker"), await register(client, "Woken Helper")
    await subscribe(client, asker, f"{receiver.base}/woken", ["answer.created"])
    # A poll far beyond the deadline: only the commit's notice can wake it in time.
    deliverer = deliverers(poll_s=600.0)
    running = asyncio.get_running_loop().create_task(deliverer.run())
    try:
        await deliverer.step()  # idle: nothing to match yet
        await ask_and_answer(client, asker, answerer)
        deadline = time.monotonic() + DEADLINE_S
        while not receiver.at("/woken"):
            assert time.monotonic() < deadline and not running.done(), "never woken"
            await asyncio.sleep(0.02)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running


async def test_commits_close_together_are_matched_in_one_transaction(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    receiver: Receiver,
    deliverers: Make,
) -> None:
    settings(webhooks_allow_loopback=True)
    asker, answerer = await register(client, "Batched Asker"), await register(client, "Batched One")
    await subscribe(client, asker, f"{receiver.base}/batched", ["answer.created"])
    # Matching at most every 3 s, no poll: the three answers' notices come
    # within the gap after the first match and wait for one match together.
    deliverer = deliverers(poll_s=600.0, match_gap_s=3.0)
    read: list[int] = []
    match = deliverer.match

    async def counted() -> int:
        read.append(await match())
        return read[-1]

    deliverer.match = counted  # type: ignore[method-assign]
    running = asyncio.get_running_loop().create_task(deliverer.run())
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not read:  # the first match, as the listener starts
            assert time.monotonic() < deadline and not running.done(), "never matched"
            await asyncio.sleep(0.02)
        for n in range(3):
            await ask_and_answer(client, asker, answerer, n)
        while len(receiver.at("/batched")) < 3:
            assert time.monotonic() < deadline and not running.done(), "not delivered"
            await asyncio.sleep(0.02)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    # Three commits each: question.created; answer.created and the asker's notice.
    assert [n for n in read if n] == [9]


async def test_old_finished_deliveries_are_pruned_in_batches_but_each_log_keeps_its_newest(
    client: httpx.AsyncClient,
    settings: Any,  # noqa: F811
    deliverers: Make,
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True)
    owner = await register(client, "Pruned Owner")
    # Nothing is ever sent to these (no row below is due): no socket opens.
    busy = await subscribe(client, owner, "http://127.0.0.1:9/busy", ["answer.created"])
    quiet = await subscribe(client, owner, "http://127.0.0.1:9/quiet", ["answer.created"])
    rows = [
        # (subscription, state, age in hours): busy's newest three are the
        # two recent ones and the youngest of the old; its pending one stays.
        *[(busy, "delivered", 240 + n) for n in range(4)],
        (busy, "failed", 250),
        (busy, "pending", 480),
        (busy, "delivered", 1),
        (busy, "cancelled", 2),
        # Fewer rows than the log keeps: none goes, however old.
        (quiet, "delivered", 300),
        (quiet, "failed", 301),
    ]
    with psycopg.connect(libpq_url(database), autocommit=True) as db:
        for hook, state, hours in rows:
            db.execute(
                "INSERT INTO webhook_deliveries (id, webhook_id, event_id, type, body, state,"
                " next_attempt_at, created_at) VALUES (gen_random_uuid(), %s, gen_random_uuid(),"
                " 'answer.created', '{}', %s, now() + interval '1 day',"
                " now() - make_interval(hours => %s))",
                (hook["id"], state, hours),
            )

    deliverer = deliverers(retention_s=24 * 3600.0, keep=3, prune_batch=2, prune_every_s=0.0)
    pruned = []
    for _ in range(3):
        await deliverer.step()
        pruned.append(deliverer.stats.pruned)
    assert pruned == [2, 4, 4]  # two a statement, until none is left
    with psycopg.connect(libpq_url(database)) as db:
        left = db.execute(
            "SELECT webhook_id::text, state, round(extract(epoch FROM now() - created_at) / 3600)"
            " FROM webhook_deliveries ORDER BY created_at DESC"
        ).fetchall()
    assert [(h == busy["id"], s, int(age)) for h, s, age in left] == [
        (True, "delivered", 1),
        (True, "cancelled", 2),
        (True, "delivered", 240),
        (False, "delivered", 300),
        (False, "failed", 301),
        (True, "pending", 480),
    ]
    # The log still answers, with what is kept.
    log = await client.get(f"/api/webhooks/{busy['id']}/deliveries", headers=owner.auth)
    assert [d["state"] for d in log.json()["data"]] == [
        "delivered",
        "cancelled",
        "delivered",
        "pending",
    ]


async def test_the_deliverer_compacts_the_outbox_as_it_steps(
    client: httpx.AsyncClient, deliverers: Make, database: str
) -> None:
    """The outbox's compaction (docs/decisions/events.md) runs in the
    deliverer's steps: with nothing kept back by age, a pattern's publication
    and first edit go, superseded by its last edit."""
    _, pattern = await edited_pattern(client, "Compacting Author", 2)
    events = "SELECT count(*) FROM events WHERE subject_id = %s"
    assert scalar(database, events, pattern["id"]) == 3
    deliverer = deliverers(events_keep_s=0.0, compact_every_s=0.0)
    await deliverer.step()
    assert deliverer.stats.compacted == 2
    assert scalar(database, events, pattern["id"]) == 1
