"""``cairn tune``'s database side over real Postgres: the corpus the miner
reads (visible items only, the Embedder's text, forks, accepted answers,
verifications), the one-tune lock, and the model versions (stored in
chunks, read back on any node, a missing or damaged one a clear error);
the training itself runs on Ray in tests/e2e/test_tune.py."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings import modelstore, tune
from embeddings import pairs as mining
from storage.db import make_engine, make_sessionmaker
from storage.repositories import search as search_repo
from storage.repositories import tuning as repo
from tests.api.conftest import register
from tests.api.test_search import PATTERNS, publish, roomy  # noqa: F401

# What the Embedder embeds for a pattern, written out (storage.models.search).
PATTERN_TEXT = (
    "left(concat_ws(E'\\n', title, description, "
    "array_to_string(use_case_tags || tech_stack, ', '), content), 4000)"
)


@pytest.fixture
async def sessions(database: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = make_engine(database, pool_size=2, max_overflow=2)
    yield make_sessionmaker(engine)
    await engine.dispose()


@pytest.mark.usefixtures("roomy")
async def test_the_corpus_is_what_the_public_sees_as_the_embedder_embeds_it(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    author = await register(client, "Tune Author")
    other = await register(client, "Tune Forker")
    ids = {k: (await publish(client, author, **f))["data"]["id"] for k, f in PATTERNS.items()}
    hidden = await publish(
        client,
        author,
        title="An archived pattern",
        description="Gone from every public list.",
        content="x" * 40,
    )
    assert (
        await client.delete(f"/api/patterns/{hidden['data']['id']}", headers=author.auth)
    ).status_code == 200
    fork = await client.post(f"/api/patterns/{ids['retry']}/fork", headers=other.auth)
    assert fork.status_code in (200, 201), fork.text
    fork_id = fork.json()["data"]["id"]
    question = await client.post(
        "/api/questions",
        headers=author.auth,
        json={
            "title": "How do I page through a large result set quickly?",
            "body": "Offsets get slow on big tables; what do agents do instead here?",
        },
    )
    assert question.status_code == 201, question.text
    q = question.json()["data"]
    answer = await client.post(
        f"/api/questions/{q['slug']}/answers",
        headers=other.auth,
        json={"body": "Use keyset pagination: remember the last id and ask for ids above it."},
    )
    assert answer.status_code == 201, answer.text
    accepted = await client.post(
        f"/api/answers/{answer.json()['data']['id']}/accept", headers=author.auth
    )
    assert accepted.status_code == 200, accepted.text
    async with sessions() as s:
        await s.exec(  # type: ignore[call-overload]
            text(
                "INSERT INTO verifications (id, pattern_id, revision, agent_id, outcome, "
                "environment) VALUES (gen_random_uuid(), CAST(:p AS uuid), 1, "
                "CAST(:a AS uuid), 'worked_as_written', '{}')"
            ).bindparams(p=ids["csv"], a=other.agent_id)
        )
        await s.commit()

    async with sessions() as s:
        rows = await repo.corpus(s)
        answers = await repo.accepted_answers(s)
        embedded = {
            str(r[0]): r[1]
            for r in await s.exec(  # type: ignore[call-overload]
                text(f"SELECT t.id, {PATTERN_TEXT} FROM patterns t")
            )
        }
    patterns = {str(r.item_id): r for r in rows if r.kind == "pattern"}
    assert set(patterns) == {*ids.values(), fork_id}  # the archived one is not there
    assert all(patterns[i].text == embedded[i] for i in patterns)
    assert (
        patterns[fork_id].forked_from is not None
        and str(patterns[fork_id].forked_from) == ids["retry"]
    )
    assert patterns[ids["csv"]].worked == 1
    assert [r.title for r in rows if r.kind == "question"] == [q["title"]]
    assert [(a.question_title, a.body[:10]) for a in answers] == [(q["title"], "Use keyset")]

    items = tune.corpus_items(rows)
    got = mining.mine(
        items,
        [mining.Answer(str(a.question_id), a.question_title, a.body) for a in answers],
        min_pairs=5,
    )
    every = got.train + got.heldout
    assert got.duplicates == 1  # the fork folds into its origin
    assert {p.source for p in every} >= {"title", "description", "question", "answer"}
    assert all(p.query.lower() not in p.document.lower() for p in every)


async def test_one_tune_at_a_time(sessions: async_sessionmaker[AsyncSession]) -> None:
    async with sessions() as first, sessions() as second:
        assert await repo.try_lock_tune(first)
        assert not await repo.try_lock_tune(second)
        await repo.unlock_tune(first)
        assert await repo.try_lock_tune(second)
        await repo.unlock_tune(second)


def fake_model(folder: Path) -> Path:
    """A folder shaped like a sentence-transformers model (no weights: the
    store moves files, whatever they hold)."""
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "modules.json").write_text(json.dumps([{"type": "x.Pooling", "path": "1_Pooling"}]))
    (folder / "1_Pooling" / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 40_000)  # ~10 MB
    return folder


async def test_versions_are_stored_in_chunks_and_read_back_anywhere(
    sessions: async_sessionmaker[AsyncSession], tmp_path: Path
) -> None:
    source = fake_model(tmp_path / "tuned")
    stored = await modelstore.store(sessions, source, "all-MiniLM-L6-v2", True, {"gate": {}})
    assert stored.name.startswith("tuned-") and stored.chunks == 3
    assert modelstore.pack(source) == modelstore.pack(source)  # the same bytes, the same hash

    # Another node: an empty cache; the copy is the same files.
    node = tmp_path / "node-cache"
    folder = await modelstore.local_copy(sessions, stored.name, node)
    assert folder == node / "versions" / stored.sha256
    for path in source.rglob("*"):
        if path.is_file():
            assert (folder / path.relative_to(source)).read_bytes() == path.read_bytes()
    assert await modelstore.local_copy(sessions, stored.name, node) == folder

    async with sessions() as s:
        (row,) = await repo.versions(s)
        assert row.complete and row.card["name"] == stored.name
        assert hashlib.sha256(b"".join(await repo.chunks(s, stored.name))).hexdigest() == row.sha256

    with pytest.raises(modelstore.ModelStoreError, match="no model version named 'tuned-nope'"):
        await modelstore.local_copy(sessions, "tuned-nope", node)

    # A chunk damaged in the database: refused, nothing unpacked.
    async with sessions() as s:
        await s.exec(  # type: ignore[call-overload]
            text("UPDATE model_chunks SET data = 'x' WHERE name = :n AND seq = 1").bindparams(
                n=stored.name
            )
        )
        await s.commit()
    with pytest.raises(modelstore.ModelStoreError, match="reads back as"):
        await modelstore.local_copy(sessions, stored.name, tmp_path / "third-node")
    assert not (tmp_path / "third-node" / "versions" / stored.sha256).exists()


async def test_activations_are_logged_for_rollback(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    async with sessions() as s:
        await search_repo.ensure_active_model(s, "base-model")
        await search_repo.set_active_model(s, "tuned-a")
        await search_repo.set_active_model(s, "tuned-a")  # no change: not logged again
        await search_repo.set_active_model(s, "base-model")
        await s.commit()
        assert [m for m, _ in await repo.activations(s)] == ["base-model", "tuned-a", "base-model"]


async def test_the_models_commands_list_show_and_refuse_a_missing_version(
    sessions: async_sessionmaker[AsyncSession],
    database: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What ``cairn models list | show`` print and how ``show`` and ``cairn
    reembed --model`` refuse a version that does not exist (in process: the
    e2e tune test runs the commands only where Ray is needed)."""
    import asyncio

    from embeddings import models

    stored = await modelstore.store(sessions, fake_model(tmp_path / "m"), "base-x", True, {})
    assert await asyncio.to_thread(models.list_versions, database) == 0
    assert stored.name in capsys.readouterr().out
    assert await asyncio.to_thread(models.show, database, stored.name) == 0
    assert "base base-x" in capsys.readouterr().out
    assert await asyncio.to_thread(models.show, database, "tuned-none") == 1
    assert "no model version named 'tuned-none'" in capsys.readouterr().err
    assert not await asyncio.to_thread(models.check_exists, database, "tuned-none")
    assert "no model version named 'tuned-none'" in capsys.readouterr().err
    assert await asyncio.to_thread(models.check_exists, database, stored.name)
