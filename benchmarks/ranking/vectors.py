"""The evaluation sets' vectors: all-MiniLM-L6-v2 through the service's
Encoder (ONNX Runtime on the CPU, fp32), cached under ``STATE`` by a hash of
the texts, searched exactly with FAISS. (``CAIRN_RANKING_PRECISION=int8``
measured the int8 encoder until 0655d7e; "int8 stays off",
docs/benchmarks.md, "Reading the fusion numbers".) ``CAIRN_RANKING_MODEL``
names another model folder (a tuned one: ``ranking_eval --model``); its
vectors are cached apart, by the hash of its files."""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.ranking.evalset import STATE


def load_model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from embeddings.config import DEFAULT_MODEL
    from embeddings.encoder import Encoder

    threads, cache = max(1, len(os.sched_getaffinity(0))), STATE / "onnx"
    return Encoder(
        os.environ.get("CAIRN_RANKING_MODEL") or DEFAULT_MODEL,
        device="cpu",
        backend="onnx",
        cache_dir=cache,
        precision="fp32",
        threads=threads,
    )


def _model_tag() -> str:
    """'' for the packaged model (the caches made before keep their names),
    else '-' and the hash of the model folder's files."""
    folder = os.environ.get("CAIRN_RANKING_MODEL")
    return _folder_tag(folder) if folder else ""


@functools.cache
def _folder_tag(folder: str) -> str:
    # Hashes every file of the folder (~90 MB): once a run, not once a set's
    # docs and again its queries.
    from pathlib import Path

    from embeddings.onnx_model import cache_key

    return "-" + cache_key(Path(folder))[:16]


def cached_vectors(
    name: str, texts: Sequence[str], model_box: list[Any]
) -> tuple[np.ndarray, bool]:
    """Vectors of ``texts``, cached under STATE by a hash of the texts."""
    digest = hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:16]
    path = STATE / f"{name}-{digest}{_model_tag()}.npy"
    if path.exists():
        return np.load(path), True
    if not model_box:
        model_box.append(load_model())
    t0 = time.perf_counter()
    vecs = model_box[0].encode(list(texts), batch_size=64)
    print(f"embedded {len(texts)} {name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    STATE.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    return vecs, False


def run_vector(
    doc_vecs: np.ndarray, ids: np.ndarray, query_vecs: np.ndarray, limit: int
) -> list[list[tuple[int, float]]]:
    import faiss

    index = faiss.IndexFlatIP(doc_vecs.shape[1])
    index.add(doc_vecs)
    scores, rows = index.search(query_vecs, limit)
    return [
        [(int(ids[r]), float(s)) for r, s in zip(row, srow, strict=True) if r >= 0]
        for row, srow in zip(rows, scores, strict=True)
    ]
