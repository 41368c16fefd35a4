"""The Api process's copy of the vector index (serve_app/runtime/index_copies/vectors.py) over real
Postgres, the real model and real FAISS.

The VectorIndex deployment is played by an Indexer in this process
(``LocalSearch``, the code the deployment runs): the copy's fallback and its
source of query vectors; tests/e2e/test_search_serve.py runs the copy behind
real Serve handles."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from serve_app.runtime.index_copies.vectors import ReplicaVectors
from serve_app.runtime.semantic import LocalSearch
from storage.repositories import search as repo
from tests.api.conftest import register, scalar
from tests.api.test_patterns import sql
from tests.api.test_search import CARBONARA, PATTERNS, corpus, ids_of, publish, search


class Embeddings:
    """The VectorIndex's ``embed_query`` played in process: the Indexer's
    query path (its encoder), counting the calls."""

    def __init__(self, local: LocalSearch) -> None:
        self.local = local
        self.calls = 0

    async def __call__(self, text: str, model: str) -> Any:
        self.calls += 1
        return await self.local.queries.get(text, model)


@pytest.fixture
async def copy(
    client: httpx.AsyncClient, semantic: LocalSearch, database: str
) -> AsyncIterator[ReplicaVectors]:
    """A copy of ``semantic``'s indexes as the app's semantic search, reading
    the change log before every search (refresh_s 0)."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    await semantic.indexer.start()  # as the VectorIndex does: sets the active model
    replica = ReplicaVectors(
        Embeddings(semantic),
        semantic,
        ctx.settings.indexer_config(database),
        ctx.sessions,
        ctx.engine,
        refresh_s=0,
    )
    saved = ctx.search
    ctx.search = replica
    yield replica
    ctx.search = saved
    await replica.close()


async def test_searches_the_copy_once_built(
    client: httpx.AsyncClient, semantic: LocalSearch, copy: ReplicaVectors
) -> None:
    # Not built yet: the first search goes to the VectorIndex and starts the
    # build (on a database with nothing to search yet).
    assert await copy.nearest(["pattern"], "anything", 5) == {"pattern": []}
    assert copy.counters["remote"] == 1 and copy.counters["local"] == 0
    if copy._task is not None:
        await copy._task
    assert copy.ready and copy.indexes == {}
    # Built: what the worker embeds reaches the copy through the change log.
    _, ids = await corpus(client)
    await semantic.settle()
    await copy.refresh(force=True)
    assert copy.ready and copy.model == semantic.indexer.model
    # Kinds with nothing embedded yet get an index with their first vectors.
    assert {k: len(v) for k, v in copy.indexes.items() if len(v)} == {
        k: len(v) for k, v in semantic.indexer.indexes.items() if len(v)
    }
    # Answered here, with the VectorIndex's own hits and scores.
    query = "trigger a task automatically around midnight"
    body = await search(client, q=query)
    assert body["mode"] == "semantic" and ids_of(body)[0] == ids["cron"]
    assert copy.counters["remote"] == 1
    kinds = ["pattern", "question", "agent"]
    assert await copy.nearest(kinds, query, 10) == await semantic.nearest(kinds, query, 10)
    # A query asked before is embedded once.
    embeddings = copy.queries._embed
    assert isinstance(embeddings, Embeddings)
    asked = embeddings.calls
    await search(client, q=query)
    assert embeddings.calls == asked
    replica = (await copy.stats() or {})["replica"]
    assert replica["ready"] is True and replica["indexes"]["pattern"] == len(PATTERNS)
    assert replica["memory_bytes"] > 0


async def test_the_copy_follows_the_worker(
    client: httpx.AsyncClient, semantic: LocalSearch, copy: ReplicaVectors, database: str
) -> None:
    """What the worker adds, replaces and removes reaches the copy at its next
    read of the change log; a row not embedded yet is not in it."""
    author, ids = await corpus(client)
    await semantic.settle()
    await copy.build()
    pasta = "cook a pasta dinner for guests"
    assert ids_of(await search(client, q=pasta))[:1] != [ids["csv"]]

    changed = await client.put(
        f"/api/patterns/{ids['csv']}",
        headers=author.auth,
        json=CARBONARA,
    )
    assert changed.status_code == 200, changed.text
    fresh = await publish(
        client,
        author,
        title="Rotate nginx access logs with logrotate",
        description="Compress weekly and keep eight weeks of archives.",
        content="Put a stanza in /etc/logrotate.d/nginx and reload nginx in postrotate.",
    )
    fresh_id = fresh["data"]["id"]
    fresh_sid = int(scalar(database, "SELECT search_id FROM patterns WHERE id = %s", fresh_id))
    # Not embedded yet: the copy, like the VectorIndex, has no vector for it.
    await copy.refresh(force=True)
    assert fresh_sid not in _ids(copy)
    assert fresh_sid not in _ids_of_index(semantic)

    await semantic.settle()
    body = await search(client, q=pasta)
    assert body["mode"] == "semantic" and ids_of(body)[0] == ids["csv"]
    assert ids_of(await search(client, q="nginx log rotation"))[0] == fresh_id
    assert _ids(copy) == _ids_of_index(semantic)

    archived = await client.delete(f"/api/patterns/{ids['oauth']}", headers=author.auth)
    assert archived.status_code == 200, archived.text
    await semantic.settle()
    await copy.refresh(force=True)
    oauth_sid = int(scalar(database, "SELECT search_id FROM patterns WHERE id = %s", ids["oauth"]))
    assert oauth_sid not in _ids(copy)
    assert _ids(copy) == _ids_of_index(semantic)
    # Changes logged by the triggers are not the copy's: one read took only
    # the worker's.
    assert copy.counters["changes"] >= 3


async def test_the_copy_follows_a_switch_of_model(
    client: httpx.AsyncClient, semantic: LocalSearch, copy: ReplicaVectors, database: str
) -> None:
    """When the active model changes, the copy is rebuilt from the vectors
    stored under the new one; the old copy answers until then."""
    await corpus(client)
    await register(client, "Bystander")
    await semantic.settle()
    await copy.build()
    model = copy.model
    assert model is not None
    # The re-embedding job's result, under another name: the same vectors
    # for the patterns only.
    other = "copy-test-model"
    sql(
        database,
        "INSERT INTO embeddings (kind, item_id, model, text_hash, vector) "
        "SELECT kind, item_id, %s, text_hash, vector FROM embeddings "
        "WHERE model = %s AND kind = 'pattern'",
        other,
        model,
    )
    async with copy._sessions() as session:
        await repo.set_active_model(session, other)
        await session.commit()
    try:
        await copy.refresh(force=True)  # notices the switch, rebuilds meanwhile
        assert copy.model == model
        task = copy._task
        assert task is not None
        await task
        assert copy.model == other
        assert len(copy.indexes["pattern"]) == len(PATTERNS)
        assert len(copy.indexes.get("agent", ())) == 0
    finally:
        async with copy._sessions() as session:
            await repo.set_active_model(session, model)
            await session.commit()
        sql(database, "DELETE FROM embeddings WHERE model = %s", other)


async def test_a_failed_build_keeps_searching_through_the_vector_index(
    client: httpx.AsyncClient, semantic: LocalSearch, copy: ReplicaVectors, database: str
) -> None:
    """With no active model yet (the VectorIndex has not started on this
    database), the copy cannot be built: searches go to the VectorIndex, and
    the build is retried after a pause, not at every search."""
    model = scalar(database, "SELECT model FROM search_model WHERE id = 1")
    sql(database, "DELETE FROM search_model")
    try:
        copy.start()
        task = copy._task
        assert task is not None
        await task
        assert not copy.ready and copy.counters["rebuilds"] == 0
        copy.start()
        assert copy._task is None  # within RETRY_S of the failure
    finally:
        sql(database, "INSERT INTO search_model (id, model) VALUES (1, %s)", model)
    _, ids = await corpus(client)
    await semantic.settle()
    body = await search(client, q="renew login credentials early")
    assert body["mode"] == "semantic" and ids_of(body)[0] == ids["oauth"]
    assert copy.counters["remote"] >= 1 and copy.counters["local"] == 0
    copy.RETRY_S = 0.0  # the pause is over
    await search(client, q="renew login credentials early")  # starts the build
    if copy._task is not None:
        await copy._task
    assert copy.ready and len(copy.indexes["pattern"]) == len(PATTERNS)
    body = await search(client, q="renew login credentials early")
    assert ids_of(body)[0] == ids["oauth"] and copy.counters["local"] == 1


def _ids(copy: ReplicaVectors) -> set[int]:
    index = copy.indexes["pattern"]
    return {sid for sid, _ in index.search(_probe(index.dim), len(index))}


def _ids_of_index(local: LocalSearch) -> set[int]:
    index = local.indexer.indexes["pattern"]
    return {sid for sid, _ in index.search(_probe(index.dim), len(index))}


def _probe(dim: int) -> Any:
    import numpy as np

    vector = np.ones(dim, dtype=np.float32)
    return vector / np.linalg.norm(vector)
