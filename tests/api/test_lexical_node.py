"""The node's one BM25 index on disk (serve_app/runtime/index_copies/lexical.py
over retrieval/lexical_store.py), followed from real Postgres by several
``LexicalSearch`` in this process, each standing for an Api replica: they
share one folder as the replicas on a node do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from retrieval.lexical_store import NodeStore
from serve_app.runtime.index_copies.lexical import LexicalSearch
from tests.api.conftest import OPERATOR
from tests.api.test_patterns import sql
from tests.api.test_search import corpus

QUERIES = ["jitter backoff", "csv rows", "nightly backup cron", "zeppelin mooring", "token"]
KINDS = ("pattern", "agent", "question")


@pytest.fixture
async def replicas(client: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[Any]:
    """``make(store_root=...)``: a LexicalSearch over the app's database,
    reading the change log before every search; all closed after the test."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    made: list[LexicalSearch] = []

    def make(store_root: Path | None = tmp_path / "bm25", **kw: Any) -> LexicalSearch:
        replica = LexicalSearch(ctx.sessions, ctx.engine, refresh_s=0, store_root=store_root, **kw)
        made.append(replica)
        return replica

    yield make
    for replica in made:
        await replica.close()


async def answers(replica: LexicalSearch) -> list[Any]:
    found = []
    for q in QUERIES:
        hits = await replica.search(KINDS, q, 20)
        assert hits is not None
        found.append({k: (v.hits, v.scale) for k, v in hits.items()})
    return found


async def test_replicas_share_one_index_and_score_as_in_memory(
    client: httpx.AsyncClient, database: str, replicas: Any
) -> None:
    _, ids = await corpus(client)
    first, second, memory = replicas(), replicas(), replicas(store_root=None)
    await first._open()  # nothing on the node yet: builds
    await second._open()  # takes it up: no scan of its own
    await memory._open()
    assert first.counters["rebuilds"] == 1 and first.counters["adopted"] == 0
    assert second.counters["rebuilds"] == 0 and second.counters["adopted"] == 1
    assert second.stats()["store"]["generation"] == first.stats()["store"]["generation"]
    assert memory.stats()["store"] == {"kind": "memory"}
    assert second.stats()["indexes"] == first.stats()["indexes"] == memory.stats()["indexes"]
    expected = await answers(memory)
    assert any(a["pattern"][0] for a in expected)
    assert await answers(first) == expected and await answers(second) == expected

    # An edit: the first replica to search after it applies it (once, for
    # the node); the other sees the commit on its next search.
    sql(database, "UPDATE patterns SET content = 'zeppelin mooring' WHERE id = %s", ids["csv"])
    before = {r: r.counters["writes"] for r in (first, second)}
    hits = await second.search(["pattern"], "zeppelin", 5)
    assert hits is not None and len(hits["pattern"].hits) == 1
    assert second.counters["writes"] == before[second] + 1
    again = await first.search(["pattern"], "zeppelin", 5)
    assert again == hits
    assert first.counters["writes"] == before[first]
    assert first.stats()["store"]["version"] == second.stats()["store"]["version"]
    # And the scores stay those of an index in memory following the same log.
    assert await answers(first) == await answers(memory) == await answers(second)

    # A row hidden leaves the node's index.
    sql(database, "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s", ids["csv"])
    assert (await first.search(["pattern"], "zeppelin", 5)) == {
        "pattern": (await memory.search(["pattern"], "zeppelin", 5))["pattern"]  # type: ignore[index]
    }
    assert (await second.search(["pattern"], "zeppelin", 5))["pattern"].hits == []  # type: ignore[index]


async def test_replicas_starting_together_build_once(
    client: httpx.AsyncClient, replicas: Any
) -> None:
    await corpus(client)
    started = [replicas() for _ in range(3)]
    await asyncio.gather(*(r._open() for r in started))
    assert sum(r.counters["rebuilds"] for r in started) == 1
    assert sum(r.counters["adopted"] for r in started) == 2
    assert len({r.stats()["store"]["generation"] for r in started}) == 1
    assert all(r.ready for r in started)


async def test_a_search_waits_for_the_writer_then_sees_the_write(
    client: httpx.AsyncClient, database: str, replicas: Any, tmp_path: Path
) -> None:
    _, ids = await corpus(client)
    replica = replicas()
    await replica._open()
    # Another process holds the node's writer lock (say, applying a change).
    other = NodeStore(tmp_path / "bm25", replica.store.dir.name, KINDS)  # type: ignore[union-attr]
    assert other.writer_lock.acquire()
    sql(database, "UPDATE patterns SET content = 'zeppelin hangar' WHERE id = %s", ids["cron"])
    searching = asyncio.create_task(replica.search(["pattern"], "zeppelin", 5))
    await asyncio.sleep(0.3)
    assert not searching.done()  # waiting for the lock, not answering stale
    other.writer_lock.release()
    hits = await asyncio.wait_for(searching, 10)
    assert hits is not None and len(hits["pattern"].hits) == 1
    assert replica.counters["lock_timeouts"] == 0

    # A lock never released: after lock_wait_s the index answers as it is.
    replica.lock_wait_s = 0.2
    assert other.writer_lock.acquire()
    try:
        sql(database, "UPDATE patterns SET content = 'zeppelin dock' WHERE id = %s", ids["csv"])
        hits = await replica.search(["pattern"], "zeppelin", 5)
        assert hits is not None and len(hits["pattern"].hits) == 1
        assert replica.counters["lock_timeouts"] == 1
    finally:
        other.writer_lock.release()
    hits = await replica.search(["pattern"], "zeppelin", 5)
    assert hits is not None and len(hits["pattern"].hits) == 2


async def test_a_rebuild_is_a_new_generation_the_others_move_to(
    client: httpx.AsyncClient, replicas: Any
) -> None:
    await corpus(client)
    first, second = replicas(), replicas()
    await first._open()
    await second._open()
    old = first.stats()["store"]["generation"]
    await second.build()
    new = second.stats()["store"]["generation"]
    assert new != old
    # The old generation is gone from the folder; the first replica moves on
    # its next search and answers as before.
    assert first.store is not None and first.store.generations() == [new]
    expected = await answers(second)
    assert await answers(first) == expected
    assert first.stats()["store"]["generation"] == new


async def test_a_failing_folder_falls_back_to_memory(
    client: httpx.AsyncClient, replicas: Any, tmp_path: Path
) -> None:
    await corpus(client)
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    replica = replicas(store_root=blocked / "bm25")
    await replica._open()
    assert replica.ready and not replica.shared
    store = replica.stats()["store"]
    assert store["kind"] == "memory" and store["error"]
    assert replica.counters["fallbacks"] == 1
    hits = await replica.search(["pattern"], "jitter backoff", 5)
    assert hits is not None and hits["pattern"].hits

    # The folder mended: a rebuild searches the node's index on disk again.
    blocked.unlink()
    await replica.build()
    assert replica.shared and replica.stats()["store"]["error"] is None
    assert replica.counters["fallbacks"] == 1 and replica.counters["rebuilds"] >= 1
    assert (await replica.search(["pattern"], "jitter backoff", 5)) == hits


async def test_health_names_the_store(client: httpx.AsyncClient) -> None:
    body = (await client.get("/api/health", headers=OPERATOR)).json()
    store = body["lexical"]["store"]
    assert store["kind"] == "disk" and store["error"] is None, store
    assert store["generation"].startswith("g-") and store["folder"]


async def test_a_generation_swept_while_reloading_is_followed_not_fled(
    client: httpx.AsyncClient, database: str, replicas: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica reads the state (its generation, a new commit), another
    process publishes a rebuild and sweeps that generation, then the first
    reloads: it must read the state again and move on, not fall back to
    memory for good."""
    _, ids = await corpus(client)
    first, second = replicas(), replicas()
    await first._open()
    await second._open()
    sql(database, "UPDATE patterns SET content = 'zeppelin hangar' WHERE id = %s", ids["cron"])
    await second.search(["pattern"], "zeppelin", 5)  # a commit on the shared generation
    assert second.store is not None and first.store is not None
    stale = second.store.read(True)
    assert stale is not None and stale.generation == first.stats()["store"]["generation"]
    await second.build()  # a new generation; the old one swept
    assert first.store.generations() == [second.stats()["store"]["generation"]]

    reads = iter([stale])
    real_read = first.store.read

    def read(fresh: bool = False) -> Any:
        return next(reads, None) or real_read(fresh)

    monkeypatch.setattr(first.store, "read", read)
    hits = await first.search(["pattern"], "zeppelin", 5)
    assert first.shared and first.counters["fallbacks"] == 0, first.stats()["store"]
    assert hits == await second.search(["pattern"], "zeppelin", 5)
    assert hits is not None and len(hits["pattern"].hits) == 1


async def test_a_fallback_leaves_the_writer_lock_to_its_holder(
    client: httpx.AsyncClient, replicas: Any
) -> None:
    """One coroutine of a process holds the node's writer lock (publishing);
    another's failure must not release it under the first, whose write of
    the state would then be refused (CI met it: 'state.json is written under
    the writer lock')."""
    await corpus(client)
    replica = replicas()
    await replica._open()
    assert await replica._acquire(1.0)
    try:
        replica._fall_back(RuntimeError("a generation swept mid-open"))
        assert replica.store is not None and replica.store.writer_lock.held
    finally:
        replica._release()
    assert not replica.store.writer_lock.held
    await replica.build()  # the folder again, as after any fallback
    assert replica.shared and replica.counters["rebuilds"] >= 1


async def test_a_build_and_a_background_open_share_one_folder(
    client: httpx.AsyncClient, replicas: Any
) -> None:
    """The app starts its index in the background and the first rebuild
    asks for the node's folder at the same time: both must get one store
    (one writer lock). Two meant a lock taken on one and checked on the
    other, and every later publish fell back to memory (CI met it in the
    health test: 'state.json is written under the writer lock')."""
    await corpus(client)
    replica = replicas()
    first, second = await asyncio.gather(replica._store(), replica._store())
    assert first is second is replica.store
    replica.start()  # as the app's lifespan does
    await replica.build()
    while replica._task is not None:
        await asyncio.sleep(0.01)
    await replica.build()
    assert replica.shared and replica.counters["fallbacks"] == 0, replica.stats()["store"]
