"""Texts to vectors as the benchmarks embed them (the search and ranking
benchmarks): a SentenceTransformer's normalised float32 rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def encode(model: Any, texts: Sequence[str]) -> np.ndarray:
    vecs = model.encode(
        list(texts),
        batch_size=64,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.ascontiguousarray(vecs, dtype=np.float32)
