"""``ranking_eval``'s evaluation: the sets (``docs``, ``code``, ``params``), each
query's two halves (BM25 through ``LexicalIndex``, vectors), the candidate
fusions, and the choice of one by the worst group's shortfall (``choose``)."""

from __future__ import annotations

import gzip
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.harness import ROOT
from benchmarks.ranking.evalset import NONSENSE, Query, Score, embed_text, evaluate
from benchmarks.ranking.vectors import cached_vectors, run_vector
from embeddings import evaluation
from embeddings.evaluation import paired
from retrieval.fusion import HybridParams, hybrid
from retrieval.lexical import LexicalIndex

EVAL = ROOT / "benchmarks" / "search_eval"
SETS = {"docs": EVAL, "code": EVAL / "code", "params": EVAL / "params"}
CANDIDATES = 100  # hits per half handed to the fusion (the API asks for at least 50)
TOP = 10
# The one parameter of the fusion: the lexical weight w of the fixed convex
# combination (max-normalised BM25, cosine).
WEIGHTS = [round(0.05 * i, 2) for i in range(21)]
# "Within noise": a shortfall of at most this many paired standard errors
# (the same rule as `cairn tune`'s gate).
NOISE_SE = evaluation.NOISE_SE


@dataclass
class EvalSet:
    name: str
    docs: list[dict[str, Any]]
    queries: list[Query]


def key(doc_id: str) -> int:
    return int(doc_id.lstrip("dcp"))


def load(name: str) -> EvalSet:
    path = SETS[name]
    with gzip.open(path / "corpus.jsonl.gz", "rt") as f:
        docs = [json.loads(line) for line in f]
    with (path / "queries.jsonl").open() as f:
        rows = [json.loads(line) for line in f]
    relevant = [frozenset(key(r) for r in q["relevant"]) for q in rows]
    queries = [
        Query(q["qid"], q["query"], rel, q["style"], q["split"])
        for q, rel in zip(rows, relevant, strict=True)
    ]
    return EvalSet(name, docs, queries)


def fields(doc: dict[str, Any]) -> dict[str, str | None]:
    return {"title": doc["title"], "description": doc["description"], "content": doc["content"]}


def lexical_index(s: EvalSet) -> tuple[LexicalIndex, float]:
    index = LexicalIndex()
    t0 = time.perf_counter()
    index.add((key(d["id"]), fields(d)) for d in s.docs)
    index.commit()
    return index, time.perf_counter() - t0


@dataclass
class Halves:
    lexical: list[list[tuple[int, float]]]
    vector: list[list[tuple[int, float]]]
    scales: list[float]
    nonsense_scales: list[float]
    nonsense_lexical: list[list[tuple[int, float]]]
    nonsense_vector: list[list[tuple[int, float]]]
    build_s: float
    query_ms: float


def halves(s: EvalSet, model_box: list[Any]) -> Halves:
    index, build_s = lexical_index(s)
    t0 = time.perf_counter()
    lexical = [index.search(q.text, CANDIDATES) for q in s.queries]
    query_ms = (time.perf_counter() - t0) * 1000 / max(1, len(s.queries))
    doc_vecs, _ = cached_vectors(f"{s.name}-docs", [embed_text(d) for d in s.docs], model_box)
    texts = [q.text for q in s.queries] + NONSENSE
    query_vecs, _ = cached_vectors(f"{s.name}-queries", texts, model_box)
    ids = np.asarray([key(d["id"]) for d in s.docs], dtype=np.int64)
    vectors = run_vector(doc_vecs, ids, query_vecs, CANDIDATES)
    n, scales = len(s.queries), [index.scale(q.text) for q in s.queries]
    nonsense = [index.scale(t) for t in NONSENSE], [index.search(t, CANDIDATES) for t in NONSENSE]
    return Halves(lexical, vectors[:n], scales, *nonsense, vectors[n:], build_s, query_ms)


# A fusion: (lexical hits, vector hits, lexical scale, query text) -> keys.
Fusion = Callable[[list[tuple[int, float]], list[tuple[int, float]], float, str], list[int]]


def convex(params: HybridParams) -> Fusion:
    """``retrieval.fusion.hybrid`` with ``params``."""

    def fused(
        lex: list[tuple[int, float]], vec: list[tuple[int, float]], scale: float, text: str
    ) -> list[int]:
        ranked = hybrid(lex, vec, limit=TOP, params=params, lexical_scale=scale, query=text)
        return [int(r.key) for r in ranked]  # type: ignore[call-overload]

    return fused


def candidates_of() -> dict[str, Fusion]:
    """The service's fusion at every weight of the grid, both normalisations
    (``convex w=0.05``, ``convex w=0.05 /scale``). (Reciprocal rank fusion,
    the fusion without the exact-identifier rule and issue 23's adaptive
    weight were compared until 7e05430: docs/decisions/search.md.)"""
    grid = [HybridParams(lexical_weight=w, normalise=n) for n in ("max", "scale") for w in WEIGHTS]
    return {
        f"convex w={p.lexical_weight:g}{'' if p.normalise == 'max' else ' /scale'}": convex(p)
        for p in grid
    }


Group = tuple[str, str | None]  # (set, style or None for the whole set)


def group_name(g: Group) -> str:
    return g[0] if g[1] is None else f"{g[0]}/{g[1]}"


def members(s: EvalSet, style: str | None, split: str) -> list[int]:
    queries = enumerate(s.queries)
    return [i for i, q in queries if style in (None, q.style) and split in ("all", q.split)]


def score(ranked: Sequence[Sequence[int]], s: EvalSet, idx: Sequence[int]) -> Score:
    return evaluate([ranked[i] for i in idx], [s.queries[i] for i in idx])


def reciprocal_ranks(
    ranked: Sequence[Sequence[int]], s: EvalSet, idx: Sequence[int], recall: bool = False
) -> np.ndarray:
    """Each query's reciprocal rank of its first relevant hit in the top TOP
    (0 if none); with ``recall``, its Recall@TOP instead."""
    out = []
    for i in idx:
        top = list(ranked[i])[:TOP]
        relevant = s.queries[i].relevant
        if recall:
            out.append(len(relevant & set(top)) / len(relevant))
            continue
        first = next((r for r, k in enumerate(top) if k in relevant), None)
        out.append(0.0 if first is None else 1.0 / (first + 1))
    return np.asarray(out)


@dataclass
class Gap:
    """MRR@10 of a method minus a reference's on the same queries, with the
    paired standard error of that difference."""

    diff: float
    se: float

    @property
    def within_noise(self) -> bool:
        return self.diff >= -NOISE_SE * self.se

    def __str__(self) -> str:
        verdict = "ok" if self.diff >= 0 else ("within noise" if self.within_noise else "NOT MET")
        return f"{self.diff:+.3f} ± {self.se:.3f} ({verdict})"


Ranked = Sequence[Sequence[int]]


def gap(a: Ranked, b: Ranked, s: EvalSet, idx: Sequence[int], recall: bool = False) -> Gap:
    # The paired difference as `cairn tune`'s gate computes it (embeddings.evaluation).
    p = paired(reciprocal_ranks(a, s, idx, recall), reciprocal_ranks(b, s, idx, recall))
    return Gap(p.diff, p.se)


def keys(hits: Sequence[tuple[int, float]]) -> list[int]:
    return [k for k, _ in hits]


def lexical_weight(name: str) -> float:
    """The lexical weight ``w`` of a ``convex w=…`` candidate; 0 for a
    candidate without one (``RRF k=…``, say)."""
    return float(name.split()[1].split("=")[1]) if name.startswith("convex") else 0.0


def choose(
    fused: dict[str, dict[str, list[list[int]]]],
    base: dict[str, dict[str, list[list[int]]]],
    sets: dict[str, EvalSet],
    groups: Sequence[Group],
    names: Sequence[str] | None = None,
    parsimony: bool = True,
) -> str:
    """The fusion (among ``names``; default: every candidate) chosen on the dev
    queries of ``groups``. The requirement: on every group, the hybrid's MRR@10
    and Recall@10 at or above the better half's. Parsimony (the default): the
    least shortfall (the worst group's difference from the better half, 0 when
    none falls below), then the least lexical weight (the vector half is the
    default ranker), then the best mean dev MRR@10, then the first candidate
    (docs/decisions/search-at-scale.md, "Fusion"). ``parsimony=False``: the
    rule before it, the largest worst-group difference, then the mean."""
    idx = {g: members(sets[g[0]], g[1], "dev") for g in groups}
    better: dict[Group, tuple[float, float]] = {}
    for g in groups:
        s = sets[g[0]]
        halves = [score(base[g[0]][h], s, idx[g]) for h in ("lexical", "vector")]
        better[g] = (max(h.mrr for h in halves), max(h.recall for h in halves))

    def objective(name: str) -> tuple[float, ...]:
        got = {g: score(fused[g[0]][name], sets[g[0]], idx[g]) for g in groups}
        worst = min(min(got[g].mrr - better[g][0], got[g].recall - better[g][1]) for g in groups)
        mean = round(statistics.mean(x.mrr for x in got.values()), 6)
        if not parsimony:
            return round(worst, 4), mean
        return round(min(worst, 0.0), 4), -lexical_weight(name), mean

    pool = list(names) if names is not None else list(next(iter(fused.values())))
    return max(pool, key=lambda n: (*objective(n), -pool.index(n)))


def chosen_params(name: str) -> HybridParams:
    """The HybridParams of a "convex w=…" candidate (the defaults otherwise)."""
    if not name.startswith("convex"):
        return HybridParams()
    return HybridParams(
        lexical_weight=float(name.split()[1].split("=")[1]),
        normalise="scale" if "/scale" in name else "max",
    )
