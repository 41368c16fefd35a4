"""The search benchmark's vectors: N_BASIS real texts and the queries
embedded once (cached), and the 100,000 pattern vectors derived from them."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.corpus import SEED, queries_for, texts_for
from benchmarks.search.config import CACHE_DIR, N_BASIS, N_QUERIES


def encode(model: Any, texts: Sequence[str]) -> np.ndarray:
    """A SentenceTransformer's normalised float32 rows of ``texts``."""
    vecs = model.encode(
        list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False
    )
    return np.ascontiguousarray(vecs, dtype=np.float32)


def fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:12]


def cached(name: str, make: Any) -> np.ndarray:
    path = CACHE_DIR / f"{name}.npy"
    if path.exists():
        return np.asarray(np.load(path), dtype=np.float32)
    array = np.ascontiguousarray(make(), dtype=np.float32)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, array)
    tmp.replace(path)
    return array


def model_path() -> str:
    from embeddings.encoder import resolve

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return resolve("all-MiniLM-L6-v2")


def load_model() -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_path(), device="cpu")


def basis_vectors(model: Any | None = None) -> np.ndarray:
    """The real vectors of the N_BASIS texts (cached)."""
    texts = texts_for(N_BASIS)

    def make() -> np.ndarray:
        print(f"bench: embedding {N_BASIS:,} real texts (once; cached)", flush=True)
        return encode(model or load_model(), texts)

    return cached(f"basis-{fingerprint(texts)}", make)


def query_vectors(model: Any | None = None) -> np.ndarray:
    queries = queries_for(N_QUERIES)
    return cached(f"queries-{fingerprint(queries)}", lambda: encode(model or load_model(), queries))


def derived_vectors(basis: np.ndarray, n: int) -> np.ndarray:
    """``n`` vectors: row ``i`` mixes basis ``i % len(basis)`` (weight ≈ 0.7)
    with two random basis vectors and Gaussian noise, normalised. The first
    rows of a larger ``n`` equal those of a smaller one."""

    def make() -> np.ndarray:
        out = np.empty((n, basis.shape[1]), dtype=np.float32)
        step = 50_000
        for start in range(0, n, step):
            rng = np.random.default_rng([SEED, start])
            rows = np.arange(start, min(n, start + step))
            weights = rng.dirichlet([7.0, 1.5, 1.5], len(rows)).astype(np.float32)
            others = rng.integers(0, len(basis), (len(rows), 2))
            mix = weights[:, :1] * basis[rows % len(basis)] + weights[:, 1:2] * basis[others[:, 0]]
            mix = mix + weights[:, 2:3] * basis[others[:, 1]]
            mix += rng.standard_normal(mix.shape).astype(np.float32) * (
                0.35 / np.sqrt(basis.shape[1])
            )
            out[rows] = mix / np.linalg.norm(mix, axis=1, keepdims=True)
        return out

    return cached(f"derived-{n}-{fingerprint(basis[:4].tolist(), SEED)}", make)
