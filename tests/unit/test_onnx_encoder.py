"""The Encoder on ONNX Runtime gives PyTorch's vectors (the real packaged
model, exported here into a temporary cache)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from embeddings.encoder import Encoder, resolve
from embeddings.onnx_model import NotExportable, OnnxModel, describe

TEXTS = [
    "How do I retry a failed HTTP request with exponential backoff?",
    "retry",
    "",
    "def parse(s: str) -> dict: return json.loads(s)",
    "Ünïcödé — dashes, emoji 🎉 and ALL CAPS",
    # Past the model's 256 tokens: truncated exactly as sentence-transformers does.
    "a long document about connection pools and timeouts " * 60,
    "psycopg.errors.UniqueViolation",
    "How to paginate a REST API with cursors instead of offsets",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx(cache: Path) -> Encoder:
    return Encoder(device="cpu", backend="auto", cache_dir=cache)


@pytest.fixture(scope="module")
def torch_vectors() -> np.ndarray:
    return Encoder(device="cpu", backend="torch").encode(TEXTS)


def test_onnx_vectors_match_pytorch(onnx: Encoder, torch_vectors: np.ndarray) -> None:
    assert onnx.backend == "onnx" and onnx.dim == 384
    # One padded batch, one text at a time, and on two threads: all agree.
    for vectors in (
        onnx.encode(TEXTS),
        np.vstack([onnx.encode([t]) for t in TEXTS]),
        onnx.encode(TEXTS, batch_size=3, threads=2),
    ):
        assert vectors.shape == torch_vectors.shape and vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        cosine = (vectors * torch_vectors).sum(axis=1)
        assert cosine.min() >= 0.9999, cosine


def test_graph_is_cached_and_reused(onnx: Encoder, cache: Path) -> None:
    graphs = list(cache.glob("*/model.onnx"))
    assert len(graphs) == 1
    stamp = graphs[0].stat().st_mtime_ns
    again = Encoder(device="cpu", cache_dir=cache)
    assert again._onnx.path == graphs[0] and graphs[0].stat().st_mtime_ns == stamp


def test_a_model_that_cannot_be_exported_is_refused(tmp_path: Path) -> None:
    folder = Path(resolve("all-MiniLM-L6-v2"))
    describe(folder)
    copy = tmp_path / "no-fast-tokenizer"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("tokenizer.json", "*.safetensors"))
    with pytest.raises(NotExportable):
        OnnxModel(copy, tmp_path / "cache")
    with pytest.raises(NotExportable):
        Encoder(str(copy), device="cpu", backend="onnx", cache_dir=tmp_path / "cache")


def test_a_process_waits_for_the_export_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process holds a cache's export lock (replicas starting
    together on one cache), a second waits, then takes the graph that one
    wrote instead of exporting it again."""
    import fcntl
    import threading
    import time

    from embeddings import onnx_model
    from embeddings.config import DEFAULT_MODEL

    folder = Path(resolve(DEFAULT_MODEL))
    built = onnx_model.exported(folder, onnx_model.default_cache())  # the session's graph
    exports: list[object] = []
    monkeypatch.setattr(onnx_model.subprocess, "run", lambda *a, **k: exports.append(a))
    monkeypatch.setattr(onnx_model, "export", lambda *a: exports.append(a))  # torch loaded here
    other = tmp_path / "cache"
    graph_dir = other / built.parent.name
    graph_dir.mkdir(parents=True)
    found: list[Path] = []
    with open(graph_dir / ".export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # "another process" exporting
        waiter = threading.Thread(target=lambda: found.append(onnx_model.exported(folder, other)))
        waiter.start()
        time.sleep(0.5)
        assert not found and waiter.is_alive()  # waiting on the lock
        shutil.copy(built, graph_dir / "model.onnx")  # the other process's graph lands
    waiter.join(timeout=10)
    assert found == [graph_dir / "model.onnx"] and not exports
