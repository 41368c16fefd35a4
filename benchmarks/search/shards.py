"""Vectors in transit: int8 codes with one float32 scale a vector
(``max|v| / 127``), 388 bytes a 384-dimension vector, in shard files of
consecutive patterns (every code, then every scale). Written by
``benchmarks.search.gpu_embed`` on a GPU machine, read by
``benchmarks.search.bulk.load_vectors`` here."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def quantise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes and per-vector float32 scales of float rows."""
    scale = np.abs(vectors).max(axis=1).astype(np.float32) / 127.0
    scale[scale == 0] = 1.0
    codes = np.clip(np.rint(vectors / scale[:, None]), -127, 127).astype(np.int8)
    return codes, scale


def dequantise(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Float rows back from codes and scales, L2-normalised again."""
    v = codes.astype(np.float32) * scale[:, None]
    v /= np.linalg.norm(v, axis=1, keepdims=True).clip(min=1e-12)
    return v


def write_shard(path: Path, codes: np.ndarray, scale: np.ndarray) -> None:
    with path.open("wb") as f:
        f.write(np.ascontiguousarray(codes).tobytes())
        f.write(np.ascontiguousarray(scale, dtype="<f4").tobytes())


def read_shard(path: Path, dim: int) -> tuple[np.ndarray, np.ndarray]:
    raw = path.read_bytes()
    rows = len(raw) // (dim + 4)
    if rows * (dim + 4) != len(raw):
        raise ValueError(f"{path}: {len(raw)} bytes is no whole number of {dim}-dim rows")
    codes = np.frombuffer(raw, dtype=np.int8, count=rows * dim).reshape(rows, dim)
    scale = np.frombuffer(raw, dtype="<f4", offset=rows * dim, count=rows)
    return codes, scale
