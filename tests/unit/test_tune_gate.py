"""``cairn tune``'s pure parts: MRR@10 with paired standard errors, the gate
that accepts a tuned model, the evaluation sets as read, the weighted
in-batch-negatives loss, the run's key and its checkpoints, the model card."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from embeddings import evaluation as ev
from embeddings import pairs as mining
from embeddings import tune


def test_reciprocal_ranks_and_paired_se() -> None:
    rr = ev.reciprocal_ranks([["a", "b"], ["x", "y", "b"], ["z"]], [frozenset("b")] * 3)
    assert rr.tolist() == [0.5, 1 / 3, 0.0]
    a, b = np.array([1.0, 0.5, 0.0, 1.0]), np.array([0.5, 0.5, 0.0, 0.0])
    p = ev.paired(a, b)
    d = a - b
    assert p.diff == pytest.approx(d.mean()) and p.n == 4
    assert p.se == pytest.approx(d.std(ddof=1) / 2)


def rr(values: list[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


@pytest.mark.parametrize(
    ("tuned", "accepted", "reason"),
    [
        # +0.05 on one group, the other the same: accepted.
        ({"g1": [0.6, 0.6, 0.6, 0.6], "g2": [0.5, 0.5, 0.5, 0.5]}, True, None),
        # +0.005 on the mean: not enough.
        ({"g1": [0.51, 0.51, 0.51, 0.51], "g2": [0.5, 0.5, 0.5, 0.5]}, False, "not 0.01 above"),
        # A big mean gain, but g2 falls far below its noise.
        ({"g1": [1.0, 1.0, 1.0, 1.0], "g2": [0.4, 0.41, 0.39, 0.4]}, False, "g2: -0.1000"),
    ],
)
def test_the_gate(tuned: dict[str, list[float]], accepted: bool, reason: str | None) -> None:
    base = {"g1": rr([0.5, 0.5, 0.5, 0.5]), "g2": rr([0.5, 0.5, 0.5, 0.5])}
    verdict = ev.gate(base, {k: rr(v) for k, v in tuned.items()})
    assert verdict.accepted is accepted
    if reason:
        assert any(reason in r for r in verdict.reasons), verdict.reasons
    forced = ev.gate(base, {k: rr(v) for k, v in tuned.items()}, force=True)
    assert forced.accepted and forced.forced and forced.reasons == verdict.reasons


def test_a_drop_within_noise_passes() -> None:
    base = {"g1": rr([0.5] * 4), "noisy": rr([1.0, 0.0, 1.0, 0.0])}
    tuned = {"g1": rr([0.6] * 4), "noisy": rr([0.0, 0.0, 1.0, 0.0])}
    verdict = ev.gate(base, tuned)
    g = next(g for g in verdict.groups if g.name == "noisy")
    assert g.diff == -0.25 and g.within_noise  # SE 0.25: one SE below
    assert verdict.tuned_mean == pytest.approx(verdict.base_mean - 0.075)
    assert not verdict.accepted  # the mean did not rise


def words_encoder(texts: list[str]) -> np.ndarray:
    """A stand-in model for the scoring code: hashed bags of words. The hash
    is CRC-32, the same in every process (``hash`` of a str changes with
    PYTHONHASHSEED, and a collision of this test's words in 64 buckets moved
    a rank now and then); in 256 buckets these words do not collide."""
    out = np.zeros((len(texts), 256), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in mining.words(t):
            out[i, zlib.crc32(w.encode()) % 256] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_score_ranks_each_query_over_its_corpus(tmp_path: Path) -> None:
    corpus, group = ev.heldout_set(
        ["retry with backoff", "parse csv rows", "cron nightly"],
        ["backoff retry loop", "csv rows parse lazily, nightly by cron", "schedule a script"],
    )
    got = ev.score(words_encoder, [corpus], [group], cache=tmp_path, model_key="words")
    # The third query's words are in the second document, not its own.
    assert got["heldout"].tolist() == [1.0, 1.0, 0.5]
    again = ev.score(
        lambda t: pytest.fail("cached"), [corpus], [group], cache=tmp_path, model_key="words"
    )
    assert again["heldout"].tolist() == got["heldout"].tolist()


def test_load_sets_reads_every_group_of_the_test_split() -> None:
    corpora, groups = ev.load_sets(ev.default_eval_dir())
    assert [c.name for c in corpora] == ["docs", "code", "params"]
    names = [g.name for g in groups]
    assert names == ["docs/paraphrase", "docs/keyword", "docs/handwritten", "code", "params"]
    assert all(g.queries and len(g.queries) == len(g.relevant) for g in groups)
    assert len(corpora[1].texts) == 2400
    with pytest.raises(FileNotFoundError, match="--eval-sets none"):
        ev.load_sets(Path("/nonexistent"), ["code"])


def test_weighted_loss_is_in_batch_cross_entropy() -> None:
    import torch

    torch.manual_seed(0)
    q, d = torch.randn(4, 8), torch.randn(4, 8)
    ones = torch.ones(4)
    qn, dn = torch.nn.functional.normalize(q, dim=1), torch.nn.functional.normalize(d, dim=1)
    expected = torch.nn.functional.cross_entropy(qn @ dn.T * 20.0, torch.arange(4))
    assert float(tune.weighted_mnr_loss(q, d, ones, 20.0)) == pytest.approx(float(expected))
    # Aligned pairs cost less than shuffled ones; a weight pulls the mean its way.
    assert float(tune.weighted_mnr_loss(d, d, ones, 20.0)) < float(expected)
    per = torch.nn.functional.cross_entropy(qn @ dn.T * 20.0, torch.arange(4), reduction="none")
    w = torch.tensor([2.0, 1.0, 1.0, 1.0])
    assert float(tune.weighted_mnr_loss(q, d, w, 20.0)) == pytest.approx(
        float((per * w).sum() / w.sum())
    )


def test_run_key_and_latest_checkpoint(tmp_path: Path) -> None:
    items = [
        mining.Item(
            "pattern",
            f"p{i}",
            f"Title number {i} here",
            f"About {i}.",
            f"T {i}\nthe body of item {i} says more",
        )
        for i in range(12)
    ]
    mined = mining.mine(items, min_pairs=5)
    o = tune.TuneOptions(database_url="x")
    key = tune.run_key("base", mined, o)
    assert key == tune.run_key("base", mined, o)
    assert key != tune.run_key("other", mined, o)
    assert key != tune.run_key("base", mined, tune.TuneOptions(database_url="x", seed=1))
    # Freezing changes the training; left at its default the key is as before.
    frozen = tune.TuneOptions(database_url="x", freeze_layers=4)
    assert key != tune.run_key("base", mined, frozen)
    assert key == tune.run_key("base", mined, tune.TuneOptions(database_url="x", freeze_layers=-1))
    for step in (200, 400):
        folder = tmp_path / f"checkpoint_{step}"
        (folder / "model").mkdir(parents=True)
        (folder / tune.STATE).write_text(json.dumps({"step": step}))
    (tmp_path / "checkpoint_600").mkdir()  # half written: no model, no state
    assert tune.latest_checkpoint(tmp_path) == tmp_path / "checkpoint_400"
    assert tune.latest_checkpoint(tmp_path / "none") is None


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="--extra"):
        tune.TuneOptions(database_url="x", extra=("web",))
    with pytest.raises(ValueError, match="evaluation sets"):
        tune.TuneOptions(database_url="x", eval_sets=("imagenet",))
    with pytest.raises(ValueError, match="hard negatives"):
        tune.TuneOptions(database_url="x", hard_negatives=-1)
    with pytest.raises(ValueError, match="freeze layers"):
        tune.TuneOptions(database_url="x", freeze_layers=-2)


def test_the_card_says_what_was_measured() -> None:
    verdict = ev.gate({"heldout": rr([0.5, 0.2])}, {"heldout": rr([1.0, 0.5])})
    card = {
        "name": "tuned-x",
        "base": "all-MiniLM-L6-v2",
        "data": {
            "pairs_train": 90,
            "pairs_heldout": 10,
            "items": 50,
            "duplicates": 1,
            "by_source": {"title": 50},
        },
        "training": {
            "steps": 3,
            "batch_size": 8,
            "workers": "1 x 1 CPU",
            "epochs": 1,
            "seed": 0,
            "learning_rate": 2e-5,
            "train_s": 12.0,
            "pairs_per_s": 2.0,
        },
        "gate": verdict.as_dict(),
    }
    text = tune.card_markdown(card)
    assert "accepted: **yes**" in text and "| heldout | 2 | 0.3500 | 0.7500 | +0.4000" in text
    assert "every parameter trained" in text
    card["training"] |= {"freeze_layers": 4, "max_tokens": 64}
    text = tune.card_markdown(card)
    assert "cut at 64 tokens, the embeddings and the lowest 4 layer(s) frozen" in text
    assert "ONNX graph" not in text  # a card written before the check, or not on ONNX
    card["onnx_parity"] = {"texts": 5, "min_cosine": 0.9999987}
    assert "cosine ≥ 0.999999 on 5 texts" in tune.card_markdown(card)


def test_freeze_keeps_the_embeddings_and_the_lowest_layers() -> None:
    from sentence_transformers import SentenceTransformer

    from embeddings.config import DEFAULT_MODEL
    from embeddings.encoder import resolve

    model = SentenceTransformer(resolve(DEFAULT_MODEL), device="cpu")
    total = sum(p.numel() for p in model.parameters())
    frozen, left = tune.freeze(model, 4)
    assert frozen + left == total
    trained = {
        n.split(".layer.")[1].split(".")[0]
        for n, p in model.named_parameters()
        if p.requires_grad and ".layer." in n
    }
    assert trained == {"4", "5"}
    assert not any(p.requires_grad for n, p in model.named_parameters() if "embeddings" in n)
    # The word embeddings alone are about half of the model.
    assert frozen > total / 2
    with pytest.raises(ValueError, match="cannot freeze 7 layers"):
        tune.freeze(model, 7)


def test_hard_negatives_join_every_querys_sum_unless_of_its_own_group() -> None:
    import torch

    torch.manual_seed(1)
    q, d, n = torch.randn(3, 8), torch.randn(3, 8), torch.randn(2, 8)
    ones = torch.ones(3)
    norm = torch.nn.functional.normalize
    scores = torch.cat([norm(q, dim=1) @ norm(d, dim=1).T, norm(q, dim=1) @ norm(n, dim=1).T], 1)
    expected = torch.nn.functional.cross_entropy(scores * 20.0, torch.arange(3))
    got = tune.weighted_mnr_loss(q, d, ones, 20.0, n)
    assert float(got) == pytest.approx(float(expected))
    assert float(got) > float(tune.weighted_mnr_loss(q, d, ones, 20.0))  # more to tell apart
    # Blocked everywhere: the in-batch loss; blocked for query 0 only: its
    # term loses the negatives' columns, the others keep them.
    everywhere = torch.ones(3, 2, dtype=torch.bool)
    assert float(tune.weighted_mnr_loss(q, d, ones, 20.0, n, everywhere)) == pytest.approx(
        float(tune.weighted_mnr_loss(q, d, ones, 20.0))
    )
    first = torch.zeros(3, 2, dtype=torch.bool)
    first[0] = True
    per = torch.nn.functional.cross_entropy(scores * 20.0, torch.arange(3), reduction="none")
    alone = torch.nn.functional.cross_entropy(
        scores[:1, :3] * 20.0, torch.arange(1), reduction="none"
    )
    want = (alone.sum() + per[1:].sum()) / 3
    assert float(tune.weighted_mnr_loss(q, d, ones, 20.0, n, first)) == pytest.approx(float(want))
