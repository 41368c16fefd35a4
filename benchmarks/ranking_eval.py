"""Search ranking quality on several evaluation sets of different kinds:
lexical (BM25), vector, hybrid, and a plain BM25 baseline, held out.

Runs the ranking code the API runs, offline and without HTTP:
``retrieval.lexical.LexicalIndex`` (the lexical index each Api process
holds), FAISS inner product over all-MiniLM-L6-v2 vectors (what the
VectorIndex does; ``FaissIndex`` is exact at this size) and
``retrieval.fusion.hybrid`` (the fusion of ``serve_app.services.search``).

Sets (each with a fixed dev/test split stored in its queries file; the test
part is never used for any choice):

* ``docs``: ``benchmarks/search_eval`` (man pages, docstrings, READMEs as
  write-ups; paraphrase, keyword and handwritten queries), reported per style;
* ``code``: ``benchmarks/search_eval/code`` (functions of installed packages
  without their docstrings; the docstring's summary is the query);
* ``params``: ``benchmarks/search_eval/params`` (the same kind of documents;
  the documentation of one of a function's parameters is the query).

The fusion's one parameter, the lexical weight ``w`` of the fixed convex
combination (both normalisations of BM25 in the grid), is chosen on the dev
queries of all groups by the parsimony rule (``hybrid.choose``): the
least lexical weight at which no group's MRR@10 or Recall@10 falls below the
better of its two halves (where none is, the least shortfall). *Leave one
group out* chooses it on the other groups' dev queries only and scores the
group left out: the estimate for a kind of data the fusion was not tuned on;
the rule before parsimony (best mean MRR@10 among equal shortfalls) is
scored the same way for comparison. Noise is the paired standard error over
queries of the difference in reciprocal rank (or recall).

    .venv/bin/python -m benchmarks.ranking_eval [--no-docs] [--tune-fields] [--dev] [--forms]

``--dev`` computes nothing on the test queries: the choice, each group's dev
figures and leave one group out on dev (what to look at while developing).
``--forms`` prints the comparison of other normalisations of the two halves
(``benchmarks/ranking/forms.py``), each chosen the same way, and writes
nothing.

Writes the "Search ranking quality" section of docs/benchmarks.md. The
evaluation is ``benchmarks/ranking/hybrid.py``, the section
``benchmarks/ranking/hybrid_report.py``; the set's reading, metrics and
vectors are in ``benchmarks/ranking/evalset.py`` and ``vectors.py`` (shared with
``trust_bench``).
"""

from __future__ import annotations

import argparse
import resource
import statistics
from typing import Any

from benchmarks.ranking.evalset import NONSENSE, Score
from benchmarks.ranking.hybrid import (
    PREVIOUS,
    SETS,
    TOP,
    EvalSet,
    Gap,
    Group,
    Halves,
    candidates_of,
    choose,
    chosen_params,
    dev_only,
    gap,
    group_name,
    halves,
    keys,
    load,
    members,
    product_names,
    score,
    tune_fields,
)
from benchmarks.ranking.hybrid_report import BEFORE, Choice, dev_report, render, write_docs
from retrieval.fusion import DEFAULT_HYBRID, hybrid


def bases(got: dict[str, Halves]) -> dict[str, dict[str, list[list[int]]]]:
    """Each set's rankings by the halves and the plain BM25 baseline."""
    return {
        name: {
            "plain BM25 (bm25s)": [keys(x) for x in h.bm25],
            "lexical": [keys(x) for x in h.lexical],
            "vector": [keys(x) for x in h.vector],
        }
        for name, h in got.items()
    }


def all_groups(sets: dict[str, EvalSet]) -> list[Group]:
    """The groups a choice must serve: docs by query style, the other sets whole."""
    groups: list[Group] = []
    if "docs" in sets:
        groups += [("docs", st) for st in ("paraphrase", "keyword", "handwritten")]
    return groups + [(name, None) for name in sets if name != "docs"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-docs", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--tune-fields", action="store_true", help="grid of field weights, dev")
    parser.add_argument(
        "--dev",
        action="store_true",
        help="dev queries only: the choice, per-group dev figures and leave one group out on dev "
        "(no test figure is computed; docs/ is left alone)",
    )
    parser.add_argument(
        "--forms",
        action="store_true",
        help="compare other normalisations of the halves, each chosen the same way "
        "(printed; docs/ is left alone; several minutes)",
    )
    parser.add_argument(
        "--sets", default=",".join(SETS), help="comma-separated sets (default: all)"
    )
    args = parser.parse_args(argv)
    sets = {name: load(name) for name in args.sets.split(",")}
    if args.tune_fields:
        tune_fields(sets)
        return
    model_box: list[Any] = []
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = {name: halves(s, model_box) for name, s in sets.items()}
    if args.forms:
        from benchmarks.ranking import forms

        print(forms.report(sets, got, bases(got), all_groups(sets)))
        return
    if args.dev:
        for name in list(sets):
            sets[name], got[name] = dev_only(sets[name], got[name])
    fusions = candidates_of()
    base = bases(got)
    fused: dict[str, dict[str, list[list[int]]]] = {}
    for name, h in got.items():
        texts = [q.text for q in sets[name].queries]
        fused[name] = {
            f: [
                fn(lex, vec, sc, t)
                for lex, vec, sc, t in zip(h.lexical, h.vector, h.scales, texts, strict=True)
            ]
            for f, fn in fusions.items()
        }
    groups = all_groups(sets)
    product = product_names(fused)
    chosen = choose(fused, base, sets, groups, product)
    left_out = {
        group_name(g): choose(fused, base, sets, [o for o in groups if o != g], product)
        for g in groups
    }
    # The rule before parsimony (best mean MRR@10 among equal shortfalls), for comparison.
    left_out_before = {
        group_name(g): choose(
            fused, base, sets, [o for o in groups if o != g], product, parsimony=False
        )
        for g in groups
    }
    if args.dev:
        print(dev_report(sets, base, fused, groups, chosen, left_out))
        return
    rows = {**{m: m for m in next(iter(base.values()))}, "hybrid": chosen}
    report_groups: list[Group] = [("docs", None), *groups] if "docs" in sets else groups
    table: dict[str, dict[str, Score]] = {}
    for label, method in rows.items():
        table[label] = {}
        for g in report_groups:
            s = sets[g[0]]
            ranked = (base if method in base[g[0]] else fused)[g[0]][method]
            table[label][group_name(g)] = score(ranked, s, members(s, g[1], "test"))
    table["hybrid, leave one group out"] = {}
    for g in groups:
        s = sets[g[0]]
        ranked = fused[g[0]][left_out[group_name(g)]]
        table["hybrid, leave one group out"][group_name(g)] = score(
            ranked, s, members(s, g[1], "test")
        )
    table[BEFORE] = {}
    for g in groups:
        s = sets[g[0]]
        ranked = fused[g[0]][left_out_before[group_name(g)]]
        table[BEFORE][group_name(g)] = score(ranked, s, members(s, g[1], "test"))
    table[PREVIOUS] = {
        group_name(g): score(fused[g[0]][PREVIOUS], sets[g[0]], members(sets[g[0]], g[1], "test"))
        for g in report_groups
    }
    for label, pick in (
        ("no exact-identifier rule, tuned the same way", lambda f: f.endswith("no-rule")),
        ("RRF, tuned the same way", lambda f: f.startswith("RRF")),
    ):
        names = [f for f in fusions if pick(f)]
        best = choose(fused, base, sets, groups, names)
        table[f"{label} ({best})"] = {
            group_name(g): score(fused[g[0]][best], sets[g[0]], members(sets[g[0]], g[1], "test"))
            for g in report_groups
        }
    # Paired differences on the test queries, with their standard errors.
    gaps: dict[str, dict[str, tuple[str, Gap]]] = {
        "hybrid": {},
        "hybrid, leave one group out": {},
        "hybrid recall": {},
        "hybrid recall, leave one group out": {},
        BEFORE: {},
        f"{BEFORE} recall": {},
        "lexical vs plain BM25": {},
    }
    for g in report_groups:
        s, idx, n = sets[g[0]], members(sets[g[0]], g[1], "test"), group_name(g)
        lx, vx = table["lexical"][n], table["vector"][n]
        half = "lexical" if lx.mrr >= vx.mrr else "vector"
        rhalf = "lexical" if lx.recall >= vx.recall else "vector"
        gaps["hybrid"][n] = (half, gap(fused[g[0]][chosen], base[g[0]][half], s, idx))
        gaps["hybrid recall"][n] = (
            rhalf,
            gap(fused[g[0]][chosen], base[g[0]][rhalf], s, idx, recall=True),
        )
        if n in left_out:
            gaps["hybrid, leave one group out"][n] = (
                half,
                gap(fused[g[0]][left_out[n]], base[g[0]][half], s, idx),
            )
            gaps["hybrid recall, leave one group out"][n] = (
                rhalf,
                gap(fused[g[0]][left_out[n]], base[g[0]][rhalf], s, idx, recall=True),
            )
        if n in left_out_before:
            gaps[BEFORE][n] = (half, gap(fused[g[0]][left_out_before[n]], base[g[0]][half], s, idx))
            gaps[f"{BEFORE} recall"][n] = (
                rhalf,
                gap(fused[g[0]][left_out_before[n]], base[g[0]][rhalf], s, idx, recall=True),
            )
        gaps["lexical vs plain BM25"][n] = (
            "plain BM25",
            gap(base[g[0]]["lexical"], base[g[0]]["plain BM25 (bm25s)"], s, idx),
        )
    # The nonsense queries with the chosen weight.
    nonsense = {}
    for name, h in got.items():
        p = chosen_params(chosen)
        res = [
            hybrid(lx, vx, limit=TOP, params=p, lexical_scale=sc, query=t)
            for lx, vx, sc, t in zip(
                h.nonsense_lexical, h.nonsense_vector, h.nonsense_scales, NONSENSE, strict=True
            )
        ]
        nonsense[name] = (sum(1 for r in res if not r), statistics.mean(len(r) for r in res))
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    text = render(
        sets,
        got,
        table,
        gaps,
        report_groups,
        Choice(chosen, left_out, left_out_before, chosen_params(chosen) == DEFAULT_HYBRID),
        nonsense,
        rss1 - rss0,
    )
    print(text)
    if not args.no_docs:
        write_docs(text)


if __name__ == "__main__":
    main()
