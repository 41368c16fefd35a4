"""Postgres full text for ``ranking_bench``: its own embedded Postgres with
a ``docs`` table shaped like ``patterns``, the query forms compared (the
recommended one first among them), and the production code path
(``storage.repositories.search.fulltext``) over the same documents."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from benchmarks.ranking.evalset import STATE, doc_key

DATABASE = "ranking_bench"


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
