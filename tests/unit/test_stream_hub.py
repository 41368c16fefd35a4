"""The stream hub over a real Postgres LISTEN connection: rings the right
streams, reconnects when its connection is killed, bounds the streams."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest

from serve_app.runtime.streamhub import StreamHub, StreamsFull
from storage.db import libpq_url
from storage.repositories import notifications as repo

DEADLINE_S = 10.0


def notify(database: str, *recipients: str) -> None:
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (repo.CHANNEL, ",".join(recipients)))


async def until(condition: Callable[[], bool]) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


@pytest.fixture
async def hub(database: str) -> AsyncIterator[StreamHub]:
    def source(on_ready: Callable[[], Awaitable[None]]) -> AsyncIterator[list[str]]:
        return repo.listen(database, on_ready, check_s=0.5)

    made = StreamHub(source, max_streams=3, retry_s=0.05, retry_max_s=0.2)
    yield made
    await made.close()


async def test_a_notify_rings_the_streams_of_its_recipients_only(
    hub: StreamHub, database: str
) -> None:
    me, other = str(uuid.uuid4()), str(uuid.uuid4())
    mine, theirs = hub.subscribe(me), hub.subscribe(other)
    await until(lambda: hub.listening)
    # Connecting rang everyone (whatever committed before it listened).
    assert await mine.wait(DEADLINE_S) and await theirs.wait(DEADLINE_S)
    notify(database, str(uuid.uuid4()), me)
    assert await mine.wait(DEADLINE_S)
    assert not await theirs.wait(0.2)


async def test_a_killed_listener_reconnects_and_rings_everyone(
    hub: StreamHub, database: str
) -> None:
    me = str(uuid.uuid4())
    sub = hub.subscribe(me)
    await until(lambda: hub.listening)
    await sub.wait(DEADLINE_S)
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (repo.LISTENER_NAME,),
        ).fetchone()
    # (The API tests' app, sharing this database, may have a listener too.)
    assert killed is not None and killed[0] >= 1
    await until(lambda: hub.connects == 2 and hub.listening)
    # A notify lost while nobody listened is made good: everyone looks again.
    assert await sub.wait(DEADLINE_S)
    notify(database, me)
    assert await sub.wait(DEADLINE_S)


async def test_streams_are_bounded_and_closing_frees_a_place(hub: StreamHub) -> None:
    subs = [hub.subscribe(str(uuid.uuid4())) for _ in range(3)]
    with pytest.raises(StreamsFull):
        hub.subscribe("one too many")
    subs[0].close()
    subs[0].close()  # twice is harmless
    assert hub.open_streams == 2
    with hub.subscribe("again"):
        assert hub.open_streams == 3
    assert hub.open_streams == 2


async def test_closing_the_hub_ends_its_streams(hub: StreamHub) -> None:
    sub = hub.subscribe(str(uuid.uuid4()))
    await until(lambda: hub.listening)
    await hub.close()
    assert sub.closed and await sub.wait(0) and not hub.listening
