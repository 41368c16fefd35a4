"""`cairn tune` end to end against the running service: mine the session's
corpus, train a few steps with Ray Train on the service's cluster, gate
(forced), store the version in Postgres; a second tune meanwhile is refused;
the job's metrics are still exported after its driver exits;
the job checked the stored model's ONNX and PyTorch vectors agree, on the
graph the Embedder finds for the version; `cairn models activate`
serves it through `cairn reembed` and search answers with it; `cairn models
rollback` returns the previous model.

The tune starts from a one-layer copy of the packaged model (``--base``,
tests/tinymodel.py): the same code paths at a fraction of the training,
export and re-embedding cost (the issue's budget for this test is 60 s).
The commands' answers to a missing version are tested in process
(tests/api/test_tune.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from embeddings import modelstore
from embeddings.tune import PARITY_MIN
from serve_app.launch.bootstrap import service_discovery_file
from storage.db import make_engine, make_sessionmaker
from storage.repositories import tuning as repo
from telemetry import metrics
from tests.e2e.conftest import Service
from tests.e2e.test_service import as_client, publish, register
from tests.tinymodel import one_layer_copy

pytestmark = pytest.mark.e2e

TOPICS = [
    ("Rotate database credentials without downtime", "Issue the new secret first.",
     "Deploy readers of both secrets, then revoke the old one after a day."),
    ("Bake sourdough bread at home", "A starter and a long cold proof.",
     "Feed the starter, fold the dough four times, proof overnight in the fridge."),
    ("Compress images before uploading them", "Resize and re-encode as WebP.",
     "Cap the longest side at 2048 px, quality 80, strip the EXIF metadata."),
    ("Retry flaky HTTP calls with backoff", "Exponential backoff with jitter.",
     "Wrap the request, back off exponentially, add jitter, cap the retries."),
    ("Stream a huge CSV file lazily", "Read rows with a generator.",
     "Open the file, iterate csv.reader row by row, aggregate on the fly."),
    ("Schedule nightly jobs with cron", "A crontab line and a lock file.",
     "Write the crontab entry, log to a file, take a flock so runs never overlap."),
    ("Page through a large table with keyset pagination", "Remember the last id.",
     "Order by id, ask for ids above the last one seen, never use OFFSET."),
    ("Cache expensive function results in memory", "An LRU cache with a size cap.",
     "Decorate the function with functools.lru_cache and clear it on deploys."),
]  # fmt: skip


def cli(service: Service, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", *args],
        env=service.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


TUNE = (
    "tune", "--json", "--max-steps", "3", "--batch-size", "4", "--max-tokens", "64",
    "--cpus-per-worker", "0.1", "--min-pairs", "10", "--eval-sets", "none", "--force-accept",
    "--hard-negatives", "2",
)  # fmt: skip


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return one_layer_copy(tmp_path_factory.mktemp("tune-base") / "minilm-one-layer")


@pytest.fixture
async def sessions(service: Service) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = make_engine(service.database_url, pool_size=1, max_overflow=1)
    yield make_sessionmaker(engine)
    await engine.dispose()


async def health_model(http: httpx.AsyncClient) -> Any:
    health = (await http.get("/api/health", headers=as_client())).json()
    return (health.get("search") or {}).get("model")


async def semantic_hit(http: httpx.AsyncClient, expected: str, within_s: float = 60.0) -> None:
    deadline, body = time.monotonic() + within_s, {}
    while time.monotonic() < deadline:
        response = await http.get(
            "/api/search", params={"q": "making a loaf with wild yeast"}, headers=as_client()
        )
        body = response.json()
        if body.get("mode") == "semantic" and expected in [d["id"] for d in body["data"][:3]]:
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"semantic search never found {expected}: {body}")


def node_metrics(service: Service) -> str:
    """The text of every metrics endpoint of the service's Ray (its
    service-discovery file, as Prometheus reads it)."""
    out = []
    for group in json.loads(service_discovery_file(service.state_dir).read_text()):
        for target in group["targets"]:
            with contextlib.suppress(httpx.HTTPError):
                out.append(httpx.get(f"http://{target}/metrics", timeout=5).text)
    return "\n".join(out)


def accepted_tunes(service: Service) -> float:
    """``cairn_tune_jobs_total{outcome="accepted"}`` as the node exports it."""
    name = metrics.TUNE_JOBS.exported
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in node_metrics(service).splitlines()
        if line.startswith(name + "{") and 'outcome="accepted"' in line
    )


async def test_tune_store_activate_and_roll_back(
    http: httpx.AsyncClient,
    service: Service,
    sessions: async_sessionmaker[AsyncSession],
    tiny_base: Path,
) -> None:
    t0 = time.monotonic()
    tune = (*TUNE, "--base", str(tiny_base))
    ids: list[str] = []
    for start in range(0, len(TOPICS), 4):
        author = await register(http, f"Tune Author {start}")
        ids += await publish(http, author["api_key"], TOPICS[start : start + 4])
    before = await health_model(http)

    # A tune while another holds the lock is refused, the model unchanged.
    async with sessions() as holder:
        assert await repo.try_lock_tune(holder)
        refused = cli(service, *tune)
        await repo.unlock_tune(holder)
    assert refused.returncode == 1
    assert "another tune is running" in refused.stderr, refused.stderr[-2000:]

    done = cli(service, *tune)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "using its Ray cluster" in done.stderr  # the service's Ray, not a new one
    assert "pairs/s" in done.stderr and "ETA" in done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 3 and summary["accepted"] and summary["pairs_heldout"] >= 1
    # Every training pair of the corpus got its two hard negatives (8 items,
    # each of its own group: always two others to give).
    assert summary["hard_negatives"] == 2 * summary["pairs_train"]
    version = summary["version"]
    assert version.startswith(modelstore.PREFIX)
    card = json.loads(Path(summary["card"]).with_suffix(".json").read_text())
    assert card["gate"]["forced"] and card["training"]["steps"] == 3
    assert card["data"]["hard_negatives"] == {"per_pair": 2, "given": summary["hard_negatives"]}
    assert [g["name"] for g in card["gate"]["groups"]] == ["heldout"]
    # The job checked its graph against PyTorch on the held-out pairs' texts
    # and one past the length the model reads.
    parity = card["onnx_parity"]
    assert parity["texts"] == 2 * summary["pairs_heldout"] + 1
    assert summary["onnx_min_cosine"] == parity["min_cosine"] >= PARITY_MIN
    tuned_s = time.monotonic() - t0

    shown = cli(service, "models", "show", version)
    assert shown.returncode == 0 and "| heldout |" in shown.stdout, shown.stderr

    # The version unpacked from the store finds the graph the job checked
    # (cached by the weights' hash): the one the Embedder and reembed serve.
    from embeddings.encoder import Encoder
    from embeddings.onnx_model import cache_key

    cache = Path(service.env["CAIRN_MODEL_CACHE_DIR"])
    folder = await modelstore.local_copy(sessions, version, cache)
    graph = cache / f"graph-{cache_key(folder)}" / "model.onnx"
    written = graph.stat().st_mtime_ns
    texts = [t[0] for t in TOPICS] + [t[2] for t in TOPICS] + [TOPICS[1][2] * 40]
    served = Encoder(str(folder), device="cpu", backend="onnx", cache_dir=cache)
    vectors = served.encode(texts)
    assert graph.stat().st_mtime_ns == written  # found, not exported again
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    checked_s = time.monotonic() - t0

    # Served through the existing swap; then rolled back.
    activated = cli(service, "models", "activate", version, "--precision", "fp32")
    assert activated.returncode == 0, activated.stderr[-4000:]
    assert await health_model(http) == version
    await semantic_hit(http, ids[1])
    back = cli(service, "models", "rollback", "--precision", "fp32")
    assert back.returncode == 0, back.stderr[-4000:]
    assert await health_model(http) == before

    # The job's metrics outlive its driver: the cluster's recorder actor
    # still exports them (Ray's agent reports every few seconds).
    deadline = time.monotonic() + 60
    while accepted_tunes(service) < 1:
        assert time.monotonic() < deadline, "no accepted tune in the node's metrics"
        await asyncio.sleep(1.0)
    print(
        f"tune {tuned_s:.0f}s (train {summary['train_s']:.0f}s, gate {summary['eval_s']:.0f}s), "
        f"checked {checked_s:.0f}s, all {time.monotonic() - t0:.0f}s"
    )
