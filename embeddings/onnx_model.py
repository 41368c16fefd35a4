"""The sentence-transformers model as an ONNX graph, run by ONNX Runtime.

Why: on the CPU most of a short query's time through sentence-transformers is
PyTorch's per-call overhead; the same graph under ONNX Runtime gives the same
vectors (cosine 1.0) in about a third of the time and keeps torch out of the
Embedder's process (docs/decisions/search-at-scale.md, "The Embedder on ONNX Runtime").

The graph is exported from the model's local weights on first use with
``torch.onnx.export(dynamo=False)`` (the TorchScript exporter: the dynamo one
needs ``onnxscript``, which we do not install) and cached under
``<cache>/<model>-<key>/model.onnx``, the key the hash of the model
folder's weights (their contents), torch, the exporter version and the
opset; it is never downloaded.
The export runs in a child process (``python -m embeddings.onnx_model``) so
the serving process never imports torch: the Embedder replica stays small (a
process that has loaded torch already exports in place).

The graph holds the transformer, the mean pooling over the attention mask
and the L2 normalisation, as sentence-transformers computes them; tokenising
is the model's own ``tokenizer.json`` through the ``tokenizers`` fast
tokenizer, truncated at the model's ``max_seq_length``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

# Bump when the exported graph changes (inputs, pooling, opset, options).
EXPORTER_VERSION = "1"
OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
PRECISIONS = ("fp32", "int8")


class NotExportable(Exception):
    """The model is not a local sentence-transformers folder with a fast
    tokenizer and mean pooling: it runs on PyTorch instead."""


def describe(folder: Path) -> dict[str, Any]:
    """What the export needs to know of a model folder, or NotExportable."""
    if not folder.is_dir():
        raise NotExportable(f"{folder} is no local folder")
    if not (folder / "tokenizer.json").is_file():
        raise NotExportable("no tokenizer.json (fast tokenizer)")
    modules = (
        json.loads((folder / "modules.json").read_text()) if _has(folder, "modules.json") else []
    )
    pooling = next((m for m in modules if m.get("type", "").endswith(".Pooling")), None)
    if pooling is None:
        raise NotExportable("no pooling module")
    pool = json.loads((folder / pooling["path"] / "config.json").read_text())
    # sentence-transformers up to 5 wrote one flag per mode
    # ("pooling_mode_mean_tokens": true); 6 writes "pooling_mode": "mean"
    # (what a model tuned here is saved with).
    mode = pool.get("pooling_mode")
    if mode is not None:
        modes = [mode] if isinstance(mode, str) else list(mode)
        if modes != ["mean"]:
            raise NotExportable(f"pooling {modes} (only mean pooling is exported)")
    else:
        flags = [k for k, v in pool.items() if k.startswith("pooling_mode") and v]
        if flags != ["pooling_mode_mean_tokens"]:
            raise NotExportable(f"pooling {flags} (only mean pooling is exported)")
    max_len = 512
    found = None
    if _has(folder, "sentence_bert_config.json"):
        st = json.loads((folder / "sentence_bert_config.json").read_text())
        found = st.get("max_seq_length")
    if not found and _has(folder, "tokenizer_config.json"):
        # sentence-transformers 6 saves the length as the tokenizer's
        # model_max_length (a model tuned here): without it the graph would
        # read 512 tokens where PyTorch reads 256. Tokenizers with no limit
        # say a huge number.
        limit = json.loads((folder / "tokenizer_config.json").read_text()).get("model_max_length")
        found = limit if isinstance(limit, int) and limit <= 100_000 else None
    max_len = int(found or max_len)
    dim = pool.get("word_embedding_dimension") or pool.get("embedding_dimension")
    return {"max_seq_length": max_len, "dim": int(dim)}


def _has(folder: Path, name: str) -> bool:
    return (folder / name).is_file()


def cache_key(folder: Path) -> str:
    """Names the exported graph: the SHA-256 of the model folder's weights and
    configuration files (their contents: a tuned model unpacked on another
    node, or in another folder, finds the same export; one retrained in place
    does not), torch's version, the exporter's version, the opset."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in {".json", ".safetensors", ".bin", ".txt"}:
            h.update(f"{path.relative_to(folder)}:{file_digest(path)}".encode())
    h.update(f"torch={_torch_version()}|exporter={EXPORTER_VERSION}|opset={OPSET}".encode())
    return h.hexdigest()[:16]


# (path, size, mtime) -> the file's SHA-256: a replica hashes the ~90 MB of
# weights once (about 0.15 s), not at every encoder it builds.
_digests: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    found = _digests.get(key)
    if found is None:
        with path.open("rb") as f:
            found = _digests[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return found


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "none"


def default_cache() -> Path:
    """``$CAIRN_MODEL_CACHE_DIR``, else ``$CAIRN_STATE_DIR/models`` (the state
    folder, ``.cairn`` by default): serve_app.settings.Settings.model_cache_path."""
    shared = os.environ.get("CAIRN_MODEL_CACHE_DIR")
    if shared:
        return Path(shared).expanduser().resolve()
    return Path(os.environ.get("CAIRN_STATE_DIR") or ".cairn").expanduser().resolve() / "models"


_export_lock = threading.Lock()


def in_child(module: str, folder: Path, out: Path) -> None:
    """``python -m module folder out`` in a child process, offline; raises
    ``subprocess.CalledProcessError`` (its stderr kept) when it fails."""
    subprocess.run(
        [sys.executable, "-m", module, str(folder), str(out)],
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def exported(folder: Path, cache: Path, precision: str = "fp32") -> Path:
    """The cached ONNX graph of the model in ``folder``, exported (in a child
    process) on first use; int8 is the fp32 graph dynamically quantised."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}")
    # Named by the contents alone, not the folder's name: the graph ``cairn
    # tune``'s gate exported from its checkpoint is the one the Embedder
    # finds for the version unpacked under versions/<sha256>/.
    target = cache / f"graph-{cache_key(folder)}"
    fp32 = target / "model.onnx"
    out = fp32 if precision == "fp32" else target / "model-int8.onnx"
    if out.is_file():
        return out
    with _export_lock:
        if not fp32.is_file():
            target.mkdir(parents=True, exist_ok=True)
            # Replicas starting together (a node's, or a cluster's on a shared
            # cache folder) wait for one export instead of each exporting.
            with open(target / ".export.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not fp32.is_file():
                    # Torch is loaded in the child, never in a process that
                    # has not loaded it already (a serving replica); one that
                    # has (``cairn tune``'s gate) exports in place, sparing
                    # a child's start and its import of torch. The file is
                    # written aside and renamed, so a reader never sees half
                    # a graph.
                    if "torch" in sys.modules:
                        _export_quietly(folder, fp32)
                    else:
                        in_child("embeddings.onnx_model", folder, fp32)
        if precision == "int8" and not out.is_file():
            from onnxruntime.quantization import QuantType, quantize_dynamic

            with tempfile.NamedTemporaryFile(dir=target, suffix=".onnx", delete=False) as tmp:
                aside = Path(tmp.name)
            quantize_dynamic(str(fp32), str(aside), weight_type=QuantType.QInt8)
            os.replace(aside, out)
    return out


def _export_quietly(folder: Path, out: Path) -> None:
    """``export`` in this process, without the tracer's warnings and the
    weights' progress bar on its stderr (a child's stderr is kept only
    when it fails)."""
    import warnings

    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export(folder, out)
    finally:
        if bar:
            hf_logging.enable_progress_bar()


def export(folder: Path, out: Path) -> None:
    """Export the transformer + mean pooling + normalisation to ``out``."""
    import torch
    from transformers import AutoModel

    # Eager attention: the SDPA path traces the mask away when the example
    # batch has none, which would bake "no padding" into the graph.
    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager")
    model.eval()

    class Pooled(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            summed = (hidden * mask).sum(1)
            mean = summed / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    # A padded example batch, so the mask's path is traced.
    ids = torch.ones(2, 8, dtype=torch.long)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    types = torch.zeros(2, 8, dtype=torch.long)
    axes = {name: {0: "batch", 1: "tokens"} for name in INPUTS}
    axes["embedding"] = {0: "batch"}
    aside = out.with_name(f".{out.name}.{os.getpid()}")
    with torch.no_grad():
        torch.onnx.export(
            Pooled(model),
            (ids, mask, types),
            str(aside),
            input_names=list(INPUTS),
            output_names=["embedding"],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    os.replace(aside, out)


class OnnxModel:
    """One ONNX Runtime session on one thread; ``encode`` returns
    L2-normalised float32 rows.

    A call on several threads runs its batches at once on that same session,
    one batch per thread (ONNX Runtime sessions may be run from several
    threads; each run computes on its caller's thread). One session, not one
    per thread count: each session holds its own copy of the weights, and a
    second one cost the Embedder replica ~110 MiB (docs/benchmarks.md,
    "Encoder: ONNX Runtime against PyTorch")."""

    def __init__(self, folder: Path, cache: Path | None = None, precision: str = "fp32") -> None:
        import onnxruntime as ort

        info = describe(folder)
        self.dim: int = info["dim"]
        self.path = exported(folder, cache or default_cache(), precision)
        self._tokenizer = tokenizer(folder, info)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(self.path), options, providers=["CPUExecutionProvider"]
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._lock = threading.Lock()

    def _workers(self, threads: int) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pool_size < threads:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)
                self._pool = ThreadPoolExecutor(threads, thread_name_prefix="onnx-encode")
                self._pool_size = threads
            return self._pool

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        result: np.ndarray = self._session.run(["embedding"], feed)[0]
        return result

    def encode(self, texts: list[str], batch_size: int = 64, threads: int = 1) -> np.ndarray:
        """Texts sorted by length and cut into batches (as sentence-transformers
        does), each padded to its longest; rows come back in input order.
        With ``threads`` > 1 the batches (at most ``batch_size`` texts, and
        small enough that every thread gets one) run at once."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        threads = max(1, threads)
        size = max(1, min(batch_size, -(-len(texts) // threads)))
        batches = padded_batches(self._tokenizer, texts, size)
        if threads == 1 or len(batches) == 1:
            for at, ids, mask in batches:
                out[at] = self._run(ids, mask)
            return out
        pool = self._workers(threads)
        results = pool.map(lambda b: self._run(b[1], b[2]), batches)
        for (at, _, _), vectors in zip(batches, results, strict=True):
            out[at] = vectors
        return out


def tokenizer(folder: Path, info: dict[str, Any]) -> Any:
    """The model's fast tokenizer, truncating at its ``max_seq_length``
    (``describe``'s ``info``), padding left to ``padded_batches``."""
    from tokenizers import Tokenizer

    found = Tokenizer.from_file(str(folder / "tokenizer.json"))
    found.enable_truncation(max_length=info["max_seq_length"])
    found.no_padding()
    return found


def padded_batches(
    tokenizer: Any, texts: list[str], size: int
) -> list[tuple[list[int], np.ndarray, np.ndarray]]:
    """``texts`` tokenised, sorted by length (longest first, as
    sentence-transformers does) and cut into batches of at most ``size``:
    each batch's text positions, token ids and attention mask, padded to
    its longest text."""
    encodings = tokenizer.encode_batch(texts)
    order = sorted(range(len(texts)), key=lambda i: -len(encodings[i].ids))
    batches = []
    for start in range(0, len(order), max(1, size)):
        at = order[start : start + size]
        width = max(len(encodings[i].ids) for i in at)
        ids = np.zeros((len(at), width), dtype=np.int64)
        mask = np.zeros((len(at), width), dtype=np.int64)
        for row, i in enumerate(at):
            e = encodings[i]
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        batches.append((at, ids, mask))
    return batches


def main() -> None:
    folder, out = Path(sys.argv[1]), Path(sys.argv[2])
    export(folder, out)


if __name__ == "__main__":
    main()
