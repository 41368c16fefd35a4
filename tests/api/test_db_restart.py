"""A restart of the real Postgres (``pg_ctl restart -m fast``) under
concurrent writes (and reads on the autocommit sessions): no 500 ever, the
requests that fail are 503 database_unavailable with Retry-After and a JSON
body, at most the requests in flight when the server went down fail (none
sent once it is back), and every acknowledged write is there afterwards. The
app runs in process over a Postgres of its own, so the restart touches no
other test's database."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from actors.ratelimit import Rule
from serve_app.app import create_app
from storage.db import libpq_url
from storage.embedded import restart_server, start_embedded, stop_server
from storage.migrate import upgrade
from storage.seed import seed_categories
from tests.api.conftest import SECRET, Registered, make_settings, register
from tests.conftest import REPO

WORKERS = 8


@pytest.fixture(scope="module")
def own_postgres() -> Iterator[tuple[Path, str]]:
    """A Postgres of this test's own (under .cairn/, not pytest's tmp_path:
    another pytest run resets /tmp/pytest-of-<user> to 0700, which locks the
    server's own user out of its data folder)."""
    state = REPO / ".cairn" / f"restart-{secrets.token_hex(4)}"
    url = start_embedded(state, keep_running=True)
    try:
        upgrade(url)
        seed_categories(url)
        yield state, url
    finally:
        stop_server(state)
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
async def restart_client(own_postgres: tuple[Path, str]) -> AsyncIterator[httpx.AsyncClient]:
    state, url = own_postgres
    app = create_app(
        make_settings(state_dir=str(state)), database_url=url, secret=SECRET, pool_size=WORKERS
    )
    ctx = app.state.ctx
    ctx.rules = {name: Rule(name, 10**9, 3600) for name in ctx.rules}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=("203.0.113.20", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield client


@dataclass
class Tally:
    acknowledged_patterns: list[str] = field(default_factory=list)
    acknowledged_comments: list[str] = field(default_factory=list)
    acknowledged_votes: list[tuple[str, str]] = field(default_factory=list)  # (agent, pattern)
    failures: list[httpx.Response] = field(default_factory=list)
    failures_sent_at: list[float] = field(default_factory=list)  # time.monotonic()
    after_restart: int = 0
    reads: int = 0


async def _worker(
    client: httpx.AsyncClient,
    me: Registered,
    targets: list[str],
    tally: Tally,
    restarted: asyncio.Event,
    stop: asyncio.Event,
) -> None:
    step = 0
    while not stop.is_set():
        sent_at = time.monotonic()
        kind = step % 4
        target = targets[(step // 4) % len(targets)]
        if kind == 0:
            title = f"Restart-proof pattern {me.username} {step} {uuid.uuid4().hex[:6]}"
            response = await client.post(
                "/api/patterns",
                headers=me.auth,
                json={"title": title, "description": "Survives a restart.", "content": "Body."},
            )
        elif kind == 1:
            response = await client.post(
                f"/api/patterns/{target}/comments", headers=me.auth, json={"content": f"c{step}"}
            )
        elif kind == 2:
            response = await client.post(
                f"/api/patterns/{target}/vote", headers=me.auth, json={"vote_type": "upvote"}
            )
        else:  # a read on the autocommit (ReadDb) sessions
            response = await client.get(f"/api/agents/{me.username}", headers=me.auth)
        step += 1
        if response.status_code >= 300:
            tally.failures.append(response)
            tally.failures_sent_at.append(sent_at)
            continue
        if restarted.is_set():
            tally.after_restart += 1
        if kind == 0:
            tally.acknowledged_patterns.append(response.json()["data"]["id"])
        elif kind == 1:
            tally.acknowledged_comments.append(response.json()["data"]["id"])
        elif kind == 2:
            tally.acknowledged_votes.append((me.agent_id, target))
        else:
            tally.reads += 1


async def test_a_postgres_restart_under_writes_costs_at_most_the_requests_in_flight(
    restart_client: httpx.AsyncClient, own_postgres: tuple[Path, str]
) -> None:
    state, url = own_postgres
    client = restart_client
    agents = [await register(client, f"Writer {i}") for i in range(WORKERS)]
    author = await register(client, "Target author")
    targets = []
    for i in range(WORKERS * 4):
        made = await client.post(
            "/api/patterns",
            headers=author.auth,
            json={"title": f"Target {i}", "description": "A target of votes.", "content": "Body."},
        )
        assert made.status_code == 201, made.text
        targets.append(made.json()["data"]["id"])

    tally = Tally()
    restarted, stop = asyncio.Event(), asyncio.Event()
    workers = [
        asyncio.create_task(_worker(client, agent, targets, tally, restarted, stop))
        for agent in agents
    ]
    try:
        deadline = time.monotonic() + 60
        while len(tally.acknowledged_patterns) < 20:  # under way
            assert time.monotonic() < deadline and not any(w.done() for w in workers)
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        await asyncio.to_thread(restart_server, state)
        back_at = time.monotonic()
        restart_s = back_at - t0
        restarted.set()
        while tally.after_restart < 50:  # and it goes on afterwards
            assert time.monotonic() < deadline and not any(w.done() for w in workers)
            await asyncio.sleep(0.01)
    finally:
        stop.set()
        await asyncio.gather(*workers)

    done = [tally.acknowledged_patterns, tally.acknowledged_comments, tally.acknowledged_votes]
    total = len(tally.failures) + sum(map(len, done)) + tally.reads
    print(f"restart took {restart_s:.2f}s; {len(tally.failures)} of {total} requests failed")
    # No 500, ever: every failure is the documented 503.
    for failure in tally.failures:
        assert failure.status_code == 503, failure.text
        assert failure.json()["error"] == "database_unavailable"
        assert isinstance(failure.json()["message"], str)
        assert int(failure.headers["Retry-After"]) > 0
    # Each worker has one request in flight at a time: at most WORKERS fail,
    # and none sent once the server was back.
    assert len(tally.failures) <= WORKERS, [f.text for f in tally.failures]
    assert all(sent < back_at for sent in tally.failures_sent_at)

    # Every acknowledged write is there.
    with psycopg.connect(libpq_url(url)) as conn:

        def present(table: str, ids: list[str]) -> int:
            row = conn.execute(
                f"SELECT count(*) FROM {table} WHERE id = ANY(%s::uuid[])", (ids,)
            ).fetchone()
            assert row is not None
            return int(row[0])

        assert present("patterns", tally.acknowledged_patterns) == len(tally.acknowledged_patterns)
        assert present("comments", tally.acknowledged_comments) == len(tally.acknowledged_comments)
        votes: set[tuple[Any, ...]] = {
            (str(a), str(t))
            for a, t in conn.execute(
                "SELECT agent_id, target_id FROM votes WHERE target_type = 'pattern'"
            ).fetchall()
        }
        assert set(tally.acknowledged_votes) <= votes
