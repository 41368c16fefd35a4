"""ranking_bench's vectorized grid search (benchmarks/ranking/fusion.py) must rank exactly as
embeddings.ranking.fuse does (it re-implements fuse's arithmetic with numpy)."""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np

from benchmarks.ranking import evalset as es
from benchmarks.ranking import fusion
from embeddings.ranking import ALL_WORDS, DEFAULT_PARAMS, fuse

VALUES = {
    "floor": [0.25, 0.35],
    "match_bonus": [0.0, 0.2],
    "specificity": [0.0, 0.3],
    "rank_weight": [0.0, 0.1],
    "partial_weight": [0.0, 0.05],
    "missing_penalty": [0.0, 0.1],
    "short_query": [2, 3],
    "long_query": [6, 8],
    "long_query_weight": [0.0, 0.5, 1.0],
}


def _case(rng: random.Random) -> tuple[list[tuple[int, float]], list[tuple[int, float]], es.Query]:
    docs = rng.sample(range(60), 40)
    vector = sorted(((d, round(rng.uniform(0.0, 0.8), 2)) for d in docs[:30]), key=lambda h: -h[1])
    fulltext = [
        (d, ALL_WORDS + rng.random() if rng.random() < 0.3 else rng.random()) for d in docs[10:]
    ]
    fulltext.sort(key=lambda h: -h[1])
    words = rng.choice([1, 2, 4, 5, 7, 12])
    relevant = frozenset(rng.sample(docs, rng.choice([1, 2])))
    query = es.Query("q", " ".join(["w"] * words), relevant, "keyword", "test")
    return fulltext, vector, query


def test_grid_reciprocal_ranks_match_fuse() -> None:
    points = list(itertools.product(*VALUES.values()))
    arrays = {
        name: np.array([p[d] for p in points], dtype=np.float64)[:, None]
        for d, name in enumerate(VALUES)
    }
    rng = random.Random(3)
    for _ in range(30):
        fulltext, vector, query = _case(rng)
        grid = fusion._grid_rr(fulltext, vector, query, arrays)
        for i, point in enumerate(points):
            params = dataclasses.replace(DEFAULT_PARAMS, **dict(zip(VALUES, point, strict=True)))
            fused = fuse(fulltext, vector, limit=es.TOP, words=query.words, params=params)
            expected = es.evaluate([es.keys_of(fused)], [query]).mrr
            assert abs(float(grid[i]) - expected) < 1e-6, (point, query)
