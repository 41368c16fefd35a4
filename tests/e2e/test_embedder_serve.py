"""The running service's Embedder deployment, reached through a
DeploymentHandle from a driver attached to the service's own Ray cluster:
its batched single-text path and its list path give the vectors a plain
in-process Encoder gives."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import ray
from ray import serve

from embeddings.encoder import Encoder
from serve_app.bootstrap import ray_dir
from tests.e2e.conftest import Service

pytestmark = pytest.mark.e2e

TEXTS = [
    "How to retry webhook deliveries with postgres when the upstream service times out.",
    "Cache embedding lookups in redis to keep search latency low.",
    "Shard kafka consumers across several replicas without losing messages.",
    "A safe way to migrate a large table during a rolling deploy.",
    "rate limit",
    "Summarize long chat transcripts into short notes for an agent's memory window.",
    "Cache embedding lookups in redis to keep search latency low.",  # a repeat
    "Écrire des tests de bout en bout pour une API de recherche sémantique.",
]


def gcs_address(service: Service) -> str:
    """host:port of the GCS of the service's Ray (started by `cairn run`).

    Ray starts the GCS on a free port (``--gcs_server_port=0``) and persists
    the bound port in the session folder; its command line names both."""
    from ray._raylet import (  # type: ignore[attr-defined]
        GCS_SERVER_PORT_NAME,
        get_port_filename,
    )

    markers = (str(ray_dir(service.state_dir)), str(service.state_dir.resolve()))
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if not cmdline or not cmdline[0].endswith("gcs_server"):
            continue
        flags = dict(part.lstrip("-").split("=", 1) for part in cmdline[1:] if "=" in part)
        session = flags.get("session-dir", "")
        if not any(session.startswith(m) for m in markers) and not any(
            m in os.path.realpath(session) for m in markers
        ):
            continue
        port = flags.get("gcs_server_port", "0")
        if port == "0":
            name = get_port_filename(flags["node-id"], GCS_SERVER_PORT_NAME)
            found = re.search(r"\d+", Path(session, name).read_text())
            assert found, f"no port in {session}/{name}"
            port = found.group(0)
        return f"{flags.get('node-ip-address', '127.0.0.1')}:{port}"
    raise AssertionError("no gcs_server process for this service")


@pytest.fixture(scope="module")
def embedder(service: Service) -> Iterator[Any]:
    """A handle on the service's Embedder; this process is a Ray driver meanwhile."""
    assert not ray.is_initialized()
    ray.init(
        address=gcs_address(service),
        namespace="cairn",
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    try:
        yield serve.get_deployment_handle("Embedder", app_name="cairn")
    finally:
        ray.shutdown()


async def test_batched_embed_matches_a_plain_encoder(embedder: Any) -> None:
    expected = await asyncio.to_thread(Encoder().encode, TEXTS)
    single = await asyncio.gather(*(embedder.embed.remote(t) for t in TEXTS))
    many = await embedder.embed_many.remote(TEXTS)
    got = np.vstack([np.asarray(v, dtype=np.float32) for v in single])
    assert got.shape == expected.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(many), expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    info = await embedder.info.remote()
    assert info["device"] == "cpu" and "all-MiniLM-L6-v2" in info["models"]
