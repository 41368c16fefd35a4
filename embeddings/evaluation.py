"""Measuring an embedding model for ``cairn tune``'s gate: the project's
evaluation sets (``benchmarks/search_eval``: read as data, never imported)
and the held-out pairs, MRR@10 per query, paired differences with their
standard errors, and the rule that accepts a tuned model.

The metric code is here, below the benchmarks, so that ``cairn tune`` and
``benchmarks.ranking`` compute MRR@10 and its paired standard error the same
way (embeddings never import benchmarks)."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

TOP = 10
# The gate (issue 50): the mean over groups at least this far above the base,
EDGE = 0.01
# and no group below the base by more than this many paired standard errors.
NOISE_SE = 2.0
EVAL_SETS = ("docs", "code", "params")
DOCS_STYLES = ("paraphrase", "keyword", "handwritten")


def default_eval_dir() -> Path:
    """``benchmarks/search_eval`` of the checkout this package runs from."""
    return Path(__file__).resolve().parents[1] / "benchmarks" / "search_eval"


# --- metrics ----------------------------------------------------------------


def reciprocal_ranks(
    ranked: Sequence[Sequence[Any]], relevant: Sequence[frozenset[Any]], top: int = TOP
) -> np.ndarray:
    """Each query's 1/rank of its first relevant hit in the top ``top`` (0 if none)."""
    out = []
    for keys, rel in zip(ranked, relevant, strict=True):
        first = next((r for r, k in enumerate(list(keys)[:top]) if k in rel), None)
        out.append(0.0 if first is None else 1.0 / (first + 1))
    return np.asarray(out, dtype=np.float64)


@dataclass(frozen=True)
class Paired:
    """``a`` minus ``b`` on the same queries: the mean difference and its
    paired standard error."""

    diff: float
    se: float
    n: int

    @property
    def within_noise(self) -> bool:
        return self.diff >= -NOISE_SE * self.se


def paired(a: np.ndarray, b: np.ndarray) -> Paired:
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    return Paired(float(d.mean()) if len(d) else 0.0, se, len(d))


# --- the sets ---------------------------------------------------------------


@dataclass
class Corpus:
    """Documents searched by one or more groups of queries."""

    name: str
    keys: list[str]
    texts: list[str]


@dataclass
class Group:
    name: str
    corpus: str
    queries: list[str]
    relevant: list[frozenset[str]]


def embed_text(doc: dict[str, Any]) -> str:
    """What the Embedder embeds for a pattern (title, description, content)."""
    return f"{doc['title']}\n{doc['description']}\n{doc['content']}"


def load_sets(
    root: Path, names: Sequence[str] = EVAL_SETS, split: str = "test"
) -> tuple[list[Corpus], list[Group]]:
    """The evaluation sets' corpora and their groups of ``split`` queries:
    ``docs`` by query style, ``code`` and ``params`` whole."""
    corpora: list[Corpus] = []
    groups: list[Group] = []
    for name in names:
        if name not in EVAL_SETS:
            raise ValueError(f"unknown evaluation set {name!r} (one of {', '.join(EVAL_SETS)})")
        folder = root if name == "docs" else root / name
        try:
            with gzip.open(folder / "corpus.jsonl.gz", "rt") as f:
                docs = [json.loads(line) for line in f]
            with (folder / "queries.jsonl").open() as f:
                rows = [json.loads(line) for line in f]
        except OSError as exc:
            raise FileNotFoundError(
                f"evaluation set {name!r} not found in {folder} ({exc.strerror}); "
                "give --eval-dir, or --eval-sets none to gate on the held-out pairs only"
            ) from None
        corpora.append(Corpus(name, [d["id"] for d in docs], [embed_text(d) for d in docs]))
        rows = [q for q in rows if split in ("all", q["split"])]
        styles: Sequence[str | None] = DOCS_STYLES if name == "docs" else (None,)
        for style in styles:
            picked = [q for q in rows if style in (None, q["style"])]
            groups.append(
                Group(
                    name if style is None else f"{name}/{style}",
                    name,
                    [q["query"] for q in picked],
                    [frozenset(q["relevant"]) for q in picked],
                )
            )
    return corpora, groups


def heldout_set(queries: Sequence[str], documents: Sequence[str]) -> tuple[Corpus, Group]:
    """The held-out pairs as a search: each query among all held-out
    documents, its own the relevant one (documents that repeat count as one)."""
    keys: dict[str, str] = {}
    for doc in documents:
        keys.setdefault(doc, f"h{len(keys)}")
    corpus = Corpus("heldout", list(keys.values()), list(keys))
    group = Group("heldout", "heldout", list(queries), [frozenset({keys[d]}) for d in documents])
    return corpus, group


# --- scoring a model ----------------------------------------------------------

Encode = Callable[[list[str]], np.ndarray]


def cached_vectors(
    encode: Encode, texts: list[str], cache: Path | None, model_key: str | None
) -> np.ndarray:
    """``encode(texts)``, kept under ``cache`` by the model's and the texts'
    hash (the base model's vectors of a set are computed once)."""
    if cache is None or model_key is None:
        return encode(texts)
    digest = hashlib.sha256("\x1e".join([model_key, *texts]).encode()).hexdigest()[:24]
    path = cache / f"eval-{digest}.npy"
    if path.is_file():
        return np.load(path)
    vectors = encode(texts)
    cache.mkdir(parents=True, exist_ok=True)
    aside = path.with_suffix(".tmp.npy")
    np.save(aside, vectors)
    aside.replace(path)
    return vectors


def score(
    encode: Encode,
    corpora: Sequence[Corpus],
    groups: Sequence[Group],
    *,
    cache: Path | None = None,
    model_key: str | None = None,
) -> dict[str, np.ndarray]:
    """Each group's per-query reciprocal ranks (MRR@10's terms) under a model,
    searched exactly over its corpus."""
    out: dict[str, np.ndarray] = {}
    for corpus in corpora:
        mine = [g for g in groups if g.corpus == corpus.name]
        if not mine:
            continue
        docs = cached_vectors(encode, corpus.texts, cache, model_key)
        for group in mine:
            if not group.queries:
                out[group.name] = np.zeros(0)
                continue
            queries = cached_vectors(encode, group.queries, cache, model_key)
            scores = queries @ docs.T
            k = min(TOP, docs.shape[0])
            top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            order = np.take_along_axis(scores, top, axis=1).argsort(axis=1)[:, ::-1]
            ranked = [[corpus.keys[j] for j in row] for row in np.take_along_axis(top, order, 1)]
            out[group.name] = reciprocal_ranks(ranked, group.relevant)
    return out


# --- the gate -----------------------------------------------------------------


@dataclass
class GroupResult:
    name: str
    n: int
    base: float
    tuned: float
    diff: float
    se: float
    within_noise: bool


@dataclass
class Verdict:
    groups: list[GroupResult]
    base_mean: float
    tuned_mean: float
    accepted: bool
    forced: bool
    reasons: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {
            "groups": [vars(g) for g in self.groups],
            "base_mean_mrr10": self.base_mean,
            "tuned_mean_mrr10": self.tuned_mean,
            "accepted": self.accepted,
            "forced": self.forced,
            "reasons": self.reasons,
            "rule": f"mean MRR@10 >= base + {EDGE}, no group below base by more than "
            f"{NOISE_SE:g} paired standard errors",
        }


def gate(base: dict[str, np.ndarray], tuned: dict[str, np.ndarray], force: bool = False) -> Verdict:
    """Accept the tuned model only if the mean over groups of MRR@10 is at
    least ``EDGE`` above the base's and no group falls below the base by more
    than ``NOISE_SE`` paired standard errors (``force``: accepted whatever
    was measured, for tests; the card says so)."""
    results = []
    for name in base:
        p = paired(tuned[name], base[name])
        b = float(base[name].mean()) if len(base[name]) else 0.0
        t = float(tuned[name].mean()) if len(tuned[name]) else 0.0
        results.append(GroupResult(name, p.n, b, t, p.diff, p.se, p.within_noise))
    scored = [g for g in results if g.n]
    base_mean = float(np.mean([g.base for g in scored])) if scored else 0.0
    tuned_mean = float(np.mean([g.tuned for g in scored])) if scored else 0.0
    reasons = []
    if tuned_mean < base_mean + EDGE:
        reasons.append(
            f"mean MRR@10 {tuned_mean:.4f} is not {EDGE} above the base's {base_mean:.4f}"
        )
    for g in scored:
        if not g.within_noise:
            reasons.append(
                f"{g.name}: {g.diff:+.4f} ± {g.se:.4f}, below the base by more than "
                f"{NOISE_SE:g} standard errors"
            )
    if not scored:
        reasons.append("no evaluation queries")
    return Verdict(results, base_mean, tuned_mean, force or not reasons, force, reasons)
