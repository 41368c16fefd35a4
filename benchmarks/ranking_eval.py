"""Search ranking quality on several evaluation sets of different kinds:
lexical (BM25), vector, hybrid, and a plain BM25 baseline, held out.

Runs the ranking code the API runs, offline and without HTTP:
``embeddings.lexical.LexicalIndex`` (the lexical index each Api process
holds), FAISS inner product over all-MiniLM-L6-v2 vectors (what the
VectorIndex does; ``FaissIndex`` is exact at this size) and
``embeddings.ranking.hybrid`` (the fusion of ``serve_app.services.search``).

Sets (each with a fixed dev/test split stored in its queries file; the test
part is never used for any choice):

* ``docs``: ``benchmarks/search_eval`` (man pages, docstrings, READMEs as
  write-ups; paraphrase, keyword and handwritten queries), reported per style;
* ``code``: ``benchmarks/search_eval/code`` (functions of installed packages
  without their docstrings; the docstring's summary is the query).

The fusion's parameters (the lexical share of a convex combination for a
query that BM25 explains completely, how fast it falls as the best BM25 hit
explains less, how much it grows with the best hit's lead over the second)
and its form (against
reciprocal rank fusion) are chosen on the dev queries of all groups, by the
worst group's shortfall against the better of its two halves (then the mean);
*leave one group out* chooses them on the other groups' dev queries only and
scores the group left out: the estimate for a kind of data the fusion was
not tuned on. Noise is the paired standard error over queries of the
difference in reciprocal rank.

    .venv/bin/python -m benchmarks.ranking_eval [--no-docs] [--tune-fields] [--dev]

``--dev`` computes nothing on the test queries: the choice, each group's dev
figures and leave one group out on dev (what to look at while developing).

Writes the "Search ranking quality" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.ranking_bench import (
    DOCS,
    END_MARK,
    NONSENSE,
    ROOT,
    START_MARK,
    Query,
    Score,
    cached_vectors,
    embed_text,
    evaluate,
    run_vector,
)
from embeddings.lexical import LexicalIndex, LexicalParams
from embeddings.ranking import HybridParams, hybrid, rrf

# ROOT, DOCS and the section's marks are ranking_bench's: this evaluation
# writes the section that bench used to write.
EVAL = ROOT / "benchmarks" / "search_eval"
SETS = {"docs": EVAL, "code": EVAL / "code"}
CANDIDATES = 100  # hits per half handed to the fusion (the API asks for at least 50)
TOP = 10
WEIGHTS = [round(0.05 * i, 2) for i in range(13)] + [0.8, 1.0]
COVERAGE_POWERS = [0.0, 2.0, 4.0, 8.0, 16.0]  # 0: the coverage does not count
# 0: the margin does not count (the form before). The grid first ended at 2, then
# 4: the dev choice sat at its end both times, and was extended (on dev only).
MARGIN_WEIGHTS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0]
RRF_KS = [1, 5, 10, 20, 40, 60, 100]
# The previous default (issue 23, first round), reported for comparison.
PREVIOUS = HybridParams(lexical_weight=0.3, coverage_power=8.0, margin_weight=0.0)
NOISE_SE = 2.0  # "within noise": a shortfall of at most this many paired standard errors
FIELD_GRID = [
    {"title": t, "description": d, "tags": d, "content": 1} for t in (1, 2, 3) for d in (1, 2)
]


@dataclass
class EvalSet:
    name: str
    docs: list[dict[str, Any]]
    queries: list[Query]


def key(doc_id: str) -> int:
    return int(doc_id.lstrip("dc"))


def load(name: str) -> EvalSet:
    path = SETS[name]
    with gzip.open(path / "corpus.jsonl.gz", "rt") as f:
        docs = [json.loads(line) for line in f]
    queries = []
    with (path / "queries.jsonl").open() as f:
        for line in f:
            q = json.loads(line)
            queries.append(
                Query(
                    q["qid"],
                    q["query"],
                    frozenset(key(r) for r in q["relevant"]),
                    q["style"],
                    q["split"],
                )
            )
    return EvalSet(name, docs, queries)


def fields(doc: dict[str, Any]) -> dict[str, str | None]:
    return {"title": doc["title"], "description": doc["description"], "content": doc["content"]}


# --------------------------------------------------------------------------- the halves


def lexical_index(s: EvalSet, params: LexicalParams | None = None) -> tuple[LexicalIndex, float]:
    index = LexicalIndex(params) if params else LexicalIndex()
    t0 = time.perf_counter()
    index.add((key(d["id"]), fields(d)) for d in s.docs)
    index.commit()
    return index, time.perf_counter() - t0


def run_lexical(index: LexicalIndex, queries: Sequence[Query]) -> list[list[tuple[int, float]]]:
    return [index.search(q.text, CANDIDATES) for q in queries]


def run_bm25s(s: EvalSet) -> list[list[tuple[int, float]]]:
    """Textbook BM25 (bm25s, Lucene variant, k1 1.5, b 0.75) over
    title + description + content as one text, scikit-learn's tokenizer
    (lowercase words of 2+ characters), English stop words, no stemming."""
    import bm25s

    ids = [key(d["id"]) for d in s.docs]
    texts = [f"{d['title']}\n{d['description']}\n{d['content']}" for d in s.docs]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    out = []
    for q in s.queries:
        tok = bm25s.tokenize([q.text], stopwords="en", show_progress=False)
        if not tok.vocab:
            out.append([])
            continue
        docs, scores = retriever.retrieve(
            tok, k=min(CANDIDATES, len(ids)), show_progress=False, n_threads=1
        )
        out.append(
            [(ids[int(d)], float(x)) for d, x in zip(docs[0], scores[0], strict=True) if x > 0]
        )
    return out


@dataclass
class Halves:
    lexical: list[list[tuple[int, float]]]
    vector: list[list[tuple[int, float]]]
    bm25: list[list[tuple[int, float]]]
    scales: list[float]
    nonsense_scales: list[float]
    nonsense_lexical: list[list[tuple[int, float]]]
    nonsense_vector: list[list[tuple[int, float]]]
    build_s: float
    query_ms: float


def halves(s: EvalSet, model_box: list[Any]) -> Halves:
    index, build_s = lexical_index(s)
    t0 = time.perf_counter()
    lexical = run_lexical(index, s.queries)
    query_ms = (time.perf_counter() - t0) * 1000 / max(1, len(s.queries))
    doc_vecs, _ = cached_vectors(f"{s.name}-docs", [embed_text(d) for d in s.docs], model_box)
    texts = [q.text for q in s.queries] + NONSENSE
    query_vecs, _ = cached_vectors(f"{s.name}-queries", texts, model_box)
    ids = np.asarray([key(d["id"]) for d in s.docs], dtype=np.int64)
    vectors = run_vector(doc_vecs, ids, query_vecs, CANDIDATES)
    n = len(s.queries)
    return Halves(
        lexical=lexical,
        vector=vectors[:n],
        bm25=run_bm25s(s),
        scales=[index.scale(q.text) for q in s.queries],
        nonsense_scales=[index.scale(t) for t in NONSENSE],
        nonsense_lexical=[index.search(t, CANDIDATES) for t in NONSENSE],
        nonsense_vector=vectors[n:],
        build_s=build_s,
        query_ms=query_ms,
    )


# --------------------------------------------------------------------------- fusions

Fusion = Callable[[list[tuple[int, float]], list[tuple[int, float]], float], list[int]]


def convex(params: HybridParams) -> Fusion:

    def fused(
        lex: list[tuple[int, float]], vec: list[tuple[int, float]], scale: float
    ) -> list[int]:
        ranked = hybrid(lex, vec, limit=TOP, params=params, lexical_scale=scale)
        return [int(r.key) for r in ranked]  # type: ignore[call-overload]

    return fused


def rrf_k(k: int) -> Fusion:
    return lambda lex, vec, _: [key for key, _ in rrf(lex, vec, limit=TOP, k=k)]


def convex_name(p: HybridParams) -> str:
    return f"convex w={p.lexical_weight:g} k={p.coverage_power:g} a={p.margin_weight:g}"


def candidates_of() -> dict[str, Fusion]:
    grid = [
        HybridParams(lexical_weight=w, coverage_power=k, margin_weight=a)
        for a in MARGIN_WEIGHTS
        for k in COVERAGE_POWERS
        for w in WEIGHTS
    ]
    out = {convex_name(p): convex(p) for p in grid}
    out.update({f"RRF k={k}": rrf_k(k) for k in RRF_KS})
    return out


# --------------------------------------------------------------------------- groups

Group = tuple[str, str | None]  # (set, style or None for the whole set)


def group_name(g: Group) -> str:
    return g[0] if g[1] is None else f"{g[0]}/{g[1]}"


def members(s: EvalSet, style: str | None, split: str) -> list[int]:
    return [
        i
        for i, q in enumerate(s.queries)
        if (style is None or q.style == style) and split in ("all", q.split)
    ]


def score(ranked: Sequence[Sequence[int]], s: EvalSet, idx: Sequence[int]) -> Score:
    return evaluate([ranked[i] for i in idx], [s.queries[i] for i in idx])


def reciprocal_ranks(ranked: Sequence[Sequence[int]], s: EvalSet, idx: Sequence[int]) -> np.ndarray:
    """Each query's reciprocal rank of its first relevant hit in the top TOP (0 if none)."""
    out = []
    for i in idx:
        top = list(ranked[i])[:TOP]
        first = next((r for r, k in enumerate(top) if k in s.queries[i].relevant), None)
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


def gap(
    a: Sequence[Sequence[int]], b: Sequence[Sequence[int]], s: EvalSet, idx: Sequence[int]
) -> Gap:
    d = reciprocal_ranks(a, s, idx) - reciprocal_ranks(b, s, idx)
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    return Gap(float(d.mean()) if len(d) else 0.0, se)


def keys(hits: Sequence[tuple[int, float]]) -> list[int]:
    return [k for k, _ in hits]


def choose(
    fused: dict[str, dict[str, list[list[int]]]],
    base: dict[str, dict[str, list[list[int]]]],
    sets: dict[str, EvalSet],
    groups: Sequence[Group],
) -> str:
    """The fusion with the best objective over the dev queries of ``groups``:
    the largest worst-case difference between a group's MRR@10 and the
    better of its two halves' (the hybrid must not lose to either half on
    any kind of data, not only on the mix), then the largest mean MRR@10 of
    the groups; then the first candidate."""
    better: dict[Group, float] = {}
    for set_name, style in groups:
        s = sets[set_name]
        idx = members(s, style, "dev")
        better[(set_name, style)] = max(
            score(base[set_name][h], s, idx).mrr for h in ("lexical", "vector")
        )

    def objective(name: str) -> tuple[float, float]:
        mrrs = {
            (set_name, style): score(
                fused[set_name][name], sets[set_name], members(sets[set_name], style, "dev")
            ).mrr
            for set_name, style in groups
        }
        worst = min(mrrs[g] - better[g] for g in groups)
        return round(worst, 4), round(statistics.mean(mrrs.values()), 6)

    names = list(next(iter(fused.values())))
    return max(names, key=lambda n: (*objective(n), -names.index(n)))


# --------------------------------------------------------------------------- report


def fmt(s: Score) -> str:
    return f"{s.mrr:.3f} / {s.recall:.3f}"


def tune_fields(sets: dict[str, EvalSet]) -> None:
    """Lexical MRR@10 on the dev queries for each point of FIELD_GRID."""
    for weights in FIELD_GRID:
        parts = []
        for s in sets.values():
            index, _ = lexical_index(s, LexicalParams(weights=weights))
            idx = members(s, None, "dev")
            ranked = [keys(index.search(s.queries[i].text, TOP)) for i in idx]
            parts.append(evaluate(ranked, [s.queries[i] for i in idx]).mrr)
        print(weights, " ".join(f"{p:.3f}" for p in parts), f"mean {statistics.mean(parts):.3f}")


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
    args = parser.parse_args(argv)
    sets = {name: load(name) for name in SETS}
    if args.tune_fields:
        tune_fields(sets)
        return
    model_box: list[Any] = []
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = {name: halves(s, model_box) for name, s in sets.items()}
    if args.dev:
        for name in SETS:
            sets[name], got[name] = dev_only(sets[name], got[name])
    fusions = candidates_of()
    base: dict[str, dict[str, list[list[int]]]] = {}
    fused: dict[str, dict[str, list[list[int]]]] = {}
    for name, h in got.items():
        base[name] = {
            "plain BM25 (bm25s)": [keys(x) for x in h.bm25],
            "lexical": [keys(x) for x in h.lexical],
            "vector": [keys(x) for x in h.vector],
        }
        fused[name] = {
            f: [
                fn(lex, vec, sc) for lex, vec, sc in zip(h.lexical, h.vector, h.scales, strict=True)
            ]
            for f, fn in fusions.items()
        }
    groups: list[Group] = [("docs", st) for st in ("paraphrase", "keyword", "handwritten")]
    groups.append(("code", None))
    chosen = choose(fused, base, sets, groups)
    left_out = {
        group_name(g): choose(fused, base, sets, [o for o in groups if o != g]) for g in groups
    }
    if args.dev:
        print(dev_report(sets, base, fused, groups, chosen, left_out))
        return
    rows = {**{m: m for m in base["docs"]}, "hybrid": chosen}
    report_groups: list[Group] = [("docs", None), *groups]
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
    previous = convex_name(PREVIOUS)
    table[f"previous default ({previous})"] = {
        group_name(g): score(fused[g[0]][previous], sets[g[0]], members(sets[g[0]], g[1], "test"))
        for g in report_groups
    }
    for label, pick in (
        (
            "previous form (a=0), tuned the same way",
            lambda f: f.startswith("convex") and f.endswith(" a=0"),
        ),
        (
            "fixed weight (k=0, a=0), tuned the same way",
            lambda f: f.startswith("convex") and f.endswith(" k=0 a=0"),
        ),
        ("RRF, tuned the same way", lambda f: f.startswith("RRF")),
    ):
        subset = {n: {f: v for f, v in fs.items() if pick(f)} for n, fs in fused.items()}
        best = choose(subset, base, sets, groups)
        table[f"{label} ({best})"] = {
            group_name(g): score(fused[g[0]][best], sets[g[0]], members(sets[g[0]], g[1], "test"))
            for g in report_groups
        }
    # Paired differences on the test queries, with their standard errors.
    gaps: dict[str, dict[str, tuple[str, Gap]]] = {
        "hybrid": {},
        "hybrid, leave one group out": {},
        "lexical vs plain BM25": {},
    }
    for g in report_groups:
        s, idx, n = sets[g[0]], members(sets[g[0]], g[1], "test"), group_name(g)
        lx, vx = table["lexical"][n].mrr, table["vector"][n].mrr
        half = "lexical" if lx >= vx else "vector"
        gaps["hybrid"][n] = (half, gap(fused[g[0]][chosen], base[g[0]][half], s, idx))
        if n in left_out:
            gaps["hybrid, leave one group out"][n] = (
                half,
                gap(fused[g[0]][left_out[n]], base[g[0]][half], s, idx),
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
            hybrid(lx, vx, limit=TOP, params=p, lexical_scale=sc)
            for lx, vx, sc in zip(
                h.nonsense_lexical, h.nonsense_vector, h.nonsense_scales, strict=True
            )
        ]
        nonsense[name] = (sum(1 for r in res if not r), statistics.mean(len(r) for r in res))
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    text = render(sets, got, table, gaps, report_groups, chosen, left_out, nonsense, rss1 - rss0)
    print(text)
    if not args.no_docs:
        write_docs(text)


def dev_only(s: EvalSet, h: Halves) -> tuple[EvalSet, Halves]:
    """The set and its halves restricted to the dev queries (``--dev``)."""
    idx = [i for i, q in enumerate(s.queries) if q.split == "dev"]
    return EvalSet(s.name, s.docs, [s.queries[i] for i in idx]), replace(
        h,
        lexical=[h.lexical[i] for i in idx],
        vector=[h.vector[i] for i in idx],
        bm25=[h.bm25[i] for i in idx],
        scales=[h.scales[i] for i in idx],
    )


def dev_report(
    sets: dict[str, EvalSet],
    base: dict[str, dict[str, list[list[int]]]],
    fused: dict[str, dict[str, list[list[int]]]],
    groups: Sequence[Group],
    chosen: str,
    left_out: dict[str, str],
) -> str:
    """Dev MRR@10 per group of the halves, the previous default and the
    chosen fusion, and each one's difference from the group's better half
    (± paired SE), with leave one group out scored on the left-out group's
    dev queries. The keyword style is also split into its first 40 queries
    and the extra ones (query ids ``x…``, ``build.py --extra-dev``)."""
    previous = convex_name(PREVIOUS)
    rows: list[tuple[str, str, list[int]]] = []
    for g in groups:
        s = sets[g[0]]
        idx = members(s, g[1], "dev")
        rows.append((group_name(g), g[0], idx))
        if g == ("docs", "keyword"):
            for label, extra in (("first", False), ("extra", True)):
                sub = [i for i in idx if s.queries[i].qid.startswith("x") == extra]
                rows.append((f"docs/keyword ({label})", "docs", sub))
    lines = [
        f"chosen on dev: {chosen}",
        "leave one group out: " + "; ".join(f"{g}: {c}" for g, c in left_out.items()),
        "",
        "| dev group (n) | lexical | vector | previous - better | chosen - better "
        "| left out - better |",
        "|---|---:|---:|---|---|---|",
    ]
    for label, set_name, idx in rows:
        s = sets[set_name]
        lx = score(base[set_name]["lexical"], s, idx).mrr
        vx = score(base[set_name]["vector"], s, idx).mrr
        better = base[set_name]["lexical" if lx >= vx else "vector"]
        cells = []
        for method in (previous, chosen, left_out.get(label)):
            if method is None:
                cells.append("")
                continue
            mrr = score(fused[set_name][method], s, idx).mrr
            cells.append(f"{mrr:.3f} ({gap(fused[set_name][method], better, s, idx)})")
        lines.append(f"| {label} ({len(idx)}) | {lx:.3f} | {vx:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chosen_params(name: str) -> HybridParams:
    """The HybridParams of a "convex w=… k=… a=…" candidate (the defaults for RRF)."""
    if not name.startswith("convex"):
        return HybridParams()
    values = dict(part.split("=") for part in name.split()[1:])
    return HybridParams(
        lexical_weight=float(values["w"]),
        coverage_power=float(values["k"]),
        margin_weight=float(values["a"]),
    )


def render(
    sets: dict[str, EvalSet],
    got: dict[str, Halves],
    table: dict[str, dict[str, Score]],
    gaps: dict[str, dict[str, tuple[str, Gap]]],
    groups: Sequence[Group],
    chosen: str,
    left_out: dict[str, str],
    nonsense: dict[str, tuple[int, float]],
    rss_kib: int,
) -> str:
    names = [group_name(g) for g in groups]
    counts = {group_name(g): len(members(sets[g[0]], g[1], "test")) for g in groups}
    lines = [
        "## Search ranking quality",
        "",
        "_Written by `benchmarks/ranking_eval.py`; rerun to replace this section._",
        "",
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine (2 cores) shared with other "
        "work.",
        "- Sets (each split once into dev and test, stored with the queries; **every figure "
        "below is on the test part**, which no choice saw):",
    ]
    for name, s in sets.items():
        dev = sum(1 for q in s.queries if q.split == "dev")
        lines.append(
            f"  - `{name}`: {len(s.docs):,} documents, {len(s.queries)} queries "
            f"({dev} dev / {len(s.queries) - dev} test). "
            + (
                "Man pages, Python docstrings and package READMEs as write-ups; paraphrase, "
                "keyword and handwritten queries (`benchmarks/search_eval/README.md`)."
                if name == "docs"
                else "Functions of 113 installed packages published as patterns: title the "
                "qualified name, description the `def` line, content the source without its "
                "docstring; the query is the docstring's summary sentence "
                "(`benchmarks/search_eval/code_build.py`)."
            )
        )
    lines += [
        "- Methods: *plain BM25* is `bm25s` (Lucene BM25, k1 1.5, b 0.75) over title, description "
        "and content as one text with scikit-learn's tokenizer and English stop words: the "
        "textbook baseline. *lexical* is `embeddings.lexical.LexicalIndex` (what the API ranks "
        "full text with): BM25 with BM25F-style field weights (title and description twice, "
        "content once) and the code-aware tokenizer. "
        "*vector*: all-MiniLM-L6-v2, cosine, exact. *hybrid*: `embeddings.ranking.hybrid` over "
        f"the {CANDIDATES} best of each half.",
        f"- Fusion chosen on the dev queries of all four groups: **{chosen}** (the candidates: "
        "convex combinations `W·x + (1-W)·cosine`, x = min(bm25/scale, 1.5) (scale: the "
        "summed IDF of the query's terms), with a per-query weight W = min(1, c^k·(w + a·m)), "
        "c = the best BM25 hit's x capped at 1 (how much of the query the best lexical match "
        "explains), m = 1 - x2/x1 of the two best BM25 hits (how far the best leads); "
        f"w in {WEIGHTS}, k in {COVERAGE_POWERS}, a in {MARGIN_WEIGHTS} (a = 0: the previous "
        "form; k = a = 0: a fixed weight); and "
        f"reciprocal rank fusion with k in {RRF_KS}; objective: the worst group's dev MRR@10 "
        "minus its better half's, then the mean dev MRR@10). Leave one group out (chosen "
        "without that group's queries): "
        + "; ".join(f"{g}: {c}" for g, c in left_out.items())
        + ".",
        "",
        "MRR@10 / Recall@10, test queries:",
        "",
        "| Method | " + " | ".join(f"{n} (n={counts[n]})" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for label, row in table.items():
        lines.append(
            f"| {label} | " + " | ".join(fmt(row[n]) if n in row else "" for n in names) + " |"
        )
    lines += [
        "",
        "Differences of test MRR@10, ± the paired standard error over the group's queries "
        "(standard deviation of the per-query difference of reciprocal ranks / √n). "
        f"Pass criterion: the difference is ≥ 0, or within noise: ≥ -{NOISE_SE:g} standard "
        "errors. The better half is the one with the higher test MRR@10 on that group.",
        "",
        "| Comparison | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    titles = {
        "hybrid": "hybrid - better half",
        "hybrid, leave one group out": "hybrid (leave one group out) - better half",
        "lexical vs plain BM25": "lexical - plain BM25",
    }
    for label, grow in gaps.items():
        cells = [
            f"{grow[n][1]}" + (f" vs {grow[n][0]}" if label != "lexical vs plain BM25" else "")
            if n in grow
            else ""
            for n in names
        ]
        lines.append(f"| {titles[label]} | " + " | ".join(cells) + " |")
    lines += [""]
    for name, h in got.items():
        empty, mean = nonsense[name]
        lines.append(
            f"- `{name}`: lexical index built in {h.build_s:.1f} s "
            f"({len(sets[name].docs):,} documents, tokenizing included), "
            f"{h.query_ms:.2f} ms a query (top {CANDIDATES}); off-topic queries "
            f"({len(NONSENSE)}): {empty} come back empty from the hybrid, "
            f"{mean:.1f} results on average."
        )
    lines += [
        "- Peak RSS growth of the run (both sets' indexes, vectors, model): "
        f"{rss_kib / 1024:.0f} MiB.",
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.ranking_eval` (vectors cached under "
        "`/tmp/cairn-ranking-bench`; the first run embeds both sets, a few minutes on 2 cores). "
        "`--tune-fields` prints the dev MRR@10 of the field-weight grid.",
    ]
    return "\n".join(lines)


def write_docs(section: str, path: Path = DOCS) -> None:
    text = path.read_text()
    start, end = text.index(START_MARK), text.index(END_MARK)
    path.write_text(text[: start + len(START_MARK)] + "\n" + section + "\n" + text[end:])
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
