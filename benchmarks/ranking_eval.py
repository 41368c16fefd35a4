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

The fusion's one parameter (the lexical share of a convex combination) and
its form (against reciprocal rank fusion) are chosen on the dev queries of
all groups; *leave one group out* chooses it on the other groups' dev
queries only and scores the group left out: the estimate for a kind of data
the fusion was not tuned on.

    .venv/bin/python -m benchmarks.ranking_eval [--no-docs] [--tune-fields]

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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.ranking_bench import (
    NONSENSE,
    Query,
    Score,
    cached_vectors,
    embed_text,
    evaluate,
    run_vector,
)
from embeddings.lexical import LexicalIndex, LexicalParams
from embeddings.ranking import HybridParams, hybrid, rrf

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "benchmarks" / "search_eval"
DOCS = ROOT / "docs" / "benchmarks.md"
START_MARK = "<!-- ranking-bench:start -->"
END_MARK = "<!-- ranking-bench:end -->"
SETS = {"docs": EVAL, "code": EVAL / "code"}
CANDIDATES = 100  # hits per half handed to the fusion (the API asks for at least 50)
TOP = 10
WEIGHTS = [round(0.05 * i, 2) for i in range(21)]
RRF_KS = [1, 5, 10, 20, 40, 60, 100]
POWERS = [1.0, 2.0, 3.0]
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


def convex(weight: float, power: float) -> Fusion:
    params = HybridParams(lexical_weight=weight, lexical_power=power)

    def fused(
        lex: list[tuple[int, float]], vec: list[tuple[int, float]], scale: float
    ) -> list[int]:
        ranked = hybrid(lex, vec, limit=TOP, params=params, lexical_scale=scale)
        return [int(r.key) for r in ranked]  # type: ignore[call-overload]

    return fused


def rrf_k(k: int) -> Fusion:
    return lambda lex, vec, _: [key for key, _ in rrf(lex, vec, limit=TOP, k=k)]


def candidates_of() -> dict[str, Fusion]:
    out = {f"convex p={p:g} w={w}": convex(w, p) for p in POWERS for w in WEIGHTS}
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


def keys(hits: Sequence[tuple[int, float]]) -> list[int]:
    return [k for k, _ in hits]


def choose(
    fused: dict[str, dict[str, list[list[int]]]],
    base: dict[str, dict[str, list[list[int]]]],
    sets: dict[str, EvalSet],
    groups: Sequence[Group],
) -> str:
    """The fusion with the best objective over the dev queries of ``groups``:
    the mean of the groups' MRR@10, with any group's shortfall against the
    better of its two halves counted three times over (the hybrid must not
    lose to either half on any kind of data, not only on the mix)."""

    def objective(name: str) -> float:
        total = 0.0
        for set_name, style in groups:
            s = sets[set_name]
            idx = members(s, style, "dev")
            mrr = score(fused[set_name][name], s, idx).mrr
            better = max(score(base[set_name][h], s, idx).mrr for h in ("lexical", "vector"))
            total += mrr + 3 * min(0.0, mrr - better)
        return total / len(groups)

    names = list(next(iter(fused.values())))
    return max(names, key=lambda n: (round(objective(n), 6), -names.index(n)))


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
    args = parser.parse_args(argv)
    sets = {name: load(name) for name in SETS}
    if args.tune_fields:
        tune_fields(sets)
        return
    model_box: list[Any] = []
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    got = {name: halves(s, model_box) for name, s in sets.items()}
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
    rrf_best = choose(
        {n: {k: v for k, v in f.items() if k.startswith("RRF")} for n, f in fused.items()},
        base,
        sets,
        groups,
    )
    table[f"RRF, tuned the same way ({rrf_best})"] = {
        group_name(g): score(fused[g[0]][rrf_best], sets[g[0]], members(sets[g[0]], g[1], "test"))
        for g in report_groups
    }
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
    text = render(sets, got, table, report_groups, chosen, left_out, nonsense, rss1 - rss0)
    print(text)
    if not args.no_docs:
        write_docs(text)


def chosen_params(name: str) -> HybridParams:
    """The HybridParams of a "convex p=… w=…" candidate (the defaults for RRF)."""
    if not name.startswith("convex"):
        return HybridParams()
    values = dict(part.split("=") for part in name.split()[1:])
    return HybridParams(lexical_weight=float(values["w"]), lexical_power=float(values["p"]))


def render(
    sets: dict[str, EvalSet],
    got: dict[str, Halves],
    table: dict[str, dict[str, Score]],
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
        "convex combinations `w·min(bm25/scale, 1.5)^p + (1-w)·cosine` (scale: the summed "
        f"IDF of the query's terms), p in {POWERS}, w in 0…1 by 0.05, and reciprocal rank "
        f"fusion with k in {RRF_KS}; "
        "objective: mean dev MRR@10 over the groups, a group's "
        "shortfall against its better half counted three times). Leave one group out (chosen "
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
    lines += ["", "Hybrid against the better of lexical and vector (test MRR@10):"]
    for n in names:
        h = table["hybrid"][n].mrr
        lx, vx = table["lexical"][n].mrr, table["vector"][n].mrr
        better, which = (lx, "lexical") if lx >= vx else (vx, "vector")
        lines.append(f"- {n}: {h:.3f} vs {better:.3f} ({which}), {h - better:+.3f}")
    lines += ["", "Lexical against plain BM25 (test MRR@10):"]
    for n in names:
        lx, pb = table["lexical"][n].mrr, table["plain BM25 (bm25s)"][n].mrr
        lines.append(f"- {n}: {lx:.3f} vs {pb:.3f}, {lx - pb:+.3f}")
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
