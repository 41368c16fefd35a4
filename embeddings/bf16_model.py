"""Bulk encoding on the CPU with bf16 matrix products (``cairn reembed
--precision bf16``).

Why: a re-embedded row is ≈ 230 word pieces, where the time is matrix
products, which fp32 cannot do faster; bf16 ones (``avx512_bf16`` cores)
can. The model stays fp32 and runs under ``torch.autocast(bfloat16)``
(linear layers and attention's products in bf16 with fp32 sums; layer norm,
softmax, pooling and normalisation in fp32), compiled by inductor: about 2x
ONNX Runtime fp32's rows per CPU second on one thread (1.6x at the batches
of 8 both now run), and every evaluation set's vector MRR@10 within 0.0017
of fp32's with the corpus in bf16 and the queries in fp32 (docs/benchmarks.md,
"Encoder precisions for bulk re-embedding" and "Smaller batches on the CPU,
and bf16 compiled once"). Uncompiled it is 1.7-1.8x at batches of 64.

Compiled ahead of time, once: the model (with its mean pooling and
normalisation) is exported by ``torch.export`` and compiled by AOTInductor
into a package cached beside the ONNX graph
(``<cache>/<model>-<key>/model-bf16-v<n>-<cpu>.pt2``; the key names the weights
and torch, ``<cpu>`` the instruction sets the code was compiled for). The
compile (about 40 s of CPU, a C++ compiler needed) runs in a child process
under a file lock, so the actors of one job starting together compile it
once; a process after that loads it in a tenth of a second. (Compiled
just in time instead, ``torch.compile`` cost each actor 20-30 s of CPU at
its first batch, every run.)

Queries stay on ONNX Runtime fp32 (the Embedder): this is for bulk only.
Tokenising, truncation and batching are ``OnnxModel``'s.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from embeddings.onnx_model import (
    cache_key,
    default_cache,
    describe,
    in_child,
    padded_batches,
    tokenizer,
)

log = logging.getLogger("cairn.embeddings")

# Bump when the compiled package changes (inputs, pooling, options).
PACKAGE_VERSION = "1"
# The largest batch the package takes (the encoder cuts calls to it).
MAX_BATCH = 1024
COMPILER_CHECK_S = 30.0


def cpu_tag() -> str:
    """The CPU features compiled code depends on: a package compiled for
    one kind of core is not loaded on another (a cluster's nodes may differ)."""
    import platform

    from embeddings.cpu import cpu_flags

    described = f"{platform.machine()}|{' '.join(cpu_flags())}"
    return hashlib.sha256(described.encode()).hexdigest()[:8]


def package_path(folder: Path, cache: Path) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in folder.name)[:60]
    return cache / f"{safe}-{cache_key(folder)}" / f"model-bf16-v{PACKAGE_VERSION}-{cpu_tag()}.pt2"


def compiler_answers(cxx: str) -> bool:
    """Whether the C++ compiler ``cxx`` answers ``--version`` (inductor's own
    check of the compiler it will use)."""
    try:
        subprocess.run(
            [cxx, "--version"], check=True, capture_output=True, timeout=COMPILER_CHECK_S
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def compiled_package(folder: Path, cache: Path) -> Path:
    """The cached package of the model in ``folder``, compiled (in a child
    process, under a lock other processes wait on) on first use. Raises
    ``subprocess.CalledProcessError`` when compiling fails, and RuntimeError
    without a C++ compiler: checked first, since the child would export the
    model (most of the 40 s) before finding none, in every process, as no
    package is left."""
    out = package_path(folder, cache)
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".bf16-compile.lock", "w") as lock:
        # Another process compiling: wait for its package rather than
        # compiling the same again on the same cores.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_file():
            cxx = os.environ.get("CXX", "g++")  # inductor's compiler
            if not compiler_answers(cxx):
                raise RuntimeError(f"no C++ compiler answers ({cxx} --version)")
            log.info("bf16 encoder: compiling %s (once; about 40 s of CPU)", out.name)
            in_child("embeddings.bf16_model", folder, out)
    return out


def _pooled(torch: Any, model: Any) -> Any:
    """The transformer under bf16 autocast, then mean pooling over the mask
    and L2 normalisation in fp32."""

    class Pooled(torch.nn.Module):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, ids: Any, mask: Any) -> Any:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                hidden = self.inner(
                    input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)
                ).last_hidden_state
            weights = mask.unsqueeze(-1).float()
            mean = (hidden.float() * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    return Pooled()


def _load(folder: Path) -> Any:
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), attn_implementation="sdpa")
    model.eval()
    return model


def compile_package(folder: Path, out: Path) -> None:
    """Export the pooled bf16 model with dynamic batch and length, compile it
    with AOTInductor (weights frozen into the code) and write ``out`` (aside,
    then renamed: a reader never sees half a package)."""
    import torch

    info = describe(folder)
    torch.set_num_threads(1)
    pooled = _pooled(torch, _load(folder))
    # A padded example batch, so the mask's path is traced.
    ids = torch.ones((4, 16), dtype=torch.int64)
    mask = torch.ones((4, 16), dtype=torch.int64)
    mask[0, 9:] = 0
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    length = torch.export.Dim("length", min=2, max=max(3, info["max_seq_length"]))
    with torch.inference_mode():
        program = torch.export.export(
            pooled, (ids, mask), dynamic_shapes=({0: batch, 1: length}, {0: batch, 1: length})
        )
    aside = out.with_name(f".{os.getpid()}-{out.name}")  # AOTInductor wants a .pt2 name
    torch._inductor.aoti_compile_and_package(
        program, package_path=str(aside), inductor_configs={"freezing": True}
    )
    os.replace(aside, out)


class Bf16Model:
    """The model of a local sentence-transformers folder (mean pooling, as
    ``onnx_model.describe`` checks) under bf16 autocast; ``encode`` returns
    L2-normalised float32 rows. ``compiled=False``, or a package that cannot
    be compiled (no C++ compiler), runs the same under autocast, eagerly:
    the same vectors to within bf16's rounding, 1.7-1.8x instead of 2x."""

    def __init__(self, folder: Path, compiled: bool = True, cache: Path | None = None) -> None:
        import torch

        info = describe(folder)
        self.dim: int = info["dim"]
        self._torch = torch
        self._tokenizer = tokenizer(folder, info)
        self._run: Any = None
        self.compiled = False
        if compiled:
            try:
                path = compiled_package(folder, cache or default_cache())
                self._run = torch._inductor.aoti_load_package(str(path))
                self.compiled = True
            except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
                detail = getattr(exc, "stderr", b"") or b""
                log.warning(
                    "bf16 encoder: compiling failed (%s %s); running uncompiled",
                    type(exc).__name__,
                    detail.decode(errors="replace")[-500:] if detail else exc,
                )
        if self._run is None:
            self._run = _pooled(torch, _load(folder))
        # torch modules are not safe to call from two threads at once.
        self._lock = threading.Lock()

    def encode(self, texts: list[str], batch_size: int = 8, threads: int = 1) -> np.ndarray:
        """Texts sorted by length and cut into batches, each padded to its
        longest; rows come back in input order. ``threads``: torch's."""
        torch = self._torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        size = max(1, min(batch_size, MAX_BATCH))
        with self._lock, torch.inference_mode():
            torch.set_num_threads(max(1, threads))
            for at, ids, mask in padded_batches(self._tokenizer, texts, size):
                vectors = self._run(torch.from_numpy(ids), torch.from_numpy(mask))
                out[at] = vectors.float().numpy()
        return out


def main() -> None:
    compile_package(Path(sys.argv[1]), Path(sys.argv[2]))


if __name__ == "__main__":
    main()
