"""The cache of verified API keys (serve_app/runtime/keycache.py): its bounds
(TTL, size), forgetting, and the notices of migration 0019's triggers over a
real Postgres LISTEN connection."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest

from serve_app.runtime.keycache import KeyCache
from storage.db import libpq_url
from storage.repositories import api_keys as repo

DEADLINE_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Row:
    """What the cache keeps for a key (the app keeps a ``KeyRow``)."""

    def __init__(self, agent_id: object | None = None) -> None:
        self.agent_id = agent_id or uuid.uuid4()


def row(agent_id: object | None = None) -> Row:
    return Row(agent_id)


def keep(cache: KeyCache, d: bytes, r: Row, generation: int | None = None) -> None:
    cache.put(d, r.agent_id, r, cache.generation() if generation is None else generation)


def digest() -> bytes:
    return secrets.token_bytes(32)


async def until(condition: Callable[[], bool]) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_an_entry_lives_at_most_the_ttl() -> None:
    clock = Clock()
    cache = KeyCache(30.0, 10, clock=clock)
    d, r = digest(), row()
    keep(cache, d, r)
    clock.now += 29.9
    assert cache.get(d) is r
    clock.now += 0.1
    assert cache.get(d) is None
    assert len(cache) == 0


def test_at_most_max_entries_least_recently_used_out() -> None:
    cache = KeyCache(60.0, 3, clock=Clock())
    ds = [digest() for _ in range(4)]
    for d in ds[:3]:
        keep(cache, d, row())
    assert cache.get(ds[0]) is not None  # used: now the newest
    keep(cache, ds[3], row())
    assert len(cache) == 3
    assert cache.get(ds[1]) is None  # the least recently used went
    assert all(cache.get(d) is not None for d in (ds[0], ds[2], ds[3]))
    # Its agent index went with it: nothing grows without bound.
    assert len(cache._by_agent) == 3


def test_forget_drops_every_key_of_an_agent() -> None:
    cache = KeyCache(60.0, 10, clock=Clock())
    agent, other = uuid.uuid4(), uuid.uuid4()
    mine = [digest(), digest()]  # an old key still kept beside its replacement
    for d in mine:
        keep(cache, d, row(agent))
    theirs = digest()
    keep(cache, theirs, row(other))
    cache.forget([str(agent)])
    assert all(cache.get(d) is None for d in mine)
    assert cache.get(theirs) is not None


def test_a_read_that_began_before_a_change_is_not_kept() -> None:
    """A key read, then revoked and forgotten before the read's answer is
    kept: the answer is from before the revocation, so it must not be."""
    cache = KeyCache(60.0, 10, clock=Clock())
    d, r = digest(), row()
    before = cache.generation()
    cache.forget([str(r.agent_id)])  # the change's notice, while the read was out
    keep(cache, d, r, before)
    assert cache.get(d) is None
    keep(cache, d, r)
    assert cache.get(d) is r


def test_off_keeps_nothing() -> None:
    for cache in (KeyCache(0, 10), KeyCache(60.0, 0)):
        d = digest()
        keep(cache, d, row())
        assert not cache.enabled and cache.get(d) is None and len(cache) == 0


async def test_nothing_is_served_while_the_listener_is_not_listening() -> None:
    """Until the listener listens (and again after it fails) notices may be
    lost: the cache neither keeps nor serves anything meanwhile."""
    delivered: asyncio.Queue[list[str] | Exception] = asyncio.Queue()

    async def messages(on_ready: Callable[[], Awaitable[None]]) -> AsyncIterator[list[str]]:
        await on_ready()
        while True:
            item = await delivered.get()
            if isinstance(item, Exception):
                raise item
            yield item

    cache = KeyCache(60.0, 10, messages, retry_s=0.05, retry_max_s=0.05)
    d, r = digest(), row()
    keep(cache, d, r)
    assert len(cache) == 0 and cache.get(d) is None
    cache.start()
    try:
        await until(lambda: cache.listening)
        keep(cache, d, r)
        assert cache.get(d) is r
        delivered.put_nowait([str(r.agent_id)])
        await until(lambda: cache.get(d) is None)
        keep(cache, d, r)
        delivered.put_nowait(RuntimeError("connection lost"))
        await until(lambda: cache.connects == 2)
        # Everything kept before the reconnection went with it.
        assert cache.get(d) is None
    finally:
        await cache.close()


# --- the notices from Postgres (migration 0019) ----------------------------------


def sql(database: str, statement: str, *params: object) -> None:
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        conn.execute(statement, params)


def new_agent(database: str) -> tuple[uuid.UUID, uuid.UUID]:
    agent_id, key_id = uuid.uuid4(), uuid.uuid4()
    name = f"kc_{secrets.token_hex(4)}"
    sql(
        database,
        "INSERT INTO agents (id, username, name, display_name) VALUES (%s, %s, %s, %s)",
        agent_id,
        name,
        name,
        name,
    )
    sql(
        database,
        "INSERT INTO api_keys (id, agent_id, key_id, key_hash) VALUES (%s, %s, %s, %s)",
        key_id,
        agent_id,
        secrets.token_hex(6),
        secrets.token_bytes(32),
    )
    return agent_id, key_id


@pytest.fixture
async def following(database: str) -> AsyncIterator[KeyCache]:
    def source(on_ready: Callable[[], Awaitable[None]]) -> AsyncIterator[list[str]]:
        return repo.listen_changes(database, on_ready, check_s=0.5)

    cache = KeyCache(60.0, 100, source, retry_s=0.05, retry_max_s=0.2)
    cache.start()
    await until(lambda: cache.listening)
    yield cache
    await cache.close()


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE agents SET is_active = false WHERE id = %(agent)s",
        "UPDATE agents SET role = 'moderator' WHERE id = %(agent)s",
        "UPDATE agents SET owner_id = NULL, is_claimed = true WHERE id = %(agent)s",
        "UPDATE api_keys SET revoked_at = now() WHERE id = %(key)s",
        "DELETE FROM api_keys WHERE id = %(key)s",
        "DELETE FROM agents WHERE id = %(agent)s",
    ],
)
async def test_a_change_in_postgres_reaches_the_cache(
    following: KeyCache, database: str, change: str
) -> None:
    """Whoever writes it (here: plain SQL, as an operator or the CLI would),
    a change to an agent's keys or standing makes the cache forget it."""
    agent, key = new_agent(database)
    other, _ = new_agent(database)
    mine, theirs = digest(), digest()
    keep(following, mine, row(agent))
    keep(following, theirs, row(other))
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        conn.execute(change, {"agent": agent, "key": key})
    await until(lambda: following.get(mine) is None)
    assert following.get(theirs) is not None


async def test_use_and_counters_send_no_notice(following: KeyCache, database: str) -> None:
    """A key's last use and an agent's counters change all the time and
    forget nothing; notices arrive in commit order, so once a later change's
    notice is in, the earlier ones would have been too."""
    agent, key = new_agent(database)
    marker, _ = new_agent(database)
    mine, flag = digest(), digest()
    keep(following, mine, row(agent))
    keep(following, flag, row(marker))
    sql(database, "UPDATE api_keys SET last_used_at = now() WHERE id = %s", key)
    sql(
        database,
        "UPDATE agents SET reputation_score = reputation_score + 10, pattern_count = 1,"
        " followers_count = 2, updated_at = now() WHERE id = %s",
        agent,
    )
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", marker)
    await until(lambda: following.get(flag) is None)
    assert following.get(mine) is not None


async def test_a_killed_listener_starts_over(following: KeyCache, database: str) -> None:
    d = digest()
    keep(following, d, row())
    with psycopg.connect(libpq_url(database), autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (repo.LISTENER_NAME,),
        ).fetchone()
    assert killed is not None and killed[0] >= 1
    await until(lambda: following.connects == 2 and following.listening)
    # Notices sent while it was away are lost: what it kept went too.
    assert following.get(d) is None and len(following) == 0
    agent, _ = new_agent(database)
    again = digest()
    keep(following, again, row(agent))
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", agent)
    await until(lambda: following.get(again) is None)


# --- the rows a kept key yields -----------------------------------------------------


def test_each_use_of_a_kept_row_gets_its_own_instances() -> None:
    """A route may change the caller's rows (a profile edit sets the new
    values on it): what one request changes, the next does not see."""
    from datetime import UTC, datetime

    from storage.models import Agent, ApiKey

    now = datetime.now(UTC)
    agent_id = uuid.uuid4()
    key_values: dict[str, Any] = {c: None for c in repo._KEY_COLUMNS}
    key_values.update(id=uuid.uuid4(), agent_id=agent_id, key_id="0123456789ab", key_hash=b"h" * 32)
    agent_values: dict[str, Any] = {c: None for c in repo._AGENT_COLUMNS}
    agent_values.update(
        id=agent_id,
        username="kept",
        name="kept",
        display_name="Kept",
        bio="",
        verification_level="unverified",
        reputation_score=5,
        pattern_count=0,
        followers_count=0,
        following_count=0,
        is_human=False,
        is_active=True,
        is_claimed=False,
        search_id=7,
        created_at=now,
        updated_at=now,
    )
    kept = repo.KeyRow(tuple(key_values.values()) + tuple(agent_values.values()))
    assert kept.agent_id == agent_id and kept.key_hash == b"h" * 32 and kept.agent_active
    key, agent = kept.models()
    again_key, again = kept.models()
    assert agent is not again and key is not again_key
    agent.bio = "changed by one request"
    key.last_used_at = now
    assert again.bio == "" and again_key.last_used_at is None
    assert again.username == "kept" and again.reputation_score == 5 and again.is_active
    # Left in Postgres by the key check.
    assert again.password_hash is None and again.search_vector is None
    # The same values as a row built by the constructor.
    built = Agent(**{**agent_values, "password_hash": None, "search_vector": None})
    assert again.model_dump() == built.model_dump()
    assert isinstance(again_key, ApiKey)
    assert again_key.model_dump() == ApiKey(**key_values).model_dump()


def test_the_key_check_reads_no_password_hash_and_no_tsvector() -> None:
    query = repo._LIVE_BY_KEY_ID
    assert "password_hash" not in query and "search_vector" not in query
    assert "a.is_active" in query and "k.key_hash" in query


async def test_a_notice_already_received_is_honoured_before_the_listener_runs(
    database: str,
) -> None:
    """A request can reach the replica's event loop in the same turn as a
    revocation's notice, and run first (both became ready while the replica
    was descheduled): the cache reads what its connection already received
    before answering (``Listener.pending``)."""
    import select

    listener = repo.credential_listener(database, check_s=5.0)
    cache = KeyCache(60.0, 100, listener.messages, drain=listener.pending)
    cache.start()
    try:
        await until(lambda: cache.listening and listener._waiting)
        agent, _ = new_agent(database)
        d = digest()
        keep(cache, d, row(agent))
        # Committed by another connection while this event loop cannot run
        # (a blocking call): the listener's task has not seen the notice...
        sql(database, "UPDATE agents SET is_active = false WHERE id = %s", agent)
        assert listener._conn is not None
        poller = select.poll()
        poller.register(listener._conn.pgconn.socket, select.POLLIN)
        assert poller.poll(DEADLINE_S * 1000), "the notice never reached the socket"
        # ...and yet the kept key is not answered.
        assert cache.get(d) is None
        # The listener goes on as before.
        other, _ = new_agent(database)
        again = digest()
        keep(cache, again, row(other))
        sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", other)
        await until(lambda: cache.get(again) is None)
    finally:
        await cache.close()


async def test_reading_ahead_never_stalls_the_listener(database: str) -> None:
    """The listener's check query runs every 20 ms here, while requests read
    its connection ahead of it: it keeps listening, and every notice lands."""
    listener = repo.credential_listener(database, check_s=0.02)
    cache = KeyCache(60.0, 1000, listener.messages, drain=listener.pending)
    cache.start()
    try:
        await until(lambda: cache.listening)
        for _ in range(20):
            agent, _ = new_agent(database)
            d = digest()
            keep(cache, d, row(agent))
            sql(database, "UPDATE agents SET is_active = false WHERE id = %s", agent)
            deadline = asyncio.get_running_loop().time() + DEADLINE_S
            while cache.get(d) is not None:  # reads ahead on every call
                assert asyncio.get_running_loop().time() < deadline, "a notice was lost"
                await asyncio.sleep(0.003)
        assert cache.connects == 1  # never had to reconnect
    finally:
        await cache.close()
