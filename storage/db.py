"""Async engine and session factory (SQLAlchemy 2 + psycopg 3)."""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row
from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry
from sqlmodel.ext.asyncio.session import AsyncSession


def async_url(url: str) -> str:
    """Any ``postgres://``/``postgresql://`` URL, rewritten for the psycopg 3 driver."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    raise ValueError("CAIRN_DATABASE_URL must be a postgresql:// URL")


def libpq_url(url: str) -> str:
    """The same URL without the SQLAlchemy driver suffix (for psycopg.connect)."""
    return "postgresql://" + async_url(url)[len("postgresql+psycopg://") :]


# Planner settings of every connection. The default random_page_cost (4) prices
# an index lookup as a spinning-disk seek, and the planner then hashes 100k index
# entries to join 1,000 trending ids (15 ms instead of 4); 1.1 is the usual value
# for SSDs and data in cache (docs/decisions/resources.md, "Trending").
SESSION_OPTIONS = "-c random_page_cost=1.1"


# SQLSTATEs of a server that is going away or not taking connections yet:
# admin_shutdown (pg_ctl stop/restart -m fast), crash_shutdown,
# cannot_connect_now (starting up, shutting down), too_many_connections.
# Class 08 (connection exceptions) counts too; see ``is_outage``.
_OUTAGE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})

# How long opening a connection keeps trying while the server is down or
# starting up (a restart takes about a second): requests that arrive during a
# restart wait for it instead of failing (docs/decisions/storage.md, "Database outages").
CONNECT_WAIT_S = 5.0


def is_outage(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it wraps) says the database cannot be reached:
    no connection, a connection the server dropped, a server shutting down or
    starting up, or no pooled connection within the pool's timeout. A bad
    statement, a constraint violation or a statement timeout is not an outage."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, sa_exc.TimeoutError):  # QueuePool: no connection in time
            return True
        if isinstance(exc, sa_exc.DBAPIError):
            if exc.connection_invalidated:
                return True
            exc = exc.orig
            continue
        if isinstance(exc, psycopg.OperationalError):
            state = exc.sqlstate
            # No SQLSTATE: libpq's own failure (cannot connect, connection lost).
            return state is None or state.startswith("08") or state in _OUTAGE_STATES
        if isinstance(exc, psycopg.InterfaceError) and "closed" in str(exc):
            return True
        exc = exc.__cause__
    return False


async def connect(url: str, wait_s: float = CONNECT_WAIT_S) -> psycopg.AsyncConnection[Any]:
    """Open a connection; while the server is unreachable or not ready, try
    again (backing off up to 0.5 s) for ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    delay = 0.05
    while True:
        try:
            return await psycopg.AsyncConnection.connect(
                libpq_url(url),
                # Requests run at READ COMMITTED; counters use atomic UPDATE ... SET x = x + 1.
                autocommit=False,
                options=SESSION_OPTIONS,
            )
        except psycopg.OperationalError as exc:
            if not is_outage(exc) or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


def dropped(dbapi_connection: Any) -> bool:
    """Whether the server has hung up on this idle pooled connection, without
    a round trip: an idle connection has nothing to read unless the server
    said goodbye (a restart or shutdown sends 57P01 and closes the socket), so
    a readable socket means it is gone."""
    conn = getattr(dbapi_connection, "driver_connection", None)
    if not isinstance(conn, psycopg.AsyncConnection):
        return False
    if conn.closed or conn.broken:
        return True
    try:
        # poll, not select: select() refuses descriptors above 1023, which a
        # replica holding many open streams (sockets) reaches.
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.OperationalError):
        return True


def _on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    if dropped(dbapi_connection):
        # The pool discards this connection and opens a new one (``connect``,
        # which waits out a restart) before the request sees it.
        raise sa_exc.DisconnectionError("the server closed this pooled connection")


class _Wake:
    """Put in the pool's queue for a checkout that waits there: a slot came
    free without a connection (opening one failed), so that checkout opens
    one itself. Never handed out; ``close`` is for ``Pool.dispose``."""

    def close(self) -> None:
        pass


_WAKE: Any = _Wake()


class WakingQueuePool(AsyncAdaptedQueuePool):
    """SQLAlchemy's async queue pool, except that a checkout waiting for a
    connection is woken when a slot comes free because opening a connection
    failed. SQLAlchemy wakes waiters only when a connection comes back: in an
    outage, every checkout beyond the pool's connections waited the whole
    ``pool_timeout`` (30 s) before its 503, though the attempts that held the
    slots had failed at once. Woken, it tries to connect on its own and fails
    (or succeeds) as quickly as they did."""

    def _do_get(self) -> ConnectionPoolEntry:
        while True:
            record = super()._do_get()
            if record is not _WAKE:
                return record

    def _dec_overflow(self) -> Any:
        freed = super()._dec_overflow()
        queue = self._pool._queue  # type: ignore[attr-defined]
        # Only for a checkout already waiting (a connection closed on its
        # return with the queue full has nobody to wake).
        if getattr(queue, "_getters", None) and not queue.full():
            queue.put_nowait(_WAKE)
        return freed


def make_engine(
    url: str,
    pool_size: int = 10,
    max_overflow: int = 10,
    *,
    connect_wait_s: float = CONNECT_WAIT_S,
    pre_ping: bool = False,
    pool_timeout: float = 30.0,
) -> AsyncEngine:
    """The engine of a process. A checkout first checks, without a round
    trip, that the server has not closed the pooled connection (``dropped``),
    so a restart fails only the requests in flight; ``pre_ping`` adds
    SQLAlchemy's round-trip ping (for networks that drop idle connections
    silently; it costs a cheap read about 0.13 ms, docs/benchmarks.md,
    "Pool checkout checks")."""

    async def creator() -> psycopg.AsyncConnection[Any]:
        return await connect(url, connect_wait_s)

    engine = create_async_engine(
        async_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=1800,
        pool_timeout=pool_timeout,
        pool_pre_ping=pre_ping,
        poolclass=WakingQueuePool,
        # Errors and logs never carry a statement's values (API-key hashes,
        # e-mail addresses, bodies): SQLAlchemy leaves them out of the
        # exception text, which is all that is logged (clients see none).
        hide_parameters=True,
        async_creator=creator,
    )
    event.listen(engine.sync_engine, "checkout", _on_checkout)
    return engine


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    # Every commit writes the events its transaction staged (the outbox);
    # imported here, as the outbox's reads use this module's helpers.
    from storage.repositories import events

    events.install()
    # expire_on_commit=False: routes serialise ORM rows after the commit.
    return async_sessionmaker(engine, class_=AsyncSession, expire_on_commit=False)


async def _driver(session: AsyncSession) -> Any:
    """The psycopg connection under the session's own connection (and
    transaction), for the hot-path statements below."""
    conn = await session.connection()
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert driver is not None
    return driver


async def fetch_one(
    session: AsyncSession, sql: str, params: dict[str, Any]
) -> dict[str, Any] | None:
    """Run one hot-path query on the session's own connection (and transaction)
    straight through psycopg, skipping SQLAlchemy's per-statement compilation,
    which costs more than the query itself on a small read."""
    driver = await _driver(session)
    async with driver.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return await cur.fetchone()


def driver_sql(statement: Any) -> tuple[str, dict[str, Any]]:
    """A Core ``statement`` compiled once, at import, for ``fetch_tuples``
    and ``fetch_one`` (psycopg's ``%(name)s`` placeholders), with the values
    of the binds it holds itself; the caller adds its own."""
    from sqlalchemy.dialects.postgresql import psycopg as pg

    compiled = statement.compile(dialect=pg.dialect())
    return str(compiled), dict(compiled.params)


async def fetch_tuples(session: AsyncSession, sql: str, params: dict[str, Any]) -> list[Any]:
    """``fetch_one`` for a hot-path read of several rows, as tuples in the
    statement's column order."""
    async with (await _driver(session)).cursor() as cur:
        await cur.execute(sql, params)
        return list(await cur.fetchall())


async def fetch_values(
    session: AsyncSession, sql: str, params: dict[str, Any]
) -> tuple[Any, ...] | None:
    """``fetch_one``'s row as a plain tuple, in the statement's column order."""
    async with (await _driver(session)).cursor() as cur:
        await cur.execute(sql, params)
        found = await cur.fetchone()
        return tuple(found) if found is not None else None


async def execute(session: AsyncSession, sql: str, params: dict[str, Any]) -> int:
    """``fetch_one`` for a hot-path write: one statement straight through
    psycopg on the session's connection; the number of rows it touched."""
    async with (await _driver(session)).cursor() as cur:
        await cur.execute(sql, params)
        return cur.rowcount


class Listener:
    """One LISTEN connection on ``channel`` (opened by ``messages``, again on
    each call after a failure), and what it has received but not yet read."""

    def __init__(
        self, database_url: str, channel: str, check_s: float, application_name: str
    ) -> None:
        self.database_url = database_url
        self.channel = channel
        self.check_s = check_s
        self.application_name = application_name
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._waiting = False  # in notifies(): the socket may be read by ``pending``
        self._loop: asyncio.AbstractEventLoop | None = None

    async def messages(self, on_ready: Callable[[], Awaitable[None]]) -> AsyncIterator[list[str]]:
        """The comma-separated parts of each message, on a connection of its
        own, until that connection fails (the error is raised). ``on_ready``
        runs once the connection listens; every ``check_s`` of silence the
        connection is checked with a query, so one that died quietly is
        noticed."""
        conn = await psycopg.AsyncConnection.connect(
            libpq_url(self.database_url),
            autocommit=True,
            application_name=self.application_name,
            # A dropped TCP connection is noticed by the kernel too (ignored on
            # a unix socket, the embedded Postgres).
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
        async with conn:
            await conn.execute(f"LISTEN {self.channel}")
            self._conn, self._loop = conn, asyncio.get_running_loop()
            try:
                await on_ready()
                while True:
                    self._waiting = True
                    async for note in conn.notifies(timeout=self.check_s):
                        yield [part for part in note.payload.split(",") if part]
                    self._waiting = False
                    await conn.execute("SELECT 1")
            finally:
                self._conn, self._waiting = None, False

    def pending(self) -> list[str]:
        """The parts of the messages already on the connection's socket that
        ``messages`` has not yielded yet, read now without waiting: for a
        caller that must not act on what a message it cannot see yet would
        undo. Only while ``messages`` waits for notices (never in the middle
        of its check query, whose answer it would take) and from its own
        event loop; [] otherwise."""
        conn = self._conn
        if conn is None or not self._waiting or conn.closed:
            return []
        try:
            if asyncio.get_running_loop() is not self._loop:
                return []
        except RuntimeError:
            return []
        pgconn = conn.pgconn
        try:
            pgconn.consume_input()
        except psycopg.OperationalError:
            return []  # the connection failed: ``messages`` raises, the reader reconnects
        parts: list[str] = []
        while (note := pgconn.notifies()) is not None:
            parts.extend(part for part in note.extra.decode().split(",") if part)
        return parts


def listen(
    database_url: str,
    channel: str,
    on_ready: Callable[[], Awaitable[None]],
    check_s: float,
    application_name: str,
) -> AsyncIterator[list[str]]:
    """``Listener.messages`` of a new listener."""
    return Listener(database_url, channel, check_s, application_name).messages(on_ready)
