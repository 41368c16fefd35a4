"""The re-embedding job's selection SQL and its passes, in process over real
Postgres with the real model (the Ray pool is exercised in
tests/e2e/test_reembed.py)."""

from __future__ import annotations

import hashlib
import io
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.encoder import Encoder, from_bytes, to_bytes
from embeddings.reembed import BatchEmbedder, BatchResult, Job, Progress, ReembedOptions
from storage.db import make_engine, make_sessionmaker
from storage.repositories import reembed as stale
from storage.repositories import search as search_repo
from tests.api.conftest import Registered, register, scalar
from tests.api.test_search import PATTERNS, publish, roomy  # noqa: F401

MODEL = "reembed-test-model"


@pytest.fixture
async def sessions(database: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = make_engine(database, pool_size=2, max_overflow=2)
    yield make_sessionmaker(engine)
    await engine.dispose()


async def corpus(client: httpx.AsyncClient, n: int) -> tuple[Registered, list[str]]:
    """``n`` published patterns by one agent (the agent is searchable too)."""
    author = await register(client, "Reembed Author")
    texts = list(PATTERNS.values())
    ids = []
    for i in range(n):
        fields = {**texts[i % len(texts)], "title": f"{texts[i % len(texts)]['title']} #{i}"}
        ids.append((await publish(client, author, **fields))["data"]["id"])
    return author, ids


class Silent(Progress):
    def __init__(self) -> None:
        super().__init__(out=open("/dev/null", "w"))  # noqa: SIM115


def job(
    database: str,
    sessions: async_sessionmaker[AsyncSession],
    encoder: Encoder,
    **options: Any,
) -> tuple[Job, list[BatchResult]]:
    """A Job whose batches run in process; ``seen`` collects their results."""
    opts = ReembedOptions(database_url=database, model=MODEL, **options)
    batches = BatchEmbedder(encoder, sessions, MODEL)
    seen: list[BatchResult] = []

    async def submit(kind: str, ids: list[uuid.UUID]) -> BatchResult:
        result = await batches.embed(kind, ids)
        seen.append(result)
        return result

    return Job(opts, sessions, submit, progress=Silent()), seen


@pytest.mark.usefixtures("roomy")
async def test_stale_selection_pages_and_hashes(
    client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession], database: str
) -> None:
    author, ids = await corpus(client, 7)
    archived = await client.delete(f"/api/patterns/{ids[6]}", headers=author.auth)
    assert archived.status_code == 200, archived.text
    visible = sorted(uuid.UUID(i) for i in ids[:6])

    async with sessions() as s:
        assert await stale.count_stale(s, "pattern", MODEL) == 6
        assert await stale.count_stale(s, "agent", MODEL) == 1
        assert await stale.count_stale(s, "question", MODEL) == 0
        # Keyset pages: ascending, each row once, the hidden one never.
        pages, after = [], None
        while page := await stale.stale_ids(s, "pattern", MODEL, after, 4):
            pages.append(page)
            after = page[-1]
        assert [len(p) for p in pages] == [4, 2]
        assert [i for p in pages for i in p] == visible

        rows = await stale.stale_texts(s, "pattern", MODEL, [*visible, uuid.UUID(ids[6])])
        assert [r[0] for r in rows] == visible
        for _, body, digest in rows:
            assert digest == hashlib.sha256(body.encode()).digest()
            assert "Reembed" not in body and "#" in body

        # Current under the model: skipped; stored from other text: stale.
        vector = to_bytes(np.ones(4, dtype=np.float32))
        await search_repo.store_embeddings(
            s,
            "pattern",
            MODEL,
            [(rows[0][0], rows[0][2], vector), (rows[1][0], b"\x00" * 32, vector)],
        )
        # A vector under another model does not count.
        await search_repo.store_embeddings(
            s, "pattern", "other", [(rows[2][0], rows[2][2], vector)]
        )
        # A row deleted before its batch is stored gets no vector (nothing
        # would ever free it).
        gone = uuid.uuid4()
        await search_repo.store_embeddings(s, "pattern", MODEL, [(gone, b"\x01" * 32, vector)])
        stored = await s.exec(  # type: ignore[call-overload]
            text("SELECT count(*) FROM embeddings WHERE item_id = :i").bindparams(i=gone)
        )
        assert stored.one()[0] == 0
        await s.commit()
        assert await stale.count_stale(s, "pattern", MODEL) == 5
        left = await stale.stale_ids(s, "pattern", MODEL, None, 100)
        assert rows[0][0] not in left and rows[1][0] in left and rows[2][0] in left
        assert [r[0] for r in await stale.stale_texts(s, "pattern", MODEL, visible)] == left

    # An edit makes a current row stale again.
    edited = await client.put(
        f"/api/patterns/{rows[0][0]}", headers=author.auth, json={"content": "Something else."}
    )
    assert edited.status_code == 200, edited.text
    async with sessions() as s:
        assert await stale.count_stale(s, "pattern", MODEL) == 6


@pytest.mark.usefixtures("roomy")
async def test_job_embeds_everything_then_nothing(
    client: httpx.AsyncClient,
    sessions: async_sessionmaker[AsyncSession],
    database: str,
    encoder: Encoder,
) -> None:
    _, ids = await corpus(client, 5)
    first, seen = job(database, sessions, encoder, batch_size=2, concurrency=2)
    summary = await first.run()
    assert summary.stale_at_start == 6  # five patterns and their author
    assert (summary.rows, summary.embedded, summary.passes) == (6, 6, 1)
    assert summary.complete and summary.activated == "database"
    assert all(r.rows <= 2 for r in seen) and summary.batches == len(seen) == 4
    assert scalar(database, "SELECT model FROM search_model WHERE id = 1") == MODEL

    # The stored vectors are the model's vectors of the texts that were hashed.
    async with sessions() as s:
        kept = await search_repo.items(s, "pattern", [uuid.UUID(i) for i in ids], MODEL)
    assert len(kept) == 5 and all(i.current for i in kept)
    expected = encoder.encode([i.text for i in kept])
    stored = from_bytes([i.stored_vector or b"" for i in kept])
    assert np.allclose(stored, expected, atol=1e-5)

    again, seen = job(database, sessions, encoder, batch_size=2)
    summary = await again.run()
    assert (summary.stale_at_start, summary.rows, summary.embedded, seen) == (0, 0, 0, [])
    assert summary.complete and summary.activated == "database"


@pytest.mark.usefixtures("roomy")
async def test_an_interrupted_job_resumes_with_the_rest(
    client: httpx.AsyncClient,
    sessions: async_sessionmaker[AsyncSession],
    database: str,
    encoder: Encoder,
) -> None:
    await corpus(client, 7)
    # Stops after 3 of the 8 rows (a killed job keeps what it committed).
    partial, _ = job(database, sessions, encoder, batch_size=2, limit=3)
    summary = await partial.run()
    assert (summary.rows, summary.embedded, summary.complete) == (3, 3, False)
    assert summary.activated is None
    assert scalar(database, "SELECT model FROM search_model WHERE id = 1") is None

    rest, _ = job(database, sessions, encoder, batch_size=2)
    summary = await rest.run()
    assert (summary.stale_at_start, summary.embedded, summary.complete) == (5, 5, True)
    assert scalar(database, "SELECT count(*) FROM embeddings WHERE model = %s", MODEL) == 8
    assert scalar(database, "SELECT model FROM search_model WHERE id = 1") == MODEL


@pytest.mark.usefixtures("roomy")
async def test_rows_changed_during_the_job_are_caught_up_before_the_swap(
    client: httpx.AsyncClient,
    sessions: async_sessionmaker[AsyncSession],
    database: str,
    encoder: Encoder,
) -> None:
    author, ids = await corpus(client, 4)
    opts = ReembedOptions(database_url=database, model=MODEL, kinds=("pattern",), batch_size=2)
    batches = BatchEmbedder(encoder, sessions, MODEL)
    swapped: list[tuple[str, int]] = []

    async def submit(kind: str, item_ids: list[uuid.UUID]) -> BatchResult:
        result = await batches.embed(kind, item_ids)
        if len(swapped) == 0 and str(item_ids[0]) in ids:
            # An author edits a row that was just embedded.
            swapped.append(("edited", 0))
            edited = await client.put(
                f"/api/patterns/{item_ids[0]}",
                headers=author.auth,
                json={"description": "Changed while the job ran."},
            )
            assert edited.status_code == 200, edited.text
        return result

    async def activate(model: str) -> dict[str, int]:
        # Only once every row is current under the model.
        async with sessions() as s:
            swapped.append(("activate", await stale.count_stale(s, "pattern", model)))
        return {"pattern": 4}

    running = Job(opts, sessions, submit, activate=activate, progress=Silent())
    summary = await running.run()
    assert summary.passes == 2 and summary.per_pass == [4, 1]
    assert summary.embedded == 5 and summary.complete
    assert swapped == [("edited", 0), ("activate", 0)]
    assert summary.activated == "service" and summary.indexes == {"pattern": 4}
    # The service records the active model itself; the job does not.
    assert scalar(database, "SELECT model FROM search_model WHERE id = 1") is None


def test_options_are_checked() -> None:
    url = "postgresql://localhost/cairn"
    with pytest.raises(ValueError, match="kinds"):
        ReembedOptions(database_url=url, kinds=("pattern", "comment"))
    with pytest.raises(ValueError, match="batch size"):
        ReembedOptions(database_url=url, batch_size=0)
    assert ReembedOptions(database_url=url, num_cpus=0.1).torch_threads == 1
    assert ReembedOptions(database_url=url, num_cpus=4).torch_threads == 4


def test_progress_lines() -> None:
    out = io.StringIO()
    progress = Progress(out, interval_s=0.0)
    progress.start("embedding", 10)
    progress.add(BatchResult("pattern", rows=3, embedded=2, texts=2))
    progress.finish()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("cairn reembed: embedding: 0/10 rows (0%), 0 embedded")
    assert "3/10 rows (30%), 2 embedded" in lines[-1] and "ETA" in lines[-1]


def test_the_command_refuses_a_remote_cluster_without_a_database_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from serve_app.launch.cli import build_parser
    from serve_app.settings import get_settings

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    monkeypatch.delenv("CAIRN_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    try:
        args = build_parser().parse_args(["reembed", "--model", "m", "--concurrency", "3"])
        assert (args.model, args.concurrency, args.num_cpus, args.limit) == ("m", 3, 0.1, None)
        assert args.func(args) == 2
    finally:
        get_settings.cache_clear()
    assert "CAIRN_DATABASE_URL" in capsys.readouterr().err
