"""Bulk encoding on the CPU with bf16 matrix products (``cairn reembed
--precision bf16``).

Why: a re-embedded row is ≈ 230 word pieces, where the time is matrix
products, which fp32 cannot do faster; bf16 ones (``avx512_bf16`` cores)
can. The model stays fp32 and runs under ``torch.autocast(bfloat16)``
(linear layers and attention's products in bf16 with fp32 sums; layer norm,
softmax, pooling and normalisation in fp32), compiled by ``torch.compile``
(inductor): 2.04x ONNX Runtime fp32's rows per CPU second on one thread, and
every evaluation set's vector MRR@10 within 0.0004 of fp32's with the corpus
in bf16 and the queries in fp32 (docs/benchmarks.md, "Encoder precisions for
bulk re-embedding"). Without the compiler it is 1.7-1.8x.

Queries stay on ONNX Runtime fp32 (the Embedder): this is for bulk only.
Tokenising, truncation and batching are ``OnnxModel``'s. The compiler needs
a C++ compiler on the machine and compiles on the first call (about a
minute of CPU; its cache makes later processes quicker).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from embeddings.onnx_model import describe, padded_batches, tokenizer

log = logging.getLogger("cairn.embeddings")


class Bf16Model:
    """The model of a local sentence-transformers folder (mean pooling, as
    ``onnx_model.describe`` checks) under bf16 autocast; ``encode`` returns
    L2-normalised float32 rows."""

    def __init__(self, folder: Path, compiled: bool = True) -> None:
        import torch
        from transformers import AutoModel

        info = describe(folder)
        self.dim: int = info["dim"]
        self._torch = torch
        model = AutoModel.from_pretrained(str(folder), attn_implementation="sdpa")
        model.eval()
        self._eager: Any = model
        self.compiled = compiled
        if compiled:
            import torch._inductor.config as inductor

            # Freezing folds the weights into the compiled graph (and lets
            # inductor pre-pack them for the bf16 products).
            inductor.freezing = True
            model = torch.compile(model, dynamic=True)
        self._model: Any = model
        self._tokenizer = tokenizer(folder, info)
        # torch modules are not safe to call from two threads at once.
        self._lock = threading.Lock()

    def encode(self, texts: list[str], batch_size: int = 64, threads: int = 1) -> np.ndarray:
        """Texts sorted by length and cut into batches, each padded to its
        longest; rows come back in input order. ``threads``: torch's."""
        torch = self._torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        with self._lock:
            torch.set_num_threads(max(1, threads))
            for at, ids, mask in padded_batches(self._tokenizer, texts, batch_size):
                ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
                hidden = self._forward(ids_t, mask_t)
                weights = mask_t.unsqueeze(-1).float()
                mean = (hidden.float() * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
                out[at] = torch.nn.functional.normalize(mean, p=2.0, dim=1).numpy()
        return out

    def _forward(self, ids: Any, mask: Any) -> Any:
        """The last hidden state under bf16 autocast. Should the compiler
        fail (no C++ compiler on the machine, say), this process goes on
        with the model as it is: the same vectors, 1.7-1.8x instead of 2x."""
        torch = self._torch
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            args = {
                "input_ids": ids,
                "attention_mask": mask,
                "token_type_ids": torch.zeros_like(ids),
            }
            if self.compiled:
                try:
                    return self._model(**args).last_hidden_state
                except Exception as exc:
                    log.warning("bf16 encoder: compiling failed (%s); running uncompiled", exc)
                    self.compiled = False
                    self._model = self._eager
            return self._model(**args).last_hidden_state
