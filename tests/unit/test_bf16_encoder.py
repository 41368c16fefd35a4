"""bf16 bulk encoding on the CPU (``cairn reembed --precision bf16``) agrees
with the fp32 ONNX graph the Embedder encodes queries with, and its compiled
package is made once per cache and CPU.

The real packaged model is checked under bf16 uncompiled; the compiled path
(export, AOTInductor, the package, its lock and its loading) runs on a copy of
it cut to its first transformer layer, the same graph with a sixth of the
layers (the compiling test took 54 s alone, against 84 s with the whole model:
export, inductor and the C++ compiler have a fixed cost). reembed_bench runs
the whole model compiled (docs/benchmarks.md, "Encoder precisions for bulk
re-embedding")."""

from __future__ import annotations

import fcntl
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from embeddings.encoder import Encoder
from embeddings.reembed import ReembedOptions
from tests.tinymodel import one_layer_copy

from .test_onnx_encoder import TEXTS

# The smallest cosine to fp32 measured over 5,188 documents of the docs
# evaluation set was 0.99997 (docs/benchmarks.md, "Encoder precisions for
# bulk re-embedding"); a broken path (padding counted, no mask) gives < 0.95.
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bf16-cache")


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packaged model's folder with only its first transformer layer:
    the configuration says one layer and the weights of the others are left out."""
    return one_layer_copy(tmp_path_factory.mktemp("models") / "minilm-one-layer")


def test_bf16_vectors_match_fp32(one_layer: Path, cache: Path) -> None:
    bf16 = Encoder(str(one_layer), device="cpu", precision="bf16", cache_dir=cache)
    assert bf16.backend == "torch" and bf16.dim == 384
    assert bf16._bf16.compiled  # the package was compiled (a C++ compiler is here)
    onnx = Encoder(str(one_layer), device="cpu", backend="onnx", cache_dir=cache)
    reference = onnx.encode(TEXTS)
    # Batches of the default size, one padded batch of every text, batches
    # of 3 on 2 threads, and one text at a time (a batch of one).
    for vectors in (
        bf16.encode(TEXTS),
        bf16.encode(TEXTS, batch_size=64),
        bf16.encode(TEXTS, batch_size=3, threads=2),
        np.vstack([bf16.encode([t]) for t in TEXTS]),
    ):
        assert vectors.shape == reference.shape and vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        cosine = (vectors * reference).sum(axis=1)
        assert cosine.min() >= MIN_COSINE, cosine
    assert bf16.encode([]).shape == (0, 384)
    assert bf16.encode([""]).shape == (1, 384)  # two tokens, the shortest input


def test_a_second_process_loads_the_package_without_compiling(
    one_layer: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from embeddings import bf16_model

    folder = one_layer
    first = Encoder(str(folder), device="cpu", precision="bf16", cache_dir=cache)
    package = bf16_model.package_path(folder, cache)
    assert package.is_file()
    written = package.stat().st_mtime_ns

    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(bf16_model.subprocess, "run", no_compile)
    again = bf16_model.Bf16Model(folder, cache=cache)
    assert again.compiled and package.stat().st_mtime_ns == written
    assert np.array_equal(again.encode(TEXTS), first.encode(TEXTS))


def test_a_process_waits_for_the_compile_in_progress(
    one_layer: Path, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process holds the compile lock, a second one waits and
    then takes the package that one wrote, instead of compiling it again."""
    from embeddings import bf16_model

    folder = one_layer
    Encoder(str(folder), device="cpu", precision="bf16", cache_dir=cache)  # made once
    built = bf16_model.package_path(folder, cache)
    other = tmp_path / "other-cache"
    target = bf16_model.package_path(folder, other)
    target.parent.mkdir(parents=True)
    compiles: list[object] = []
    monkeypatch.setattr(bf16_model.subprocess, "run", lambda *a, **k: compiles.append(a))
    found: list[Path] = []
    with open(target.parent / ".bf16-compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # "another process" compiling
        waiter = threading.Thread(
            target=lambda: found.append(bf16_model.compiled_package(folder, other))
        )
        waiter.start()
        time.sleep(0.5)
        assert not found and waiter.is_alive()  # waiting on the lock
        shutil.copy(built, target)  # the other process's package lands
    waiter.join(timeout=10)
    assert found == [target] and not compiles


def test_a_failed_compile_runs_uncompiled(
    one_layer: Path, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No working C++ compiler (inductor's ``CXX``): found before the
    compiling child starts (it would export the model first, most of the
    compile's CPU), no package is left, and the model runs eagerly."""
    from embeddings import bf16_model

    monkeypatch.setenv("CXX", "/bin/false")
    started: list[list[str]] = []
    run = bf16_model.subprocess.run

    def recorded(args: list[str], **kwargs: Any) -> Any:
        started.append(list(args))
        return run(args, **kwargs)

    monkeypatch.setattr(bf16_model.subprocess, "run", recorded)
    folder = one_layer
    model = bf16_model.Bf16Model(folder, cache=tmp_path)
    assert not model.compiled
    assert started == [["/bin/false", "--version"]]
    assert not bf16_model.package_path(folder, tmp_path).exists()
    reference = Encoder(str(folder), device="cpu", backend="onnx", cache_dir=cache).encode(TEXTS)
    assert (model.encode(TEXTS) * reference).sum(axis=1).min() >= MIN_COSINE


def test_bf16_uncompiled_gives_the_same_vectors(tmp_path: Path) -> None:
    """The whole packaged model under bf16, on the path a process takes with
    ``compiled=False``."""
    from embeddings.bf16_model import Bf16Model
    from embeddings.config import DEFAULT_MODEL
    from embeddings.encoder import resolve

    eager = Bf16Model(Path(resolve(DEFAULT_MODEL)), compiled=False)
    reference = Encoder(device="cpu", backend="onnx").encode(TEXTS)
    cosine = (eager.encode(TEXTS, batch_size=4) * reference).sum(axis=1)
    assert cosine.min() >= MIN_COSINE, cosine


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="precision"):
        ReembedOptions(database_url="postgresql://x/y", precision="fp16")
    with pytest.raises(ValueError, match="precision"):
        Encoder(device="cpu", precision="fp16")


def test_auto_is_bf16_only_where_the_cpu_does_bf16_products(one_layer: Path, cache: Path) -> None:
    from embeddings.cpu import cpu_has_bf16
    from embeddings.encoder import pick_precision

    native = cpu_has_bf16()
    assert pick_precision("auto", "cpu") == ("bf16" if native else "fp32")
    assert pick_precision("auto", "cuda") == "fp32"
    for named in ("fp32", "int8", "bf16"):
        assert pick_precision(named, "cpu") == named
    encoder = Encoder(str(one_layer), device="cpu", precision="auto", cache_dir=cache)
    assert encoder.precision == ("bf16" if native else "fp32")
    assert (encoder._bf16 is not None) == native


def test_bf16_of_a_model_it_cannot_run_is_fp32(one_layer: Path, tmp_path: Path) -> None:
    """A model folder without the sentence-transformers modules (no pooling
    to build the bf16 model from) is encoded on its usual fp32 path (the
    one-layer copy: a sixth of the whole model's weights to copy and load)."""
    folder = tmp_path / "plain-model"
    shutil.copytree(one_layer, folder)
    (folder / "modules.json").unlink()
    encoder = Encoder(str(folder), device="cpu", precision="bf16", cache_dir=tmp_path)
    assert (encoder.precision, encoder.backend, encoder._bf16) == ("fp32", "torch", None)
    assert encoder.encode(TEXTS[:2]).shape == (2, 384)
