"""``cairn tune``: fine-tune the embedding model on the corpus as a Ray Train
batch job, measure it against the base, store it if it measured better.

- **Lock**: one tune at a time per database (a Postgres advisory lock held
  by the driver's connection for the whole job; a second is refused).
- **Mine**: pairs from the visible corpus (``embeddings.pairs``), a
  held-out tenth set aside; optionally docstring -> function pairs from
  installed packages (``--extra python-packages``).
- **Train**: ``ray.train.torch.TorchTrainer``, one or more workers (CPU
  here; GPU workers with bf16 autocast where the cluster has GPUs), starting
  from the active model, in-batch negatives (a weighted
  MultipleNegativesRanking loss: each query against every document of its
  batch, verified items weighing more). Each worker takes every n-th batch
  of an epoch; gradients are averaged by DDP.
- **Progress**: rank 0 sends pairs/s, loss and the ETA to the driver
  through a Ray queue; the driver prints them.
- **Resume**: a checkpoint (the model, the optimizer, the step) every
  ``checkpoint_every`` steps, under the run's folder, named by a hash of the
  pairs and the settings: a rerun of the same job continues from the last.
- **Gate**: base and tuned on every evaluation set and the held-out pairs
  (``embeddings.evaluation``); a model card (JSON and markdown) either way;
  stored as a version (``embeddings.modelstore``) only when accepted.

``train_loop`` is the per-worker function; ``run`` the driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from embeddings import evaluation, modelstore, tune_recorder
from embeddings import pairs as mining
from embeddings.config import DEFAULT_MODEL
from embeddings.reembed import _duration, job_cluster, join_or_start

log = logging.getLogger("cairn.tune")

EXTRAS = ("python-packages",)
STATE = "tune-state.json"
# The smallest cosine between a tuned model's ONNX vectors (what the CPU
# Embedder serves) and sentence-transformers' on PyTorch the job accepts
# (the issue's; the packaged model's graph measures 0.99999964,
# docs/decisions/search-at-scale.md). A graph below it is never stored.
PARITY_MIN = 0.9999
# The texts the parity is checked on: the held-out pairs' (at most this
# many) and one past the length the model reads.
PARITY_TEXTS = 32
PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"


class TuneError(RuntimeError):
    """A tune that cannot run (another is running, the corpus is too small,
    the base model or the cluster cannot be used): the live model is unchanged."""


@dataclass(frozen=True)
class TuneOptions:
    database_url: str
    # The model to start from ("": the active one).
    base: str = ""
    epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 2e-5
    warmup: float = 0.1  # the share of steps the learning rate ramps up over
    seed: int = 0
    # Stop after this many steps (tests, a first look); None: every epoch.
    max_steps: int | None = None
    # Tokens a text is cut at while training (the model reads 256 at most).
    max_tokens: int = 128
    # -1: every parameter trains. 0 or more: the embedding block (the word
    # embeddings are half of all-MiniLM-L6-v2's parameters) and this many of
    # the lowest transformer layers stay as the base has them: no gradient,
    # no AdamW moments, no backward pass below the first trained layer (a
    # cheaper tune on a CPU; ``freeze``).
    freeze_layers: int = -1
    # The in-batch similarity scale (MultipleNegativesRankingLoss's 20).
    scale: float = 20.0
    num_workers: int = 1
    cpus_per_worker: float = 1.0
    # auto: GPU workers where the cluster has GPUs; yes; no.
    gpu: str = "auto"
    checkpoint_every: int = 200
    report_every: int = 10
    extra: tuple[str, ...] = ()
    extra_limit: int = 20_000
    # Hard negatives per pair from the base model's index of the corpus (0: none).
    hard_negatives: int = 0
    min_pairs: int = mining.MIN_PAIRS
    eval_sets: tuple[str, ...] = evaluation.EVAL_SETS
    eval_dir: str = ""
    force_accept: bool = False
    # Where runs keep their checkpoints and cards (shared storage on a
    # multi-node cluster) and where models are unpacked and exported.
    runs_dir: str = ".cairn/tune"
    cache_dir: str = ".cairn/models"
    # A Ray of its own starts here (no cluster to join).
    ray_temp_dir: str = ""

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 2 or self.num_workers < 1:
            raise ValueError("epochs and workers must be at least 1, the batch size at least 2")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError("max steps must be at least 1")
        if self.hard_negatives < 0:
            raise ValueError("hard negatives must not be negative")
        if self.freeze_layers < -1:
            raise ValueError("freeze layers must be -1 (none frozen) or more")
        unknown = set(self.extra) - set(EXTRAS)
        if unknown:
            raise ValueError(f"--extra must be among {', '.join(EXTRAS)}")
        if self.gpu not in ("auto", "yes", "no"):
            raise ValueError("gpu must be auto, yes or no")
        bad = set(self.eval_sets) - set(evaluation.EVAL_SETS)
        if bad:
            raise ValueError(
                f"evaluation sets must be among {', '.join(evaluation.EVAL_SETS)} (or none)"
            )


# --- training (one Ray Train worker) ----------------------------------------


def weighted_mnr_loss(
    q: Any,
    d: Any,
    weights: Any,
    scale: float,
    negatives: Any = None,
    blocked: Any = None,
) -> Any:
    """In-batch negatives: each query's cross-entropy over every document of
    the batch (its own the target), scaled cosine similarities, the
    per-query losses averaged with ``weights``. ``negatives``: more
    documents every query is scored against (the batch's hard negatives);
    ``blocked`` (queries x negatives, True where a negative is of the
    query's own group) leaves those out of that query's sum."""
    import torch

    q = torch.nn.functional.normalize(q, p=2, dim=1)
    d = torch.nn.functional.normalize(d, p=2, dim=1)
    scores = q @ d.T
    if negatives is not None and negatives.shape[0]:
        extra = q @ torch.nn.functional.normalize(negatives, p=2, dim=1).T
        if blocked is not None:
            extra = extra.masked_fill(blocked, float("-inf"))
        scores = torch.cat([scores, extra], dim=1)
    scores = scores * scale
    target = torch.arange(scores.shape[0], device=scores.device)
    losses = torch.nn.functional.cross_entropy(scores.float(), target, reduction="none")
    return (losses * weights).sum() / weights.sum()


def freeze(model: Any, layers: int) -> tuple[int, int]:
    """Freeze ``model``'s embedding block and its lowest ``layers``
    transformer layers (``TuneOptions.freeze_layers``); (parameters frozen,
    parameters left to train)."""
    auto = model[0].auto_model
    stack = getattr(getattr(auto, "encoder", None), "layer", None)
    if stack is None or layers > len(stack):
        have = "none" if stack is None else str(len(stack))
        raise ValueError(f"cannot freeze {layers} layers of this model (it has {have})")
    for part in [auto.get_input_embeddings(), getattr(auto, "embeddings", None), *stack[:layers]]:
        if part is not None:
            part.requires_grad_(False)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return frozen, sum(p.numel() for p in model.parameters() if p.requires_grad)


def schedule(n_pairs: Sequence[mining.Pair], options: dict[str, Any]) -> list[list[int]]:
    """Every step's batch over all epochs, the same on every worker."""
    steps: list[list[int]] = []
    for epoch in range(options["epochs"]):
        steps += mining.batches(n_pairs, options["batch_size"], options["seed"] + epoch)
    return steps


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: load the base (or the last checkpoint), then
    train its share of each step's batches, reporting and checkpointing."""
    import tempfile

    import ray
    import ray.train
    import ray.train.torch
    import torch
    from sentence_transformers import SentenceTransformer

    o = config["options"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(o["cpus_per_worker"])))
    torch.manual_seed(o["seed"])
    pairs: list[mining.Pair] = ray.get(config["pairs"])
    steps = schedule(pairs, o)
    if o["max_steps"]:
        steps = steps[: o["max_steps"]]
    # Every worker takes the same number of steps (DDP averages each step's
    # gradients over all of them): step s is batch s * world + rank.
    total = len(steps) // world if len(steps) >= world else 1
    start, model_dir = 0, config["base_path"]
    # The latest checkpoint of this run: Ray Train's after a worker failed,
    # else the one a rerun found in the run's folder (shared storage on a
    # multi-node cluster).
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None and config.get("resume"):
        checkpoint = ray.train.Checkpoint.from_directory(config["resume"])
    resumed: dict[str, Any] | None = None
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            resumed = json.loads((Path(folder) / STATE).read_text())
            start = int(resumed["step"])
            local = Path(tempfile.mkdtemp(prefix="cairn-tune-"))
            import shutil

            shutil.copytree(folder, local, dirs_exist_ok=True)
            model_dir = str(local / "model")
    model = SentenceTransformer(model_dir, device=str(device))
    # Texts are cut shorter while training (cost grows with length); the
    # model is saved with the base's length, which is what it serves with.
    serve_length = model.max_seq_length
    train_length = min(serve_length or o["max_tokens"], o["max_tokens"])
    model.max_seq_length = train_length
    tokenize = model.tokenize
    if o["freeze_layers"] >= 0:
        freeze(model, o["freeze_layers"])
    # The transformer's pooler is not used by mean pooling: DDP must not wait
    # for its gradients.
    net = ray.train.torch.prepare_model(
        model, parallel_strategy_kwargs={"find_unused_parameters": True}
    )
    optimizer = torch.optim.AdamW(
        [p for p in net.parameters() if p.requires_grad], lr=o["learning_rate"]
    )
    warm = max(1, int(total * o["warmup"]))
    lr_at = lambda s: min(1.0, (s + 1) / warm) * max(0.0, (total - s) / max(1, total - warm))  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    if resumed is not None:
        state = torch.load(Path(model_dir).parent / "optimizer.pt", map_location=device)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    bf16 = device.type == "cuda" and o["bf16"]
    # Progress lines go to a file in the run's folder (storage every node
    # reads, as the checkpoints do): no actor to start for them.
    progress = Path(config["progress"]) if config.get("progress") else None
    t0, seen, loss_sum, loss_n = time.monotonic(), 0, 0.0, 0
    net.train()

    def embed(texts: list[str]) -> Any:
        features = {k: v.to(device) if hasattr(v, "to") else v for k, v in tokenize(texts).items()}
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            return net(features)["sentence_embedding"]

    step = start
    for step in range(start, total):
        batch = [pairs[i] for i in steps[min(step * world + rank, len(steps) - 1)]]
        weights = torch.tensor([p.weight for p in batch], device=device)
        # The batch's hard negatives, each once; one that is of a query's
        # own group is no negative for that query.
        negs = list(dict.fromkeys(n for p in batch for n in p.negatives))
        extra = embed([t for _, t in negs]) if negs else None
        blocked = (
            torch.tensor([[g == p.group for g, _ in negs] for p in batch], device=device)
            if negs
            else None
        )
        loss = weighted_mnr_loss(
            embed([p.query for p in batch]),
            embed([p.document for p in batch]),
            weights,
            o["scale"],
            extra,
            blocked,
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        seen += len(batch) * world
        loss_sum, loss_n = loss_sum + float(loss.detach()), loss_n + 1
        done = step + 1
        last = done == total
        if progress is not None and rank == 0 and (done % o["report_every"] == 0 or last):
            elapsed = time.monotonic() - t0
            line = {
                "step": done,
                "steps": total,
                "loss": loss_sum / loss_n,
                "pairs_per_s": seen / elapsed if elapsed > 0 else 0.0,
                "elapsed_s": elapsed,
                "resumed_from": start,
            }
            with progress.open("a") as f:
                f.write(json.dumps(line) + "\n")
            loss_sum, loss_n = 0.0, 0
        if done % o["checkpoint_every"] == 0 or last:
            metrics = {"step": done, "loss": float(loss.detach())}
            with tempfile.TemporaryDirectory() as folder:
                written = None
                if rank == 0:
                    inner = getattr(net, "module", net)
                    inner.max_seq_length = serve_length
                    inner.save(str(Path(folder) / "model"))
                    inner.max_seq_length = train_length
                    torch.save(
                        {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                        Path(folder) / "optimizer.pt",
                    )
                    (Path(folder) / STATE).write_text(json.dumps({"step": done, "steps": total}))
                    written = ray.train.Checkpoint.from_directory(folder)
                ray.train.report(metrics, checkpoint=written)


# --- the driver ----------------------------------------------------------------


class Printer:
    """Progress lines on stderr, as ``cairn reembed`` prints them."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stderr

    def say(self, message: str) -> None:
        self.out.write(f"cairn tune: {message}\n")
        self.out.flush()

    def step(self, m: dict[str, Any]) -> None:
        left = m["steps"] - m["step"]
        done_here = m["step"] - m["resumed_from"]
        per_step = m["elapsed_s"] / done_here if done_here else math.inf
        self.say(
            f"step {m['step']:,}/{m['steps']:,} ({100 * m['step'] / max(1, m['steps']):.0f}%), "
            f"loss {m['loss']:.4f}, {m['pairs_per_s']:,.1f} pairs/s, "
            f"elapsed {_duration(m['elapsed_s'])}, ETA {_duration(left * per_step)}"
        )


@dataclass
class Summary:
    base: str
    run: str
    pairs_train: int = 0
    pairs_heldout: int = 0
    pairs_extra: int = 0
    items: int = 0
    duplicates: int = 0
    hard_negatives: int = 0
    steps: int = 0
    resumed_from: int = 0
    train_s: float = 0.0
    eval_s: float = 0.0
    # The smallest ONNX/PyTorch cosine of the tuned model (None: not on ONNX).
    onnx_min_cosine: float | None = None
    pairs_per_s: float = 0.0
    loss: float | None = None
    workers: str = ""
    accepted: bool = False
    version: str | None = None
    card: str = ""
    verdict: dict[str, Any] = field(default_factory=dict)


def run_key(base: str, mined: mining.Mined, options: TuneOptions) -> str:
    """Names a run: the base, the pairs and every setting that changes the
    training (a rerun of the same job finds its checkpoints)."""
    h = hashlib.sha256(base.encode())
    for p in mined.train:
        h.update(f"{p.query}\x1f{p.document}\x1f{p.weight}\x1f{p.group}\x1e".encode())
        for group, text in p.negatives:
            h.update(f"{group}\x1f{text}\x1d".encode())
    keep: tuple[str, ...] = ("epochs", "batch_size", "learning_rate", "warmup", "seed")
    keep += ("max_steps", "max_tokens", "scale", "num_workers", "hard_negatives")
    # A setting added later enters the key only when set: older runs keep theirs.
    if options.freeze_layers >= 0:
        keep += ("freeze_layers",)
    h.update(json.dumps({k: getattr(options, k) for k in keep}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def latest_checkpoint(folder: Path) -> Path | None:
    """The checkpoint of the furthest step under a run's folder."""
    best: tuple[int, Path] | None = None
    for state in folder.glob(f"**/{STATE}"):
        try:
            step = int(json.loads(state.read_text())["step"])
        except (OSError, ValueError, KeyError):
            continue
        if (state.parent / "model").is_dir() and (best is None or step > best[0]):
            best = (step, state.parent)
    return None if best is None else best[1]


def corpus_items(rows: Any) -> list[mining.Item]:
    """The miner's items from the corpus rows (storage/repositories/tuning.corpus)."""
    return [
        mining.Item(
            r.kind,
            str(r.item_id),
            r.title,
            r.description,
            r.text,
            r.worked,
            str(r.forked_from) if r.forked_from else None,
        )
        for r in rows
    ]


async def _mine(
    sessions: Any, options: TuneOptions, printer: Printer
) -> tuple[mining.Mined, list[mining.Item]]:
    from storage.repositories import tuning as repo

    async with sessions() as session:
        rows = await repo.corpus(session)
        accepted = await repo.accepted_answers(session)
        await session.rollback()
    items = corpus_items(rows)
    answers = [
        mining.Answer(str(a.question_id), a.question_title, a.body, a.worked) for a in accepted
    ]
    extra: list[mining.Pair] = []
    if "python-packages" in options.extra:
        root = Path(options.eval_dir) if options.eval_dir else evaluation.default_eval_dir()
        excluded = mining.eval_packages([root, root / "code", root / "params"])
        if not excluded:
            raise TuneError(
                f"--extra python-packages needs the evaluation sets (to leave their packages "
                f"out), and none were found in {root}"
            )
        extra = mining.python_package_pairs(excluded, options.extra_limit, options.seed)
        printer.say(
            f"{len(extra):,} extra pairs from installed packages ({len(excluded)} left out)"
        )
    try:
        return mining.mine(items, answers, extra, options.min_pairs), items
    except mining.CorpusTooSmall as exc:
        raise TuneError(str(exc)) from None


def _hard_negatives(
    options: TuneOptions,
    mined: mining.Mined,
    items: list[mining.Item],
    base_path: str,
    base_key: str,
    printer: Printer,
) -> int:
    """Give the corpus's training pairs their hard negatives
    (``mining.hard_negatives``): the base model's vectors of every visible
    item's text (what its live index holds; kept in the model cache by the
    model's and the texts' hash), the held-out groups' left out, searched
    exactly with each pair's query; how many negatives were given."""
    # The job loads torch anyway (Ray Train's TorchTrainer, the gate):
    # loaded now, the base model's ONNX export (first use of a model) runs in
    # this process instead of a child that would import torch again.
    import torch  # noqa: F401

    from embeddings.encoder import Encoder

    t0 = time.monotonic()
    cache = Path(options.cache_dir)
    encoder = Encoder(
        base_path, device="cpu", cache_dir=cache, threads=max(1, len(os.sched_getaffinity(0)))
    )

    def encode(texts: list[str]) -> Any:
        return encoder.encode(texts, batch_size=16)

    groups = mining.item_groups(items)
    # The held-out groups stay out of the index: training never sees their
    # documents, not even as negatives.
    held = {p.group for p in mined.heldout}
    items = [i for i in items if groups[i.item_id] not in held]
    index = evaluation.cached_vectors(encode, [i.text for i in items], cache / "eval", base_key)
    at = [n for n, p in enumerate(mined.train) if p.source != "python"]
    queries = encode([mined.train[n].query for n in at]) if at else None
    given = mining.hard_negatives(
        [mined.train[n] for n in at],
        queries,
        index,
        [groups[i.item_id] for i in items],
        [i.text for i in items],
        options.hard_negatives,
    )
    for n, pair in zip(at, given, strict=True):
        mined.train[n] = pair
    count = sum(len(p.negatives) for p in given)
    printer.say(
        f"{count:,} hard negatives for {len(at):,} pairs from the base model's index of "
        f"{len(items):,} items in {time.monotonic() - t0:.0f}s"
    )
    return count


def _evaluate(
    base_path: str,
    tuned_path: str,
    mined: mining.Mined,
    options: TuneOptions,
    base_key: str,
    printer: Printer,
) -> tuple[evaluation.Verdict, dict[str, Any] | None]:
    """The gate's verdict, and the tuned model's ONNX/PyTorch parity
    (``onnx_parity``; None where it is not served by ONNX Runtime)."""
    from embeddings.encoder import Encoder

    corpora: list[evaluation.Corpus] = []
    groups: list[evaluation.Group] = []
    if options.eval_sets:
        root = Path(options.eval_dir) if options.eval_dir else evaluation.default_eval_dir()
        corpora, groups = evaluation.load_sets(root, options.eval_sets)
    held_corpus, held_group = evaluation.heldout_set(
        [p.query for p in mined.heldout], [p.document for p in mined.heldout]
    )
    corpora.append(held_corpus)
    groups.append(held_group)
    threads = max(1, len(os.sched_getaffinity(0)))
    cache = Path(options.cache_dir)
    results = {}
    # The tuned model's vectors are kept too, by its weights' hash: a rerun
    # of a finished job, or a report reading them back, computes none again.
    tuned_key = _folder_key(tuned_path)
    encoder: Encoder | None = None
    for label, path, key in (("base", base_path, base_key), ("tuned", tuned_path, tuned_key)):
        t0 = time.monotonic()
        encoder = Encoder(path, device="cpu", cache_dir=cache, threads=threads)
        results[label] = evaluation.score(
            lambda texts, e=encoder: e.encode(texts, batch_size=16),  # type: ignore[misc]
            corpora,
            groups,
            cache=cache / "eval",
            model_key=key,
        )
        printer.say(
            f"measured the {label} model on {len(groups)} groups in {time.monotonic() - t0:.0f}s"
        )
    verdict = evaluation.gate(results["base"], results["tuned"], force=options.force_accept)
    parity = None
    if encoder is not None and encoder.backend == "onnx":
        texts = [t for p in mined.heldout for t in (p.query, p.document)][:PARITY_TEXTS]
        parity = onnx_parity(tuned_path, encoder, texts)
        printer.say(
            f"the tuned model's ONNX graph against PyTorch: cosine >= "
            f"{parity['min_cosine']:.6f} on {parity['texts']} texts"
        )
    return verdict, parity


def onnx_parity(folder: str, encoder: Any, texts: list[str]) -> dict[str, Any]:
    """The smallest cosine between ``encoder``'s vectors (the model of
    ``folder`` on ONNX Runtime, as the CPU Embedder and ``cairn reembed``
    serve it) and sentence-transformers' on PyTorch, over ``texts`` and one
    text past the length the model reads (truncation must agree too).

    Checked here, where torch and the model's weights are loaded already
    (the gate exported the graph in this process): the graph is cached by the
    weights' hash, so every node serving the stored version runs this one."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu")
    long = " ".join(texts or ["a text"])
    while len(model.tokenizer(long, verbose=False)["input_ids"]) <= (model.max_seq_length or 512):
        long = f"{long} {long}"
    texts = [*texts, long]
    reference = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    cosines = np.sum(encoder.encode(texts) * reference, axis=1)
    return {"texts": len(texts), "min_cosine": round(float(cosines.min()), 7)}


def _frozen_words(layers: int) -> str:
    if layers < 0:
        return "every parameter trained"
    return f"the embeddings and the lowest {layers} layer(s) frozen"


def card_markdown(card: dict[str, Any]) -> str:
    v = card["gate"]
    lines = [
        f"# Model card: {card.get('name') or '(not stored)'}",
        "",
        f"- Base: `{card['base']}`; accepted: **{'yes' if v['accepted'] else 'no'}**"
        + (" (forced)" if v["forced"] else ""),
        f"- Data: {card['data']['pairs_train']:,} training pairs ({card['data']['by_source']}), "
        f"{card['data']['pairs_heldout']:,} held out, from {card['data']['items']:,} visible "
        f"items ({card['data']['duplicates']:,} duplicates folded)",
        f"- Training: {card['training']['steps']:,} steps of {card['training']['batch_size']} "
        f"pairs x {card['training']['workers']}, {card['training']['epochs']} epochs, seed "
        f"{card['training']['seed']}, learning rate {card['training']['learning_rate']}, "
        f"texts cut at {card['training'].get('max_tokens', 128)} tokens, "
        + _frozen_words(card["training"].get("freeze_layers", -1))
        + f", {card['training']['train_s']:.0f}s ({card['training']['pairs_per_s']:.1f} pairs/s)",
        f"- Rule: {v['rule']}",
    ]
    parity = card.get("onnx_parity")
    if parity:
        lines.append(
            f"- ONNX graph against PyTorch: cosine ≥ {parity['min_cosine']:.6f} on "
            f"{parity['texts']} texts (at least {PARITY_MIN} to be stored)"
        )
    lines += [
        "",
        "| group | queries | base MRR@10 | tuned MRR@10 | difference ± paired SE |",
        "|---|---:|---:|---:|---:|",
    ]
    for g in v["groups"]:
        flag = "" if g["within_noise"] else " (below)"
        lines.append(
            f"| {g['name']} | {g['n']} | {g['base']:.4f} | {g['tuned']:.4f} | "
            f"{g['diff']:+.4f} ± {g['se']:.4f}{flag} |"
        )
    lines += [
        f"| **mean** | | {v['base_mean_mrr10']:.4f} | {v['tuned_mean_mrr10']:.4f} | "
        f"{v['tuned_mean_mrr10'] - v['base_mean_mrr10']:+.4f} |",
        "",
    ]
    if v["reasons"]:
        lines += ["Not accepted because:", "", *[f"- {r}" for r in v["reasons"]], ""]
    return "\n".join(lines)


def run(options: TuneOptions, *, address: str | None, out: TextIO | None = None) -> Summary:
    """The whole job: lock, mine, train on Ray, gate, card, store."""
    from storage.db import make_engine, make_sessionmaker
    from storage.repositories import search as search_repo
    from storage.repositories import tuning as repo

    printer = Printer(out)

    async def lock_and_read() -> tuple[Any, Any, str]:
        engine = make_engine(options.database_url, pool_size=1, max_overflow=0)
        # The lock's connection stays checked out for the whole job: the
        # advisory lock is the connection's, and goes if the driver dies.
        conn = await engine.connect()
        from sqlmodel.ext.asyncio.session import AsyncSession

        session = AsyncSession(bind=conn)
        if not await repo.try_lock_tune(session):
            await session.close()
            await conn.close()
            await engine.dispose()
            raise TuneError("another tune is running on this database; wait for it to finish")
        await conn.commit()
        base = options.base or await search_repo.active_model(session) or DEFAULT_MODEL
        await conn.commit()
        return (engine, conn), session, base

    loop = asyncio.new_event_loop()
    (engine, conn), lock_session, base = loop.run_until_complete(lock_and_read())
    work_engine = make_engine(options.database_url, pool_size=2, max_overflow=1)
    sessions = make_sessionmaker(work_engine)
    started, outcome = time.monotonic(), "failed"
    # Whether the job joined Ray, and whether it started it (then it stops it).
    joined: list[bool] = []
    summary: Summary | None = None
    recorder = tune_recorder.Recorder()
    try:
        summary = _run_locked(options, base, sessions, printer, address, loop, joined, recorder)
        outcome = "accepted" if summary.accepted else "rejected"
        return summary
    finally:
        if joined:
            recorder.job(job_numbers(summary, outcome, time.monotonic() - started))
            if joined[0]:
                import ray

                ray.shutdown()

        async def release() -> None:
            with contextlib.suppress(Exception):
                await repo.unlock_tune(lock_session)
            await lock_session.close()
            await conn.close()
            await engine.dispose()
            await work_engine.dispose()

        loop.run_until_complete(release())
        loop.close()


def _run_locked(
    options: TuneOptions,
    base: str,
    sessions: Any,
    printer: Printer,
    address: str | None,
    loop: asyncio.AbstractEventLoop,
    joined: list[bool],
    recorder: tune_recorder.Recorder,
) -> Summary:
    cache = Path(options.cache_dir).expanduser().resolve()
    runs = Path(options.runs_dir).expanduser().resolve()
    printer.say(f"mining pairs from the corpus (base model {base!r})")
    mined, items = loop.run_until_complete(_mine(sessions, options, printer))
    printer.say(
        f"{mined.pairs:,} pairs from {mined.items:,} items ({mined.duplicates:,} duplicates "
        f"folded): {len(mined.train):,} to train on, {len(mined.heldout):,} held out"
    )

    def local_copy(name: str) -> str:
        async def get() -> str:
            return str(await modelstore.local_copy(sessions, name, cache))

        try:
            return loop.run_until_complete(get())
        except modelstore.ModelStoreError as exc:
            raise TuneError(str(exc)) from None

    from embeddings.encoder import resolve

    base_path = local_copy(base) if modelstore.is_version(base) else resolve(base)
    if not Path(base_path).is_dir():
        raise TuneError(f"the base model {base!r} is no local folder ({base_path})")
    base_key = (
        hashlib.sha256(base.encode()).hexdigest()
        if modelstore.is_version(base)
        else _folder_key(base_path)
    )
    negatives = 0
    if options.hard_negatives:
        negatives = _hard_negatives(options, mined, items, base_path, base_key, printer)
    key = run_key(base, mined, options)
    summary = Summary(base, key, len(mined.train), len(mined.heldout), items=mined.items)
    summary.pairs_extra = mined.by_source.get("python", 0)
    summary.duplicates = mined.duplicates
    summary.hard_negatives = negatives
    printer.say(f"run {key}")

    joined.append(connect_ray(options, address, printer))
    recorder.start()
    tuned_path, steps, resumed, train_s, workers, loss = _train(
        options, base_path, mined, runs / key, printer, recorder
    )
    summary.steps, summary.resumed_from, summary.train_s, summary.workers = (
        steps,
        resumed,
        train_s,
        workers,
    )
    summary.loss = loss
    done_pairs = (steps - resumed) * options.batch_size * options.num_workers
    summary.pairs_per_s = done_pairs / train_s if train_s > 0 else 0.0

    t0 = time.monotonic()
    verdict, parity = _evaluate(base_path, tuned_path, mined, options, base_key, printer)
    summary.eval_s = time.monotonic() - t0
    if parity is not None:
        summary.onnx_min_cosine = parity["min_cosine"]
        if parity["min_cosine"] < PARITY_MIN:
            # Not even a forced acceptance stores a graph that serves other
            # vectors than the model it was exported from.
            verdict.accepted = False
            verdict.reasons.append(
                f"its ONNX graph disagrees with PyTorch (cosine {parity['min_cosine']:.6f} "
                f"< {PARITY_MIN})"
            )
    summary.accepted = verdict.accepted
    summary.verdict = verdict.as_dict()
    card: dict[str, Any] = {
        "base": base,
        "run": key,
        "data": {
            "items": mined.items,
            "duplicates": mined.duplicates,
            "dropped": mined.dropped,
            "pairs_train": len(mined.train),
            "pairs_heldout": len(mined.heldout),
            "by_source": mined.by_source,
            "extra": list(options.extra),
            "hard_negatives": {"per_pair": options.hard_negatives, "given": negatives},
        },
        "training": {
            "steps": steps,
            "resumed_from": resumed,
            "epochs": options.epochs,
            "batch_size": options.batch_size,
            "workers": workers,
            "learning_rate": options.learning_rate,
            "seed": options.seed,
            "max_tokens": options.max_tokens,
            "freeze_layers": options.freeze_layers,
            "train_s": round(train_s, 1),
            "pairs_per_s": round(summary.pairs_per_s, 2),
        },
        "eval_sets": list(options.eval_sets),
        "onnx_parity": parity,
        "gate": summary.verdict,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if verdict.accepted:
        stored = loop.run_until_complete(
            modelstore.store(sessions, Path(tuned_path), base, True, card)
        )
        summary.version = card["name"] = stored.name
        printer.say(
            f"stored as {stored.name} ({stored.size / 2**20:.1f} MiB, {stored.chunks} chunks)"
        )
    folder = runs / key
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "card.json").write_text(json.dumps(card, indent=2) + "\n")
    (folder / "card.md").write_text(card_markdown(card))
    summary.card = str(folder / "card.md")
    return summary


def _folder_key(path: str) -> str:
    from embeddings.onnx_model import cache_key

    return cache_key(Path(path))


def job_numbers(summary: Summary | None, outcome: str, seconds: float) -> tune_recorder.JobNumbers:
    """What a job records as it ends (``tune_recorder``): outcome, pairs,
    steps, loss, each stage's time."""
    if summary is None:
        return tune_recorder.JobNumbers(outcome, seconds, {})
    return tune_recorder.JobNumbers(
        outcome,
        seconds,
        {
            "train": summary.pairs_train - summary.pairs_extra,
            "heldout": summary.pairs_heldout,
            "extra": summary.pairs_extra,
        },
        max(0, summary.steps - summary.resumed_from),
        summary.loss,
        summary.train_s,
        summary.eval_s,
    )


def connect_ray(options: TuneOptions, address: str | None, printer: Printer) -> bool:
    """Join ``address``, else start a local Ray for the job; whether this
    started it (the job stops it at its end, after recording its metrics)."""
    import ray

    if ray.is_initialized():
        return False
    join_or_start(address, options.ray_temp_dir or None, printer.say)
    return True


def _train(
    options: TuneOptions,
    base_path: str,
    mined: mining.Mined,
    folder: Path,
    printer: Printer,
    recorder: tune_recorder.Recorder,
) -> tuple[str, int, int, float, str, float | None]:
    """Train on Ray (joined by ``connect_ray``); (the tuned model's folder,
    steps, the step resumed from, seconds, what the workers ran on, the last
    reported loss)."""
    import ray
    import ray.train
    from ray.train.torch import TorchTrainer

    gpus = float(ray.cluster_resources().get("GPU", 0.0))
    use_gpu = options.gpu == "yes" or (options.gpu == "auto" and gpus >= options.num_workers)
    if options.gpu == "yes" and gpus < options.num_workers:
        raise TuneError(f"--gpu yes asks for {options.num_workers} GPUs; the cluster has {gpus:g}")
    workers = f"{options.num_workers} x " + (
        "GPU (bf16)" if use_gpu else f"{options.cpus_per_worker:g} CPU"
    )
    checkpoint = latest_checkpoint(folder)
    resumed = 0
    if checkpoint is not None:
        resumed = int(json.loads((checkpoint / STATE).read_text())["step"])
        printer.say(f"resuming from step {resumed:,} ({checkpoint})")
    planned = len(schedule(mined.train, asdict(options)))
    if options.max_steps:
        planned = min(planned, options.max_steps)
    total = max(1, planned // options.num_workers)
    if checkpoint is not None and resumed >= total:
        # The run had finished: its last checkpoint is the model.
        printer.say(f"the run had finished ({total:,} steps); measuring its model")
        return str(checkpoint / "model"), resumed, resumed, 0.0, workers, None
    folder.mkdir(parents=True, exist_ok=True)
    progress = folder / f"progress-{os.getpid()}-{time.time_ns()}.jsonl"
    o = {
        **{k: v for k, v in asdict(options).items() if not isinstance(v, tuple)},
        "bf16": use_gpu,
    }
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={
            "options": o,
            "pairs": ray.put(mined.train),
            "base_path": base_path,
            "progress": str(progress),
            "resume": str(checkpoint) if checkpoint is not None else None,
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=options.num_workers,
            use_gpu=use_gpu,
            resources_per_worker=None if use_gpu else {"CPU": options.cpus_per_worker},
        ),
        run_config=ray.train.RunConfig(
            name="train",
            storage_path=str(folder),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
        ),
    )
    # Ray Train starts a preemption watcher per run, one more process
    # beside the controller and the workers; a tune stopped by a lost node
    # is resumed by a rerun from its last checkpoint instead (an operator
    # may set the variable to 1 to have it).
    os.environ.setdefault(PREEMPTION_WATCHER_ENV, "0")
    printer.say(f"training on {workers}")
    result: list[Any] = []
    failure: list[BaseException] = []

    def fit() -> None:
        try:
            result.append(trainer.fit())
        except BaseException as exc:
            failure.append(exc)

    t0 = time.monotonic()
    thread = threading.Thread(target=fit, name="cairn-tune-fit", daemon=True)
    thread.start()
    loss: float | None = None
    read = 0
    while True:
        alive = thread.is_alive()
        for m in _progress_lines(progress, read):
            read += 1
            printer.step(m)
            loss = float(m["loss"])
            recorder.loss(loss)
        if not alive:
            break
        thread.join(timeout=0.5)
    progress.unlink(missing_ok=True)
    train_s = time.monotonic() - t0
    if failure:
        raise TuneError(f"training failed: {failure[0]}") from failure[0]
    final = result[0].checkpoint
    if final is None:
        raise TuneError("training ended without a checkpoint")
    state = json.loads((Path(final.path) / STATE).read_text())
    return str(Path(final.path) / "model"), int(state["step"]), resumed, train_s, workers, loss


def _progress_lines(path: Path, skip: int) -> list[dict[str, Any]]:
    """The complete progress lines of ``path`` after the first ``skip``."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    # A line being written has no newline yet: it is read next time.
    return [json.loads(line) for line in text.split("\n")[:-1][skip:]]


def main(
    options: TuneOptions,
    *,
    address: str | None,
    local_temp_dir: Path | None = None,
    as_json: bool = False,
) -> int:
    """The command: join ``address``, else the local service's cluster (Ray
    started in ``local_temp_dir``, as ``cairn reembed`` does), else a Ray of
    its own; its exit status (0 also when the gate kept the base)."""
    printer = Printer()
    address = job_cluster(address, local_temp_dir, printer.say)
    try:
        summary = run(options, address=address)
    except TuneError as exc:
        printer.say(f"refused: {exc}; the live model is unchanged")
        return 1
    except KeyboardInterrupt:
        printer.say("interrupted; the checkpoints stay: rerun to resume")
        return 130
    if as_json:
        print(json.dumps(asdict(summary)), flush=True)
        return 0
    v = summary.verdict
    print(
        f"cairn tune: {summary.steps:,} steps on {summary.pairs_train:,} pairs "
        f"({summary.pairs_per_s:,.1f} pairs/s); mean MRR@10 {v['base_mean_mrr10']:.4f} -> "
        f"{v['tuned_mean_mrr10']:.4f}; "
        + (
            f"accepted and stored as {summary.version} (serve it: cairn reembed --model "
            f"{summary.version})"
            if summary.accepted
            else "not accepted: the current model stays"
        )
        + f"; card: {summary.card}",
        flush=True,
    )
    return 0
