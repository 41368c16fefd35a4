"""Encoder precisions for bulk re-embedding (issue 36): which one is >= 2x
ONNX Runtime fp32's rows per CPU second on one thread and keeps every
evaluation set's vector-half MRR@10 within 0.005 of fp32's?

    .venv/bin/python -m benchmarks.precision_trial build NAME...
    .venv/bin/python -m benchmarks.precision_trial screen NAME... [--rounds 2]
    .venv/bin/python -m benchmarks.precision_trial sets NAME [--queries fp32|same]
    .venv/bin/python -m benchmarks.precision_trial sensitivity

``screen``: rows per CPU second (the encoder_bench shape: texts of 300-1,500
characters, 256-text calls, one thread), interleaved with fp32 in every
round, and the smallest cosine to fp32 over real texts of the evaluation
sets. ``sets``: the vector half's test MRR@10 of every group with the
documents in NAME and the queries in fp32 (what a bulk-only precision gives)
or in NAME too, against fp32's (the same computation as ``ranking_eval``'s
vector half, vectors cached under the ranking benchmark's folder).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# Threads of the evaluation sets' embedding: torch's OpenMP threads spin at
# their barriers, which stalls them on cores that other work shares.
THREADS = int(os.environ.get("CAIRN_PRECISION_TRIAL_THREADS", "1"))
WORK = Path(os.environ.get("CAIRN_PRECISION_TRIAL_DIR", "/tmp/cairn-precision-trial"))
LAYERS = 6
PROJECTIONS = (
    "attention/self/query",
    "attention/self/key",
    "attention/self/value",
    "attention/output/dense",
    "intermediate/dense",
    "output/dense",
)


def folder() -> Path:
    from embeddings.encoder import resolve

    return Path(resolve("all-MiniLM-L6-v2"))


def fp32_graph() -> Path:
    from embeddings.onnx_model import exported

    return exported(folder(), WORK / "cache", "fp32")


def matmul(layer: int, projection: str) -> str:
    return f"/inner/encoder/layer.{layer}/{projection}/MatMul"


# --------------------------------------------------------------------------- texts


def calibration_texts(n: int = 128) -> list[str]:
    """Generated technical texts of re-embedding length (deterministic)."""
    from benchmarks.encoder_bench import long_texts

    return long_texts(n, seed=4242)


def real_texts(n: int = 300) -> list[str]:
    """Documents of every evaluation set (every k-th), the service's text."""
    from benchmarks.ranking.evalset import embed_text
    from benchmarks.ranking.hybrid import SETS, load

    out: list[str] = []
    per = n // len(SETS)
    for name in SETS:
        docs = load(name).docs
        step = max(1, len(docs) // per)
        out += [embed_text(d) for d in docs[::step][:per]]
    return out


def feeds(texts: list[str], batch: int = 16) -> list[dict[str, np.ndarray]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder() / "tokenizer.json"))
    tok.enable_truncation(max_length=256)
    tok.no_padding()
    enc = tok.encode_batch(texts)
    out = []
    for i in range(0, len(enc), batch):
        part = enc[i : i + batch]
        width = max(len(e.ids) for e in part)
        ids = np.zeros((len(part), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, e in enumerate(part):
            ids[r, : len(e.ids)] = e.ids
            mask[r, : len(e.ids)] = 1
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
    return out


# --------------------------------------------------------------------------- variants


def _dynamic(**kw: Any) -> Callable[[Path, Path], None]:
    def build(src: Path, out: Path) -> None:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        kw.setdefault("weight_type", QuantType.QInt8)
        kw.setdefault("extra_options", {"DefaultTensorType": onnx.TensorProto.FLOAT})
        quantize_dynamic(str(src), str(out), **kw)

    return build


def _static(
    per_channel: bool = True,
    activation: str = "QUInt8",
    method: str = "MinMax",
    symmetric: bool = False,
    exclude: tuple[str, ...] = (),
) -> Callable[[Path, Path], None]:
    def build(src: Path, out: Path) -> None:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quantize_static,
        )

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.items = iter(feeds(calibration_texts(), batch=8))

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.items, None)

        quantize_static(
            str(src),
            str(out),
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=getattr(QuantType, activation),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            nodes_to_exclude=list(exclude),
            calibrate_method=getattr(CalibrationMethod, method),
            extra_options={"ActivationSymmetric": symmetric, "MatMulConstBOnly": True},
        )

    return build


def _optimized(then: Callable[[Path, Path], None] | None) -> Callable[[Path, Path], None]:
    def build(src: Path, out: Path) -> None:
        from onnxruntime.transformers.optimizer import optimize_model

        opt = optimize_model(str(src), model_type="bert", num_heads=12, hidden_size=384)
        print("fused:", opt.get_fused_operator_statistics(), flush=True)
        if then is None:
            opt.save_model_to_file(str(out))
            return
        mid = out.with_suffix(".opt.onnx")
        opt.save_model_to_file(str(mid))
        then(mid, out)

    return build


FFN_OUT = tuple(matmul(i, "output/dense") for i in range(LAYERS))
MM = {"op_types_to_quantize": ["MatMul"]}
VARIANTS: dict[str, Callable[[Path, Path], None]] = {
    "dyn": _dynamic(),  # today's int8
    "dyn-mm": _dynamic(**MM),
    "dyn-mm-pc": _dynamic(per_channel=True, **MM),
    "dyn-mm-pc-rr": _dynamic(per_channel=True, reduce_range=True, **MM),
    "dyn-mm-pc-xffn": _dynamic(per_channel=True, nodes_to_exclude=list(FFN_OUT), **MM),
    "opt": _optimized(None),
    "opt-dyn-pc": _optimized(
        _dynamic(per_channel=True, op_types_to_quantize=["MatMul", "Attention"])
    ),
    "opt-dyn-mm-pc": _optimized(_dynamic(per_channel=True, **MM)),
    "qdq-u8": _static(),
    "qdq-s8sym": _static(activation="QInt8", symmetric=True),
    "qdq-u8-pct": _static(method="Percentile"),
    "qdq-u8-ent": _static(method="Entropy"),
}


def graph(name: str) -> Path:
    if name == "fp32":
        return fp32_graph()
    out = WORK / f"{name}.onnx"
    if not out.is_file():
        t0 = time.perf_counter()
        VARIANTS[name](fp32_graph(), out)
        print(f"built {name} in {time.perf_counter() - t0:.0f} s", flush=True)
    return out


# --------------------------------------------------------------------------- encoders


class Bf16Torch:
    """all-MiniLM-L6-v2 through sentence-transformers with the linear layers
    and matrix products in bf16 (autocast) or the whole model in bf16."""

    def __init__(self, whole: bool) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(1)
        self.torch = torch
        self.whole = whole
        self.st = SentenceTransformer(str(folder()), device="cpu")
        if whole:
            self.st = self.st.to(torch.bfloat16)

    def encode(self, texts: list[str], batch_size: int = 64, threads: int = 1) -> np.ndarray:
        torch = self.torch
        torch.set_num_threads(threads)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not self.whole):
            v = self.st.encode(
                texts,
                batch_size=batch_size,
                convert_to_tensor=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
        v = v.float()
        v = torch.nn.functional.normalize(v, dim=1)
        return np.ascontiguousarray(v.numpy(), dtype=np.float32)


class HfTorch:
    """The transformer straight from ``transformers`` (no sentence-transformers
    around it), tokenised, sorted and padded as ``OnnxModel`` does; the
    matrix products in bf16 (the whole model in bf16, or autocast), mean
    pooling and normalisation in fp32; optionally ``torch.compile``d."""

    def __init__(self, whole: bool, compiled: bool) -> None:
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoModel

        torch.set_num_threads(1)
        self.torch = torch
        self.whole = whole
        dtype = torch.bfloat16 if whole else torch.float32
        model = AutoModel.from_pretrained(str(folder()), attn_implementation="sdpa", dtype=dtype)
        model.eval()
        if compiled:
            import torch._inductor.config as inductor

            inductor.freezing = True
            model = torch.compile(model, dynamic=True)
        self.model = model
        self.tok = Tokenizer.from_file(str(folder() / "tokenizer.json"))
        self.tok.enable_truncation(max_length=256)
        self.tok.no_padding()

    def encode(self, texts: list[str], batch_size: int = 64, threads: int = 1) -> np.ndarray:
        torch = self.torch
        torch.set_num_threads(threads)
        enc = self.tok.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(enc[i].ids))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            at = order[start : start + batch_size]
            width = max(len(enc[i].ids) for i in at)
            ids = torch.zeros((len(at), width), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, i in enumerate(at):
                ids[r, : len(enc[i].ids)] = torch.tensor(enc[i].ids)
                mask[r, : len(enc[i].ids)] = 1
            with (
                torch.inference_mode(),
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=not self.whole),
            ):
                hidden = self.model(
                    input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)
                ).last_hidden_state
            hidden = hidden.float()
            m = mask.unsqueeze(-1).float()
            mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            out[at] = torch.nn.functional.normalize(mean, dim=1).numpy()
        return out


class ServiceEncoder:
    """The service's own ``Encoder`` at a precision (``service-bf16``: what
    ``cairn reembed --precision bf16`` runs: its compiled package, and its
    own batches whatever batch size the caller names)."""

    def __init__(self, precision: str) -> None:
        from embeddings.encoder import Encoder

        self.encoder = Encoder(device="cpu", precision=precision, cache_dir=WORK / "cache")

    def encode(self, texts: list[str], batch_size: int = 64, threads: int = 1) -> np.ndarray:
        return self.encoder.encode(texts, threads=threads)


def encoder(name: str) -> Any:
    """An object with ``encode(texts, batch_size, threads)`` for ``name``."""
    if name.startswith("service-"):
        return ServiceEncoder(name.removeprefix("service-"))
    if name == "bf16-autocast":
        return Bf16Torch(whole=False)
    if name == "bf16-whole":
        return Bf16Torch(whole=True)
    if name.startswith("hf-bf16"):
        return HfTorch(whole="autocast" not in name, compiled="compile" in name)
    if name == "torch-fp32":
        from embeddings.encoder import Encoder

        return Encoder(device="cpu", backend="torch", threads=1)
    return onnx_at(graph(name))


def onnx_at(path: Path) -> Any:
    """The service's ``OnnxModel`` (one thread, its tokenising and batching)
    on the graph at ``path``."""
    import embeddings.onnx_model as om

    original = om.exported
    om.exported = lambda *_a, **_k: path
    try:
        return om.OnnxModel(folder(), WORK / "cache")
    finally:
        om.exported = original


# --------------------------------------------------------------------------- screen


def screen(names: list[str], rounds: int, rows: int, cos_n: int) -> dict[str, Any]:
    from benchmarks.encoder_bench import long_texts, per_s

    texts = long_texts(rows)
    check = real_texts(cos_n)
    encoders = {n: encoder(n) for n in ["fp32", *names]}
    ref = encoders["fp32"].encode(check, batch_size=64, threads=1)
    cosine = {}
    for n, e in encoders.items():
        v = e.encode(check, batch_size=64, threads=1)
        c = (v * ref).sum(1)
        cosine[n] = {
            "min": float(c.min()),
            "p1": float(np.percentile(c, 1)),
            "mean": float(c.mean()),
        }
        print(f"cosine {n}: {cosine[n]}", flush=True)
    speed: dict[str, list[float]] = {n: [] for n in encoders}
    loads = [os.getloadavg()[0]]
    for r in range(rounds):
        for n, e in encoders.items():
            _, cpu = per_s(e, texts, 256, 1, False)
            speed[n].append(cpu)
            print(f"round {r + 1} {n}: {cpu:.2f} rows/CPU s", flush=True)
        loads.append(os.getloadavg()[0])
    base = statistics.median(speed["fp32"])
    result = {
        n: {
            "rows_per_cpu_s": statistics.median(s),
            "ratio": statistics.median(s) / base,
            "rounds": s,
            "cosine": cosine[n],
        }
        for n, s in speed.items()
    }
    print(json.dumps({"loads": loads, "result": result}, indent=1), flush=True)
    return result


# --------------------------------------------------------------------------- sets

GROUPS = [
    ("docs", None),
    ("docs", "paraphrase"),
    ("docs", "keyword"),
    ("docs", "handwritten"),
    ("code", None),
    ("params", None),
]


def vectors(name: str, label: str, texts: list[str]) -> np.ndarray:
    import hashlib

    digest = hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:16]
    path = WORK / "vectors" / f"{label}-{digest}-{name}.npy"
    shared_suffix = {"fp32": "", "dyn": "-int8"}
    if name in shared_suffix:  # the ranking benchmark's own cache (fp32, int8), if there
        from benchmarks.ranking.evalset import STATE

        shared = STATE / f"{label}-{digest}{shared_suffix[name]}.npy"
        if shared.exists():
            return np.load(shared)
    if path.exists():
        return np.load(path)
    e = encoder(name)
    t0 = time.perf_counter()
    v = np.concatenate(
        [
            e.encode(texts[i : i + 512], batch_size=64, threads=THREADS)
            for i in range(0, len(texts), 512)
        ]
    )
    print(f"embedded {len(texts)} {label} ({name}) in {time.perf_counter() - t0:.0f} s", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, v)
    return v


def mrr(docs_in: str, queries_in: str) -> dict[str, float]:
    from benchmarks.ranking.evalset import NONSENSE, embed_text, keys_of
    from benchmarks.ranking.hybrid import CANDIDATES, SETS, key, load, members, score
    from benchmarks.ranking.vectors import run_vector

    out: dict[str, float] = {}
    for set_name in SETS:
        s = load(set_name)
        d = vectors(docs_in, f"{set_name}-docs", [embed_text(x) for x in s.docs])
        q = vectors(queries_in, f"{set_name}-queries", [x.text for x in s.queries] + NONSENSE)
        ids = np.asarray([key(x["id"]) for x in s.docs], dtype=np.int64)
        ranked = [keys_of(h) for h in run_vector(d, ids, q, CANDIDATES)]
        for g_set, style in GROUPS:
            if g_set == set_name:
                label = g_set if style is None else style
                out[label] = score(ranked, s, members(s, style, "test")).mrr
    return out


def sets(name: str, queries: str) -> dict[str, Any]:
    base = mrr("fp32", "fp32")
    got = mrr(name, "fp32" if queries == "fp32" else name)
    delta = {k: got[k] - base[k] for k in base}
    result = {
        "fp32": base,
        name: got,
        "delta": delta,
        "passes": all(abs(x) < 0.005 for x in delta.values()),
    }
    print(json.dumps(result, indent=1), flush=True)
    return result


# --------------------------------------------------------------------------- sensitivity


def sensitivity(n: int) -> None:
    """For each weight MatMul, the mean and smallest cosine to fp32 when only
    it is left in fp32 (all other MatMuls dynamic int8, per channel)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    check = real_texts(n)
    ref = encoder("fp32").encode(check, batch_size=64, threads=2)
    rows = []
    for layer in range(LAYERS):
        for p in PROJECTIONS:
            node = matmul(layer, p)
            out = WORK / "sens.onnx"
            quantize_dynamic(
                str(fp32_graph()),
                str(out),
                weight_type=QuantType.QInt8,
                per_channel=True,
                nodes_to_exclude=[node],
                **MM,
            )
            c = (onnx_at(out).encode(check, batch_size=64, threads=2) * ref).sum(1)
            rows.append((node, float(c.mean()), float(c.min())))
            print(f"{node}: mean {c.mean():.5f} min {c.min():.5f}", flush=True)
    print(json.dumps(rows, indent=1))


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("what", choices=["build", "screen", "sets", "sensitivity"])
    p.add_argument("names", nargs="*")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--cos", type=int, default=300)
    p.add_argument("--queries", choices=["fp32", "same"], default="fp32")
    a = p.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    if a.what == "build":
        for n in a.names:
            graph(n)
    elif a.what == "screen":
        screen(a.names, a.rounds, a.rows, a.cos)
    elif a.what == "sets":
        for n in a.names:
            sets(n, a.queries)
    else:
        sensitivity(a.cos)


if __name__ == "__main__":
    main()
