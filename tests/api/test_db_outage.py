"""Database outages: a request that fails because Postgres cannot be reached
answers 503 database_unavailable with Retry-After, never a 500; real bugs
(a bad statement, a constraint violation) are not outages; every operation
documents the 503."""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import AsyncIterator

import httpx
import httpx2
import psycopg
import pytest
from fastapi import FastAPI
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from serve_app.app import create_app
from serve_app.kit.keys import generate_key
from storage.db import connect, dropped, is_outage, libpq_url, make_engine
from tests.api.conftest import SECRET, assert_error, make_settings
from tests.contract_check import Contract, spec

NOWHERE = "postgresql://nobody@/cairn?host=/nonexistent-socket-dir&connect_timeout=1"


@pytest.fixture
async def unreachable() -> AsyncIterator[httpx.AsyncClient]:
    """The app over a database that is not there (no server on the socket)."""
    app = create_app(
        make_settings(db_connect_wait_s=0.3), database_url=NOWHERE, secret=SECRET, pool_size=2
    )
    contract = Contract(app.openapi())

    async def conforms(response: httpx.Response) -> None:
        await response.aread()
        problems = contract.problems(response)
        assert not problems, "the answer breaks /openapi.json:\n" + "\n".join(problems)

    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=("203.0.113.9", 40000))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", event_hooks={"response": [conforms]}
        ) as client:
            yield client


def assert_unavailable(response: httpx.Response) -> None:
    assert_error(response, 503, "database_unavailable")
    assert int(response.headers["Retry-After"]) > 0
    assert "psycopg" not in response.text and "Traceback" not in response.text


async def test_reads_and_writes_answer_503_when_the_database_is_unreachable(
    unreachable: httpx.AsyncClient,
) -> None:
    assert_unavailable(await unreachable.get("/api/categories"))
    assert_unavailable(await unreachable.get("/api/patterns"))
    assert_unavailable(await unreachable.post("/api/agents/register", json={"name": "Ada"}))
    key = {"Authorization": f"Bearer {generate_key().key}"}
    assert_unavailable(await unreachable.get("/api/agents/me", headers=key))
    assert_unavailable(await unreachable.post("/api/patterns", json={"title": "t"}, headers=key))


async def test_every_operation_documents_the_503(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    for path, item in schema["paths"].items():
        if not path.startswith("/api/"):
            continue
        for method, operation in item.items():
            answer = operation["responses"].get("503")
            assert answer is not None, (method, path)
            assert "Retry-After" in answer.get("headers", {}) or path == "/api/health"


async def test_outages_are_told_apart_from_bugs(app: FastAPI, database: str) -> None:
    engine = app.state.ctx.engine
    # A bad statement and a constraint violation, from the real server: bugs.
    for statement in ("SELEC 1", "INSERT INTO categories (id) VALUES (NULL)"):
        with pytest.raises(DBAPIError) as bad:
            async with engine.connect() as conn:
                await conn.execute(text(statement))
        assert not is_outage(bad.value), statement
    # A statement timeout is the query's own doing, not an outage.
    with pytest.raises(DBAPIError) as slow:
        async with engine.connect() as conn:
            await conn.execute(text("SET statement_timeout = 50"))
            await conn.execute(text("SELECT pg_sleep(1)"))
    assert not is_outage(slow.value)
    # The server ends a connection (what a restart or shutdown does to each).
    async with engine.connect() as conn:
        pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        with psycopg.connect(libpq_url(database), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(DBAPIError) as ended:
            await conn.execute(text("SELECT 1"))
    assert is_outage(ended.value)
    # No server at all.
    with pytest.raises(psycopg.OperationalError) as nowhere:
        await connect(NOWHERE, wait_s=0)
    assert is_outage(nowhere.value)


async def test_a_connection_the_server_closed_is_replaced_on_checkout(database: str) -> None:
    engine = make_engine(database, pool_size=1, max_overflow=0)
    try:
        async with engine.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            raw = await conn.get_raw_connection()
            assert not dropped(raw.dbapi_connection)
        with psycopg.connect(libpq_url(database), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            # Wait (with a deadline) until the backend is gone.
            for _ in range(200):
                gone = admin.execute(
                    "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)", (pid,)
                ).fetchone()
                if gone and gone[0]:
                    break
                admin.execute("SELECT pg_sleep(0.01)")
        # The pooled connection is dead; the checkout sees it and opens another,
        # so the statement succeeds on a new backend.
        async with engine.connect() as conn:
            new_pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        assert new_pid != pid
    finally:
        await engine.dispose()


async def test_no_pooled_connection_in_time_is_an_outage(database: str) -> None:
    engine = make_engine(database, pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        async with engine.connect():
            with pytest.raises(PoolTimeout) as waited:
                async with engine.connect():
                    pass
        assert is_outage(waited.value)
    finally:
        await engine.dispose()


async def test_checkouts_waiting_for_a_slot_in_an_outage_fail_as_the_outage() -> None:
    """More checkouts than the pool holds while the server is down: those
    that waited for a slot are woken when an attempt fails, try on their own
    and fail with the connection error, as the first ones did, instead of
    sleeping out the pool's timeout (SQLAlchemy wakes a waiter only when a
    connection comes back; there was none)."""
    engine = make_engine(NOWHERE, pool_size=1, max_overflow=1, connect_wait_s=0.3, pool_timeout=20)

    async def checkout() -> BaseException:
        try:
            async with engine.connect():
                pass
        except Exception as exc:  # the error is the result
            return exc
        raise AssertionError("connected to nowhere")

    try:
        errors = await asyncio.gather(*(checkout() for _ in range(6)))
    finally:
        await engine.dispose()
    assert all(is_outage(e) for e in errors), errors
    assert not [e for e in errors if isinstance(e, PoolTimeout)], errors
    assert engine.pool.checkedout() == 0


async def test_mcp_tools_answer_database_unavailable_as_rest_does() -> None:
    """An outage under an MCP tool call is REST's 503 body as a tool error,
    with the same retry hint, not an internal error."""
    app = create_app(
        make_settings(db_connect_wait_s=0.3), database_url=NOWHERE, secret=SECRET, pool_size=2
    )
    async with app.router.lifespan_context(app):
        transport = httpx2.ASGITransport(app=app, client=("203.0.113.9", 40000))
        async with (
            httpx2.AsyncClient(transport=transport) as http,
            streamable_http_client("http://t/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool("list_questions", {})
    assert result.is_error
    body = result.structured_content
    assert body is not None and body["error"] == "database_unavailable", body
    assert body["retry_after"] > 0


async def test_a_live_connection_on_a_high_descriptor_is_not_dropped(database: str) -> None:
    """A replica holding many open streams has sockets past descriptor 1023,
    where select() fails: the checkout check must still see a live connection
    as live (else every checkout would be thrown away: 503s for all)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open only {hard} descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    fillers: list[int] = []
    engine = make_engine(database, pool_size=1, max_overflow=0)
    try:
        while not fillers or fillers[-1] < 1030:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        async with engine.connect() as conn:
            raw = await conn.get_raw_connection()
            assert raw.dbapi_connection.driver_connection.pgconn.socket > 1023  # type: ignore[union-attr]
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            assert not dropped(raw.dbapi_connection)
        async with engine.connect() as conn:  # the same pooled connection, kept
            assert (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one() == pid
    finally:
        await engine.dispose()
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
