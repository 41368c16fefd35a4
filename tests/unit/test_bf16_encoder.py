"""bf16 bulk encoding on the CPU (``cairn reembed --precision bf16``) agrees
with the fp32 ONNX graph the Embedder encodes queries with (the real
packaged model; the bf16 path compiled as in use)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embeddings.encoder import Encoder
from embeddings.reembed import ReembedOptions

from .test_onnx_encoder import TEXTS

# The smallest cosine to fp32 measured over 5,188 documents of the docs
# evaluation set was 0.99997 (docs/benchmarks.md, "Encoder precisions for
# bulk re-embedding"); a broken path (padding counted, no mask) gives < 0.95.
MIN_COSINE = 0.9999


def test_bf16_vectors_match_fp32(tmp_path: Path) -> None:
    bf16 = Encoder(device="cpu", precision="bf16", cache_dir=tmp_path)
    assert bf16.backend == "torch" and bf16.dim == 384
    reference = Encoder(device="cpu", backend="onnx", cache_dir=tmp_path).encode(TEXTS)
    # One call of all the texts (one padded batch), and batches of 3 on 2 threads.
    for vectors in (bf16.encode(TEXTS), bf16.encode(TEXTS, batch_size=3, threads=2)):
        assert vectors.shape == reference.shape and vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        cosine = (vectors * reference).sum(axis=1)
        assert cosine.min() >= MIN_COSINE, cosine
    assert bf16.encode([]).shape == (0, 384)


def test_bf16_without_the_compiler_gives_the_same_vectors(tmp_path: Path) -> None:
    """The path a process takes when compiling fails (no C++ compiler)."""
    from embeddings.bf16_model import Bf16Model
    from embeddings.config import DEFAULT_MODEL
    from embeddings.encoder import resolve

    eager = Bf16Model(Path(resolve(DEFAULT_MODEL)), compiled=False)
    reference = Encoder(device="cpu", backend="onnx", cache_dir=tmp_path).encode(TEXTS)
    cosine = (eager.encode(TEXTS, batch_size=4) * reference).sum(axis=1)
    assert cosine.min() >= MIN_COSINE, cosine


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="precision"):
        ReembedOptions(database_url="postgresql://x/y", precision="fp16")
    with pytest.raises(ValueError, match="precision"):
        Encoder(device="cpu", precision="fp16")
