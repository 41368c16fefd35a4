"""A one-layer copy of the packaged model for tests that need a real model's
graph but not its cost: the same tokenizer, embeddings and pooling, the
configuration saying one transformer layer and the others' weights left out
(about a sixth of the encoder's compute; 54 s against 84 s for the compiled
bf16 test, a fraction of the training and export time for ``cairn tune``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def one_layer_copy(folder: Path) -> Path:
    """Write the packaged model's first-layer copy into ``folder`` (made
    here); the folder."""
    from safetensors.torch import load_file, save_file

    from embeddings.config import DEFAULT_MODEL
    from embeddings.encoder import resolve

    source = Path(resolve(DEFAULT_MODEL))
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 1
    (folder / "config.json").write_text(json.dumps(config))
    weights = load_file(source / "model.safetensors")
    kept = {k: v for k, v in weights.items() if ".layer." not in k or ".layer.0." in k}
    assert len(kept) < len(weights)
    save_file(kept, folder / "model.safetensors", metadata={"format": "pt"})
    return folder
