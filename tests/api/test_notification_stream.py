"""GET /api/notifications/stream: Server-Sent Events over real HTTP (the
session's app under uvicorn in the test's event loop: httpx's ASGI transport
buffers whole responses), real Postgres LISTEN/NOTIFY."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from serve_app.services import notifications as notification_service
from storage.repositories import notifications as repo
from tests.api.conftest import Registered, assert_error, register
from tests.api.test_questions import answer, ask
from tests.mailbox import free_port

EVENT_ID = re.compile(r"^[0-9a-f]{32}$")
WAIT_S = 10.0


@pytest.fixture(scope="module")
async def live(app: FastAPI) -> AsyncIterator[str]:
    """The session's app served over HTTP on a free port."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    deadline = asyncio.get_running_loop().time() + 10
    while not server.started:
        assert asyncio.get_running_loop().time() < deadline, "uvicorn did not start"
        assert not task.done(), task
        await asyncio.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


@pytest.fixture
def heartbeat(client: httpx.AsyncClient) -> Any:
    """A 0.2 s heartbeat for this test."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.settings
    ctx.settings = saved.model_copy(update={"stream_heartbeat_s": 0.2})
    yield 0.2
    ctx.settings = saved


@dataclass
class Event:
    event: str = "message"
    data: str = ""
    id: str = ""


class Stream:
    """An open stream read line by line (comments too), with deadlines."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def _read(self) -> Event | str:
        """The next event, or the next comment line (``": ping"``)."""
        event: Event | None = None
        while True:
            line = await asyncio.wait_for(anext(self._lines), WAIT_S)
            if line.startswith(":") and event is None:
                return line
            if not line:
                if event is not None:
                    return event
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            event = event or Event()
            if name == "event":
                event.event = value
            elif name == "data":
                event.data = f"{event.data}\n{value}" if event.data else value
            elif name == "id":
                event.id = value

    async def next(self) -> Event:
        while True:
            found = await self._read()
            if isinstance(found, Event):
                return found

    async def notification(self) -> tuple[str, dict[str, Any]]:
        event = await self.next()
        assert event.event == "notification", event
        assert EVENT_ID.match(event.id), event.id
        return event.id, json.loads(event.data)

    async def quiet_for(self, pings: int) -> None:
        """Read until ``pings`` heartbeats came; no notification may come meanwhile."""
        while pings:
            found = await self._read()
            assert not isinstance(found, Event), found
            pings -= found == ": ping"


@asynccontextmanager
async def opened(
    base: str, agent: Registered, headers: dict[str, str] | None = None, query: str = ""
) -> AsyncIterator[Stream]:
    async with (
        httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(WAIT_S)) as http,
        http.stream(
            "GET", f"/api/notifications/stream{query}", headers={**agent.auth, **(headers or {})}
        ) as response,
    ):
        assert response.status_code == 200, await response.aread()
        yield Stream(response)


async def ready(stream: Stream) -> str:
    event = await stream.next()
    assert event.event == "ready", event
    assert EVENT_ID.match(event.id), event.id
    return event.id


async def follow(client: httpx.AsyncClient, who: Registered, whom: Registered) -> None:
    response = await client.post(f"/api/agents/{whom.username}/follow", headers=who.auth)
    assert response.status_code in (200, 201), response.text


async def listed(client: httpx.AsyncClient, agent: Registered) -> list[dict[str, Any]]:
    response = await client.get("/api/notifications?limit=50", headers=agent.auth)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["data"]
    return items


async def test_an_answer_to_my_question_arrives_as_an_event(
    client: httpx.AsyncClient, live: str
) -> None:
    asker = await register(client, "Stream Asker")
    helper = await register(client, "Stream Helper")
    q = await ask(client, asker)
    async with opened(live, asker) as stream:
        assert stream.response.headers["content-type"].startswith("text/event-stream")
        assert stream.response.headers["x-accel-buffering"] == "no"
        assert stream.response.headers["cache-control"] == "no-store"
        assert int(stream.response.headers["x-ratelimit-remaining"]) >= 0
        start = await ready(stream)
        a = await answer(client, helper, q["slug"])
        event_id, item = await stream.notification()
    assert event_id > start
    assert item["kind"] == "question_answer"
    assert item["actor"]["username"] == helper.username
    assert item["target"] == {
        "type": "question",
        "id": q["id"],
        "title": q["title"],
        "slug": q["slug"],
    }
    assert item["data"]["answer_id"] == a["id"]
    # The same shape, the same values, as the listing shows.
    assert [item] == await listed(client, asker)


async def test_reconnecting_with_last_event_id_replays_what_was_missed_in_order(
    client: httpx.AsyncClient, live: str, heartbeat: float
) -> None:
    me = await register(client, "Stream Followee")
    fans = [await register(client, f"Fan {i}") for i in range(3)]
    async with opened(live, me) as stream:
        start = await ready(stream)
        await follow(client, fans[0], me)
        first_id, first = await stream.notification()
    assert first["actor"]["username"] == fans[0].username
    # Disconnected: two more happen.
    for fan in fans[1:]:
        await follow(client, fan, me)
    async with opened(live, me, {"Last-Event-ID": first_id}) as stream:
        assert (await ready(stream)) == first_id
        replayed = [await stream.notification() for _ in fans[1:]]
    assert [i["actor"]["username"] for _, i in replayed] == [f.username for f in fans[1:]]
    ids = [first_id] + [event_id for event_id, _ in replayed]
    assert ids == sorted(ids) and len(set(ids)) == 3
    # From the start, by the query parameter: all three, in order, once each.
    async with opened(live, me, query=f"?last_event_id={start}") as stream:
        await ready(stream)
        again = [await stream.notification() for _ in fans]
        assert [event_id for event_id, _ in again] == ids
        # Nothing else comes: the stream goes on with heartbeats only.
        await stream.quiet_for(3)
    async with opened(live, me, {"Last-Event-ID": ids[-1]}) as stream:
        await ready(stream)
        await stream.quiet_for(3)


async def test_idle_stream_gets_heartbeats(
    client: httpx.AsyncClient, live: str, heartbeat: float
) -> None:
    me = await register(client, "Quiet Agent")
    async with opened(live, me) as stream:
        await ready(stream)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await stream.quiet_for(2)
        # Two heartbeats of 0.2 s, not the default 15 s.
        assert loop.time() - started < 5


async def test_stream_auth_failures_are_json(client: httpx.AsyncClient) -> None:
    # Refusals are ordinary JSON answers (checked against /openapi.json).
    response = await client.get("/api/notifications/stream")
    assert_error(response, 401, "missing_api_key")
    response = await client.get(
        "/api/notifications/stream", headers={"Authorization": "Bearer cairn_nope_nope"}
    )
    assert_error(response, 401, "invalid_api_key")
    response = await client.get("/api/notifications/stream", headers={"Authorization": "Basic abc"})
    assert_error(response, 401, "invalid_api_key")
    me = await register(client, "Bad Cursor")
    for bad in ("nope", "g" * 32, "1" * 31):
        response = await client.get(
            "/api/notifications/stream", headers={**me.auth, "Last-Event-ID": bad}
        )
        assert_error(response, 400, "validation_error")
    response = await client.get(
        f"/api/notifications/stream?last_event_id={'0' * 65}", headers=me.auth
    )
    assert_error(response, 400, "validation_error")


async def test_a_deactivated_account_cannot_open_a_stream(
    client: httpx.AsyncClient, database: str
) -> None:
    import psycopg

    from storage.db import libpq_url

    me = await register(client, "Gone Agent")
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute("UPDATE agents SET is_active = false WHERE id = %s", (me.agent_id,))
    response = await client.get("/api/notifications/stream", headers=me.auth)
    assert_error(response, 403, "account_inactive")


async def test_a_full_replica_answers_503(client: httpx.AsyncClient, live: str) -> None:
    me = await register(client, "Crowded Agent")
    slots = client._transport.app.state.ctx.connections  # type: ignore[attr-defined]
    saved = slots.per_replica
    slots.per_replica = slots.open
    try:
        response = await client.get("/api/notifications/stream", headers=me.auth)
        body = assert_error(response, 503, "service_unavailable")
        assert response.headers["retry-after"] == "5", body
    finally:
        slots.per_replica = saved


def _record(recipient: str, actor: str, n: int) -> dict[str, Any]:
    return {
        "recipient_id": uuid.UUID(recipient),
        # A kind without the repeat throttle (whose row lock would make the
        # second writer wait for the first).
        "kind": "question_answer",
        "actor_id": uuid.UUID(actor),
        "target_type": "question",
        "target_id": uuid.uuid4(),
        "target_title": f"question {n}",
        "target_slug": f"question-{n}",
        "data": {"n": str(n)},
    }


async def test_a_row_that_commits_late_is_not_skipped(
    client: httpx.AsyncClient, live: str, heartbeat: float
) -> None:
    """Two concurrent writers: the first to insert (lower seq) commits last.
    The stream must not move past the first writer's row before it commits."""
    me = await register(client, "Contended")
    writer = await register(client, "Writer")
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    async with opened(live, me) as stream:
        await ready(stream)
        async with ctx.sessions() as slow, ctx.sessions() as fast:
            await asyncio.wait_for(
                repo.add(slow, [_record(me.agent_id, writer.agent_id, 1)], mail=False), WAIT_S
            )
            await asyncio.wait_for(
                repo.add(fast, [_record(me.agent_id, writer.agent_id, 2)], mail=False), WAIT_S
            )
            await fast.commit()
            # The fast row is committed but waits for the slow transaction:
            # the stream keeps looking (and sends heartbeats) but sends nothing.
            await stream.quiet_for(3)
            await slow.commit()
        got = [await stream.notification() for _ in range(2)]
    assert [item["data"]["n"] for _, item in got] == ["1", "2"]
    assert got[0][0] < got[1][0]


async def test_a_row_of_an_older_transaction_written_after_a_newer_one_is_not_skipped(
    client: httpx.AsyncClient, live: str
) -> None:
    """The older transaction (lower txid) inserts after the newer one commits."""
    me = await register(client, "Contended Two")
    writer = await register(client, "Writer Two")
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    async with opened(live, me) as stream:
        await ready(stream)
        async with ctx.sessions() as older, ctx.sessions() as newer:
            await repo.add(older, [_record(writer.agent_id, me.agent_id, 0)], mail=False)
            await repo.add(newer, [_record(me.agent_id, writer.agent_id, 2)], mail=False)
            await newer.commit()
            await repo.add(older, [_record(me.agent_id, writer.agent_id, 1)], mail=False)
            await older.commit()
        got = [await stream.notification() for _ in range(2)]
    assert sorted(item["data"]["n"] for _, item in got) == ["1", "2"]
    # Replaying from the start gives the same order as live.
    assert got[0][0] < got[1][0]


async def test_cursor_round_trip() -> None:
    cursor = repo.Cursor(txid=2**40 + 7, seq=12345)
    assert repo.Cursor.decode(cursor.encode()) == cursor
    assert repo.Cursor.decode(cursor.encode().upper()) == cursor
    later = [repo.Cursor(2**40 + 7, 12346), repo.Cursor(2**40 + 8, 1)]
    assert all(cursor.encode() < c.encode() for c in later)
    with pytest.raises(Exception, match="Last-Event-ID"):
        notification_service.stream_cursor("zz")


async def test_a_lost_wake_is_made_good_when_the_listener_reconnects(
    client: httpx.AsyncClient, live: str, heartbeat: float, database: str
) -> None:
    """A row whose pg_notify never arrived (written here without one) waits
    while the listener is healthy, and is sent once the listener reconnects."""
    import psycopg

    from storage.db import libpq_url

    me = await register(client, "Lost Wake")
    hub = client._transport.app.state.ctx.streams  # type: ignore[attr-defined]
    async with opened(live, me) as stream:
        await ready(stream)
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while not hub.listening:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        with psycopg.connect(libpq_url(database), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO notifications (id, recipient_id, kind, target_type, data) "
                "VALUES (gen_random_uuid(), %s, 'bot_relinked', 'agent', '{}')",
                (me.agent_id,),
            )
            # Nobody rang: heartbeats skip the database while the listener is up.
            await stream.quiet_for(3)
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database()",
                (repo.LISTENER_NAME,),
            )
        _, item = await stream.notification()
    assert item["kind"] == "bot_relinked"
