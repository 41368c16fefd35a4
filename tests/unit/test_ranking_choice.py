"""How ranking_eval chooses the fusion's weight (benchmarks/ranking/hybrid.py,
``choose``): the parsimony rule, and the rule before it that lost
leave-one-group-out on the handwritten questions (docs/decisions/search-at-scale.md,
"Fusion")."""

from __future__ import annotations

from benchmarks.ranking.evalset import Query
from benchmarks.ranking.hybrid import EvalSet, choose, lexical_weight

# Two groups (styles "a" and "b") of two dev queries each; query i's relevant
# document is 10 + i. A ranking is given by the rank (1-based) at which each
# query finds its document (None: not in the top 10).
QUERIES = [Query(f"q{i}", "text", frozenset({10 + i}), "ab"[i // 2], "dev") for i in range(4)]
SETS = {"s": EvalSet("s", [], QUERIES)}
GROUPS = [("s", "a"), ("s", "b")]


def ranking(*ranks: int | None) -> list[list[int]]:
    out = []
    for i, r in enumerate(ranks):
        filler = [100 + j for j in range(10)]
        if r is not None:
            filler[r - 1] = 10 + i
        out.append(filler)
    return out


# Group a: the vector half finds both at rank 1; group b: the lexical half does.
BASE = {"s": {"lexical": ranking(3, 3, 1, 1), "vector": ranking(1, 1, 3, 3)}}


def test_lexical_weight_of_a_candidate() -> None:
    assert lexical_weight("convex w=0.15") == 0.15
    assert lexical_weight("convex w=0.2 /scale") == 0.2
    assert lexical_weight("RRF k=60") == 0.0


# A third query of group b, found at rank 2 by both halves.
FIVE = {"s": EvalSet("s", [], [*QUERIES, Query("q4", "text", frozenset({14}), "b", "dev")])}
BASE5 = {"s": {"lexical": ranking(3, 3, 1, 1, 2), "vector": ranking(1, 1, 3, 3, 2)}}


def test_parsimony_takes_the_least_weight_that_loses_to_neither_half() -> None:
    """w=0.05 falls below the lexical half on group b; w=0.1 and w=0.3 meet
    both halves on both groups, and w=0.3 beats them on b (better mean MRR).
    Parsimony takes 0.1; the rule before it took 0.3: a gain on the groups
    the choice saw, paid for on a kind of query it may not have seen."""
    fused = {
        "s": {
            "convex w=0.05": ranking(1, 1, 2, 1, 2),
            "convex w=0.1": ranking(1, 1, 1, 1, 2),
            "convex w=0.3": ranking(1, 1, 1, 1, 1),
        }
    }
    assert choose(fused, BASE5, FIVE, GROUPS) == "convex w=0.1"
    assert choose(fused, BASE5, FIVE, GROUPS, parsimony=False) == "convex w=0.3"
    # The least weight, not the first candidate.
    pool = ["convex w=0.3", "convex w=0.1", "convex w=0.05"]
    assert choose(fused, BASE5, FIVE, GROUPS, pool) == "convex w=0.1"


def test_where_every_weight_falls_short_the_least_shortfall_wins() -> None:
    """No candidate meets both halves on both groups: the one whose worst
    group falls least below wins, whatever its weight."""
    fused = {
        "s": {
            "convex w=0.05": ranking(1, 1, None, 1),  # b: MRR 0.5 below 1.0
            "convex w=0.5": ranking(2, 1, 1, 1),  # a: MRR 0.75 below 1.0
        }
    }
    assert choose(fused, BASE, SETS, GROUPS) == "convex w=0.5"
    assert choose(fused, BASE, SETS, GROUPS, parsimony=False) == "convex w=0.5"


def test_recall_counts_as_much_as_mrr() -> None:
    """A candidate that keeps MRR@10 but loses a relevant document from the
    top 10 (Recall@10) falls short."""
    queries = [Query("q0", "text", frozenset({10, 20}), "a", "dev")]
    sets = {"s": EvalSet("s", [], queries)}
    top = [10, 20, *range(100, 108)]
    base = {"s": {"lexical": [top], "vector": [top]}}
    fused = {"s": {"convex w=0.05": [[10, *range(100, 109)]], "convex w=0.2": [top]}}
    assert choose(fused, base, sets, [("s", "a")]) == "convex w=0.2"


def test_candidates_without_a_weight_go_by_mean_mrr() -> None:
    """RRF's k is no lexical weight: among candidates that both meet the
    halves, the better mean MRR@10 wins."""
    fused = {"s": {"RRF k=1": ranking(1, 1, 1, 1, 2), "RRF k=60": ranking(1, 1, 1, 1, 1)}}
    assert choose(fused, BASE5, FIVE, GROUPS) == "RRF k=60"
