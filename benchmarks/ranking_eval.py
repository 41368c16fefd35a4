"""Search ranking quality (docs/benchmarks.md): lexical, vector and hybrid on the
labelled sets under ``benchmarks/search_eval``, offline, with the API's ranking
code; the fusion's weight chosen on the dev queries, scored on the test ones.

    .venv/bin/python -m benchmarks.ranking_eval [--no-docs] [--model DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
from typing import Any

from benchmarks.harness import publish
from benchmarks.ranking import hybrid as ranking
from benchmarks.ranking.evalset import END_MARK, NONSENSE, START_MARK, Score
from benchmarks.ranking.hybrid_report import Choice, render
from retrieval.fusion import DEFAULT_HYBRID, hybrid


def bases(got: dict[str, ranking.Halves]) -> dict[str, dict[str, list[list[int]]]]:
    """Each set's rankings by the two halves."""
    return {
        name: {
            "lexical": [ranking.keys(x) for x in h.lexical],
            "vector": [ranking.keys(x) for x in h.vector],
        }
        for name, h in got.items()
    }


def all_groups(sets: dict[str, ranking.EvalSet]) -> list[ranking.Group]:
    """The groups a choice must serve: docs by query style, the other sets whole."""
    groups: list[ranking.Group] = []
    if "docs" in sets:
        groups += [("docs", st) for st in ("paraphrase", "keyword", "handwritten")]
    return groups + [(name, None) for name in sets if name != "docs"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-docs", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--sets", default=",".join(ranking.SETS), help="comma-separated (all)")
    parser.add_argument(
        "--model",
        help="a model folder (a tuned one) instead of the packaged model; print only",
    )
    args = parser.parse_args(argv)
    if args.model:
        # Another model's figures are read beside the packaged one's, never
        # in their place in docs/ (issue 50: the hybrid on a tuned model).
        os.environ["CAIRN_RANKING_MODEL"] = args.model
        args.no_docs = True
    sets = {name: ranking.load(name) for name in args.sets.split(",")}
    model_box: list[Any] = []
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = {name: ranking.halves(s, model_box) for name, s in sets.items()}
    fusions = ranking.candidates_of()
    base = bases(got)
    fused: dict[str, dict[str, list[list[int]]]] = {}
    for name, h in got.items():
        texts = [q.text for q in sets[name].queries]
        halves = list(zip(h.lexical, h.vector, h.scales, texts, strict=True))
        fused[name] = {f: [fn(*a) for a in halves] for f, fn in fusions.items()}
    groups = all_groups(sets)
    chosen = ranking.choose(fused, base, sets, groups)
    left_out = {
        ranking.group_name(g): ranking.choose(fused, base, sets, [o for o in groups if o != g])
        for g in groups
    }
    report_groups: list[ranking.Group] = [("docs", None), *groups] if "docs" in sets else groups

    def test_score(
        ranked: dict[str, dict[str, list[list[int]]]], method: str, g: ranking.Group
    ) -> Score:
        idx = ranking.members(sets[g[0]], g[1], "test")
        return ranking.score(ranked[g[0]][method], sets[g[0]], idx)

    table: dict[str, dict[str, Score]] = {
        "lexical": {ranking.group_name(g): test_score(base, "lexical", g) for g in report_groups},
        "vector": {ranking.group_name(g): test_score(base, "vector", g) for g in report_groups},
        "hybrid": {ranking.group_name(g): test_score(fused, chosen, g) for g in report_groups},
        "hybrid, leave one group out": {
            ranking.group_name(g): test_score(fused, left_out[ranking.group_name(g)], g)
            for g in groups
        },
    }
    # Paired differences on the test queries, with their standard errors.
    gaps: dict[str, dict[str, tuple[str, ranking.Gap]]] = {
        k: {}
        for k in (
            "hybrid",
            "hybrid, leave one group out",
            "hybrid recall",
            "hybrid recall, leave one group out",
        )
    }
    for g in report_groups:
        s, idx, n = sets[g[0]], ranking.members(sets[g[0]], g[1], "test"), ranking.group_name(g)
        lx, vx = table["lexical"][n], table["vector"][n]
        half = "lexical" if lx.mrr >= vx.mrr else "vector"
        rhalf = "lexical" if lx.recall >= vx.recall else "vector"
        for label, method in (("hybrid", chosen), ("hybrid, leave one group out", left_out.get(n))):
            if method is None:
                continue
            gaps[label][n] = (half, ranking.gap(fused[g[0]][method], base[g[0]][half], s, idx))
            recall = ranking.gap(fused[g[0]][method], base[g[0]][rhalf], s, idx, recall=True)
            gaps[label.replace("hybrid", "hybrid recall", 1)][n] = (rhalf, recall)
    # The nonsense queries with the chosen weight.
    nonsense: dict[str, tuple[int, float]] = {}
    p = ranking.chosen_params(chosen)
    for name, h in got.items():
        asked = zip(h.nonsense_lexical, h.nonsense_vector, h.nonsense_scales, NONSENSE, strict=True)
        res = [
            hybrid(lx, vx, limit=ranking.TOP, params=p, lexical_scale=sc, query=t)
            for lx, vx, sc, t in asked
        ]
        nonsense[name] = (sum(1 for r in res if not r), statistics.mean(len(r) for r in res))
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    choice = Choice(chosen, left_out, p == DEFAULT_HYBRID)
    text = render(sets, got, table, gaps, report_groups, choice, nonsense, rss_kib)
    publish(text, START_MARK, END_MARK, args.no_docs)


if __name__ == "__main__":
    main()
