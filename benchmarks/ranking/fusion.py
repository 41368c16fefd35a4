"""``ranking_bench``'s methods and the old fusion's tuning: the candidate
lists, each method's ranking and scores by group, the grid search over
``FusionParams`` (vectorized: ``_grid_rr``) and its cross-validation."""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.ranking.evalset import TOP, Query, Score, evaluate, keys_of
from embeddings.ranking import ALL_WORDS, DEFAULT_PARAMS, FusionParams, fuse, merge_candidates, rrf

CANDIDATES = 100  # hits per method handed to the fusion (production: a few hundred at most)
STYLES = ("paraphrase", "keyword", "handwritten")
SHIPPED = "hybrid (fuse)"
CROSS_VALIDATED = "hybrid (fuse), cross-validated"


@dataclass
class Candidates:
    """Per query: the full-text hits of each SQL form and the vector hits."""

    queries: list[Query]
    fulltext: dict[str, list[list[tuple[int, float]]]]
    vector: list[list[tuple[int, float]]]


def method_rankings(
    cands: Candidates, ft_form: str, params: FusionParams
) -> dict[str, list[list[int]]]:
    ft = cands.fulltext[ft_form]
    return {
        "full-text": [keys_of(h) for h in ft],
        "vector": [keys_of(h) for h in cands.vector],
        "RRF k=60, equal weights, over AND only": [
            keys_of(rrf(f, v, limit=TOP))
            for f, v in zip(cands.fulltext["and"], cands.vector, strict=True)
        ],
        "RRF k=60, equal weights": [
            keys_of(rrf(f, v, limit=TOP)) for f, v in zip(ft, cands.vector, strict=True)
        ],
        SHIPPED: [
            keys_of(fuse(f, v, limit=TOP, words=q.words, params=params))
            for f, v, q in zip(ft, cands.vector, cands.queries, strict=True)
        ],
    }


def subset(cands: Candidates, pred: Callable[[Query], bool]) -> tuple[list[int], list[Query]]:
    idx = [i for i, q in enumerate(cands.queries) if pred(q)]
    return idx, [cands.queries[i] for i in idx]


def _in_group(split: str, style: str | None) -> Callable[[Query], bool]:
    """Queries of ``split`` ("all": every query), of one style or all."""
    return lambda q: split in ("all", q.split) and (style is None or q.style == style)


def group_names(split: str) -> list[str]:
    return [split] + [f"{split}/{st}" for st in STYLES]


def score_table(
    rankings: dict[str, list[list[int]]], cands: Candidates
) -> dict[str, dict[str, Score]]:
    """method -> group ("all", "all/paraphrase", …, "test", …, "dev", …) -> Score."""
    groups: dict[str, Callable[[Query], bool]] = {}
    for split in ("all", "test", "dev"):
        for g in group_names(split):
            split_, _, style = g.partition("/")
            groups[g] = _in_group(split_, style or None)
    out: dict[str, dict[str, Score]] = {}
    for method, ranked in rankings.items():
        out[method] = {}
        for g, pred in groups.items():
            idx, qs = subset(cands, pred)
            out[method][g] = evaluate([ranked[i] for i in idx], qs)
    return out


# --------------------------------------------------------------------------- tuning


GRID: dict[str, list[float]] = {
    # Lower floors score a little higher on MRR (which never penalizes results
    # for a query nothing answers) but let the off-topic queries back in.
    "floor": [0.25, 0.3, 0.35],
    "match_bonus": [0.0, 0.1, 0.2, 0.3],
    "specificity": [0.0, 0.1, 0.2, 0.3, 0.5],
    "rank_weight": [0.0, 0.05, 0.1, 0.2],
    "partial_weight": [0.0, 0.05],
    "missing_penalty": [0.0, 0.1, 0.2],
    "short_query": [2, 3, 4],
    "long_query": [6, 8, 10],
    "long_query_weight": [0.0, 0.25, 0.5, 1.0],
}
FOLDS = 5
FOLD_SEED = 7
# What a style's shortfall against the better single method costs in ``tune``,
# per unit of MRR@10, on top of the mean over all queries.
SHORTFALL_PENALTY = 3.0


@dataclass
class Grid:
    """Every point of ``GRID`` and each query's reciprocal rank under it; and
    under full text and vector alone."""

    positions: list[tuple[int, ...]]
    rr: np.ndarray  # [point, query], float32
    single: np.ndarray  # [method (full text, vector), query]
    styles: np.ndarray  # [query]: its style

    def params(self, point: int) -> FusionParams:
        return _params_at(self.positions[point])


def grid_scores(cands: Candidates, ft_form: str) -> Grid:
    """Each query's reciprocal rank under every grid point (≈ 1 min).

    The same arithmetic as ``fuse``, for all grid points of one query at once
    with numpy (calling ``fuse`` for each of the ~50,000 points and 362 queries
    would take an hour); ``main`` checks that both agree at the shipped point."""
    positions = list(itertools.product(*(range(len(v)) for v in GRID.values())))
    values = {
        name: np.array([GRID[name][pos[d]] for pos in positions], dtype=np.float64)[:, None]
        for d, name in enumerate(GRID)
    }
    rr = np.zeros((len(positions), len(cands.queries)), dtype=np.float32)
    ft = cands.fulltext[ft_form]
    for i, (f, v, q) in enumerate(zip(ft, cands.vector, cands.queries, strict=True)):
        rr[:, i] = _grid_rr(f, v, q, values)
    single = np.array(
        [
            [
                evaluate([keys_of(hits)], [q]).mrr
                for hits, q in zip(lists, cands.queries, strict=True)
            ]
            for lists in (ft, cands.vector)
        ]
    )
    return Grid(positions, rr, single, np.array([q.style for q in cands.queries]))


def _grid_rr(
    fulltext: list[tuple[int, float]],
    vector: list[tuple[int, float]],
    query: Query,
    p: dict[str, np.ndarray],
) -> np.ndarray:
    """One query's reciprocal rank (top ``TOP``) under every grid point."""
    cosines, lexical, keys = merge_candidates(fulltext, vector)
    relevant = [j for j, k in enumerate(keys) if k in query.relevant]
    if not relevant:
        return np.zeros(len(p["floor"]), dtype=np.float32)
    cos = np.array([cosines.get(k, np.nan) for k in keys])
    lex = np.array([lexical.get(k, np.nan) for k in keys])
    has_cos = ~np.isnan(cos)
    full = np.nan_to_num(lex, nan=-1.0) >= ALL_WORDS
    partial = ~np.isnan(lex) & ~full
    full_rank = np.where(full, np.cumsum(full), 1)
    n_full = max(int(full.sum()), 1)
    lowest = float(np.nanmin(cos)) if has_cos.any() else 0.0

    words = query.words
    share = (words - p["short_query"]) / (p["long_query"] - p["short_query"])
    weight = np.where(
        words <= p["short_query"],
        1.0,
        np.where(
            words >= p["long_query"],
            p["long_query_weight"],
            1.0 - (1.0 - p["long_query_weight"]) * share,
        ),
    )
    score = np.where(has_cos, cos, lowest - p["missing_penalty"])
    bonus = weight * ((p["match_bonus"] + p["specificity"] / n_full) + p["rank_weight"] / full_rank)
    score = score + np.where(full, bonus, 0.0)
    score = score + np.where(
        partial, p["partial_weight"] * np.maximum(np.nan_to_num(lex), 0.0), 0.0
    )
    kept = full | (has_cos & (np.nan_to_num(cos, nan=-np.inf) >= p["floor"]))
    score = np.where(kept, score, -np.inf)

    # rank of each relevant document: kept documents before it (higher score,
    # or the same score and listed earlier, as ``fuse`` breaks ties)
    best = np.full(len(p["floor"]), TOP, dtype=np.int64)
    order = np.arange(len(keys))
    for j in relevant:
        s_j = score[:, j : j + 1]
        ahead = (score > s_j) | ((score == s_j) & (order < j))
        rank = np.where(kept[:, j], (ahead & kept).sum(axis=1), TOP)
        best = np.minimum(best, rank)
    return np.where(best < TOP, 1.0 / (best + 1), 0.0).astype(np.float32)


def tune(grid: Grid, queries: Sequence[int]) -> FusionParams:
    """The grid point with the best objective over ``queries``: their MRR@10,
    minus ``SHORTFALL_PENALTY`` times each query style's shortfall against the
    better of full text and vector alone on that style (the hybrid must not
    lose to either on any kind of query, not just on the mix).

    Many grid points tie on a few hundred queries; each point is scored by the
    mean objective of itself and its grid neighbours (one step along each
    parameter), which picks the middle of a plateau rather than its edge, and
    ties are broken by its own objective."""
    idx = np.array(list(queries))
    objective = grid.rr[:, idx].mean(axis=1, dtype=np.float64)
    for style in np.unique(grid.styles[idx]):
        of_style = idx[grid.styles[idx] == style]
        better = grid.single[:, of_style].mean(axis=1).max()
        shortfall = np.minimum(0.0, grid.rr[:, of_style].mean(axis=1, dtype=np.float64) - better)
        objective += SHORTFALL_PENALTY * shortfall
    at = {pos: p for p, pos in enumerate(grid.positions)}

    def smoothed(p: int) -> float:
        pos = grid.positions[p]
        around = [p]
        for d in range(len(pos)):
            for step in (-1, 1):
                other = at.get((*pos[:d], pos[d] + step, *pos[d + 1 :]))
                if other is not None:
                    around.append(other)
        return float(objective[around].mean())

    best = max(range(len(grid.positions)), key=lambda p: (smoothed(p), objective[p]))
    return grid.params(best)


def folds(n: int) -> list[list[int]]:
    """``FOLDS`` disjoint query sets covering all ``n`` queries (fixed seed)."""
    order = list(range(n))
    np.random.default_rng(FOLD_SEED).shuffle(order)
    return [sorted(order[f::FOLDS]) for f in range(FOLDS)]


def cross_validated(
    cands: Candidates, ft_form: str, grid: Grid
) -> tuple[list[list[int]], list[FusionParams]]:
    """Each query ranked by ``fuse`` with the parameters tuned on the other
    folds (so its own relevance labels never chose them); and those parameters."""
    ft = cands.fulltext[ft_form]
    n = len(cands.queries)
    ranked: list[list[int]] = [[] for _ in range(n)]
    chosen = []
    for fold in folds(n):
        held_out = set(fold)
        params = tune(grid, [i for i in range(n) if i not in held_out])
        chosen.append(params)
        for i in fold:
            ranked[i] = keys_of(
                fuse(ft[i], cands.vector[i], limit=TOP, words=cands.queries[i].words, params=params)
            )
    return ranked, chosen


def _params_at(pos: tuple[int, ...]) -> FusionParams:
    values: dict[str, Any] = {name: GRID[name][i] for name, i in zip(GRID, pos, strict=True)}
    for name in ("short_query", "long_query"):
        values[name] = int(values[name])
    return dataclasses.replace(DEFAULT_PARAMS, **values)


def check_grid(grid: Grid, cands: Candidates, ft_form: str) -> None:
    """The grid's reciprocal ranks at the shipped point must be ``fuse``'s."""
    point = next((p for p in range(len(grid.positions)) if grid.params(p) == DEFAULT_PARAMS), None)
    if point is None:
        print("note: the shipped parameters are not a point of GRID", file=sys.stderr)
        return
    ft = cands.fulltext[ft_form]
    for i, (f, v, q) in enumerate(zip(ft, cands.vector, cands.queries, strict=True)):
        fused = evaluate([keys_of(fuse(f, v, limit=TOP, words=q.words))], [q]).mrr
        if abs(fused - float(grid.rr[point, i])) > 1e-6:
            raise AssertionError(
                f"grid_scores and fuse disagree on {q.qid}: {grid.rr[point, i]} vs {fused}"
            )
