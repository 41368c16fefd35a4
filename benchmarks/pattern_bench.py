"""Pattern search and trending at 100,000 seeded patterns (docs/benchmarks.md):
the routes through Serve with wrk, and the database alone (their SQL replayed
over psycopg; the TrendingCounter in process). The corpus is seeded once.

    .venv/bin/python -m benchmarks.pattern_bench [--duration 5] [--no-http]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

from benchmarks import corpus, harness

STATE_DIR = harness.ROOT / ".cairn" / "bench-patterns"
MARKS = ("<!-- pattern-bench:start -->", "<!-- pattern-bench:end -->")
PORT = 8103
BENCH_ENV = harness.bench_env(STATE_DIR, 2, "general", "anon_read")

N_PATTERNS = 100_000
N_AGENTS = 1_000
N_VOTES = 200_000
SEED = 20261121
# A new corpus design gets a new prefix, so an old corpus is replaced.
SLUG_PREFIX = "bench-corpus-v2-"


# Queries of different selectivity: rare terms, common terms, phrases, negation.
QUERIES = ["kubernetes", "retry backoff", "postgres index migration", "vector embeddings rerank"]
QUERIES += ['"circuit breaker"', "oauth token refresh", "scraper -selenium", "idempotency webhook"]


def _text(rng: random.Random, vocab: list[str], cum: list[float], n: int) -> str:
    return " ".join(rng.choices(vocab, cum_weights=cum, k=n))


def seed(database_url: str) -> None:
    """Write the corpus unless it is there already."""
    with corpus.connect(database_url) as conn:
        sql = "SELECT count(*) FROM patterns WHERE slug LIKE %s"
        if conn.execute(sql, (SLUG_PREFIX + "%",)).fetchone()[0] >= N_PATTERNS:
            print("bench: corpus already seeded; reusing it", flush=True)
            conn.rollback()
            corpus.vacuum(conn, "patterns", "votes")
            return
        t0 = time.monotonic()
        corpus.clear_patterns(conn, "bench_corpus_%")
        rng = random.Random(SEED)
        vocab = corpus.vocabulary(rng)
        cum = corpus.cum_weights(len(vocab))
        agents = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(N_AGENTS)]
        rows = (
            (a, f"bench_corpus_{i:04d}", f"Corpus {i}", f"Corpus {i}") for i, a in enumerate(agents)
        )
        corpus.copy_rows(conn, "agents (id, username, name, display_name)", rows)
        print(f"bench: seeding {N_PATTERNS:,} patterns (once)", flush=True)
        categories = [r[0] for r in conn.execute("SELECT id FROM categories").fetchall()]
        now = dt.datetime.now(dt.UTC)
        patterns: list[uuid.UUID] = []
        views: list[tuple[uuid.UUID, int, int]] = []  # their own counter table

        def pattern(i: int) -> tuple[Any, ...]:
            """Pattern ``i``, its values drawn in the order the corpus always drew them."""
            pid = uuid.UUID(int=rng.getrandbits(128), version=4)
            created = now - dt.timedelta(seconds=rng.uniform(0, 365 * 86400))
            author, category = rng.choice(agents), rng.choice(categories)
            title = _text(rng, vocab, cum, rng.randint(5, 9)).capitalize()[:200]
            texts = [_text(rng, vocab, cum, rng.randint(*n)) for n in ((20, 40), (120, 260))]
            level = rng.choice(["beginner", "intermediate", "advanced"])
            tags, stack = rng.sample(corpus.TECH[:40], 3), rng.sample(corpus.TECH[:60], 2)
            row = (pid, author, category, title, f"{SLUG_PREFIX}{i}", *texts, level, tags, stack)
            patterns.append(pid)
            views.append((pid, 0, rng.randint(0, 5000)))
            return (*row, created, created)

        corpus.copy_rows(conn, corpus.PATTERN_COLUMNS, (pattern(i) for i in range(N_PATTERNS)))
        corpus.copy_rows(conn, "pattern_views (pattern_id, shard, views)", views)
        print(f"bench: seeding {N_VOTES:,} votes over the last 30 days", flush=True)
        seen: set[tuple[int, int]] = set()
        while len(seen) < N_VOTES:
            # Skewed: a few patterns draw most of the votes.
            p = min(int(rng.paretovariate(0.6)) - 1, N_PATTERNS - 1)
            seen.add((p, rng.randrange(N_AGENTS)))

        def vote(p: int, a: int) -> tuple[Any, ...]:
            when = now - dt.timedelta(seconds=rng.uniform(0, 30 * 86400))
            value = 1 if rng.random() < 0.8 else -1
            return (uuid.uuid4(), agents[a], "pattern", patterns[p], value, when, when)

        columns = "id, agent_id, target_type, target_id, value, created_at, updated_at"
        corpus.copy_rows(conn, f"votes ({columns})", (vote(p, a) for p, a in seen))
        conn.execute(
            "UPDATE patterns p SET vote_score = v.total FROM"
            " (SELECT target_id, sum(value) AS total FROM votes GROUP BY target_id) v"
            " WHERE v.target_id = p.id"
        )
        conn.execute(
            "UPDATE agents a SET pattern_count = c.n FROM"
            " (SELECT author_id, count(*) AS n FROM patterns GROUP BY author_id) c"
            " WHERE c.author_id = a.id"
        )
        corpus.vacuum(conn, "patterns", "votes")
        print(f"bench: seeded in {time.monotonic() - t0:.0f}s", flush=True)


def capture_sql(database_url: str, run: Any) -> list[tuple[str, Any]]:
    """The statements (and parameters) one repository call sends."""
    from sqlalchemy import event

    from storage.db import make_engine, make_sessionmaker

    captured: list[tuple[str, Any]] = []

    async def go() -> None:
        engine = make_engine(database_url, pool_size=1, max_overflow=0)

        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def grab(_c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
            captured.append((statement, params))

        sessions = make_sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"))
        async with sessions() as session:
            await run(session)
        await engine.dispose()

    asyncio.run(go())
    return captured


def time_statements(database_url: str, run: Any, repeats: int) -> list[float]:
    """Milliseconds per request (the statements ``run`` sends), replayed over
    psycopg after 3 rounds that warm caches and let psycopg prepare them."""
    from storage.db import SESSION_OPTIONS

    statements, out = capture_sql(database_url, run), []
    with corpus.connect(database_url, autocommit=True, options=SESSION_OPTIONS) as conn:
        for i in range(3 + repeats):
            t0 = time.perf_counter()
            for sql, params in statements:
                conn.execute(sql, params).fetchall()
            if i >= 3:
                out.append((time.perf_counter() - t0) * 1000)
    return out


def measure_db(database_url: str, repeats: int) -> tuple[list[list[Any]], dict[str, Any]]:
    """Rows of (what, p50, p99, rows matched) and facts about the ranking."""
    from serve_app.runtime.trending import LocalTrending
    from storage.repositories import patterns as repo

    rows: list[list[Any]] = []
    all_search: list[float] = []
    matches = (
        "SELECT count(*) FROM patterns WHERE search_vector @@ websearch_to_tsquery('english', %s)"
    )
    for q in QUERIES:

        async def search(session: Any, q: str = q) -> Any:
            return await repo.list_public(session, repo.ListQuery(search=q))

        times = time_statements(database_url, search, repeats)
        all_search += times
        with corpus.connect(database_url) as conn:
            total = int(conn.execute(matches, (q,)).fetchone()[0])
        rows.append([f"search `{q}`", harness.pct(times, 50), harness.pct(times, 99), total])
    rows.insert(
        0, ["search, all queries", harness.pct(all_search, 50), harness.pct(all_search, 99), None]
    )

    trending = LocalTrending(database_url)
    t0 = time.perf_counter()
    ranked = asyncio.run(trending.top(7))
    load_s = time.perf_counter() - t0
    assert ranked is not None
    counter = trending._counter
    now = time.time()
    rng = random.Random(1)
    hot = [p for p, _ in ranked[:200]]
    vote_times, rebuild_times = [], []
    for i in range(max(20, repeats)):
        # A vote on a trending pattern, then the ranking: the steady state.
        event = ("set", rng.choice(hot), f"bench-voter-{i}", rng.choice([1, -1]), now)
        t1 = time.perf_counter()
        counter.apply([event], now)
        counter.top(7, 1000, now)
        vote_times.append((time.perf_counter() - t1) * 1000)
    for _ in range(10):
        counter._windows.clear()  # as when the hour turns
        t1 = time.perf_counter()
        counter.top(7, 1000, now)
        rebuild_times.append((time.perf_counter() - t1) * 1000)
    ranked_t = tuple(ranked)

    async def by_trending(session: Any) -> Any:
        return await repo.list_public(
            session, repo.ListQuery(sort_by="trending", trending=ranked_t)
        )

    async def feed(session: Any) -> Any:
        return await repo.trending_page(session, ranked_t, 1, 20)

    timed = [
        ("`sort_by=trending` page 1", time_statements(database_url, by_trending, repeats)),
        ("trending feed page 1", time_statements(database_url, feed, repeats)),
        ("TrendingCounter: one vote, then the top 1,000", vote_times),
        ("TrendingCounter: window rebuilt (once an hour)", rebuild_times),
    ]
    rows += [[label, harness.pct(t, 50), harness.pct(t, 99), None] for label, t in timed]
    return rows, {"ranked": len(ranked), "counter_votes": len(counter), "load_s": load_s}


def measure_http(
    base: str, wrk: str, tmp: Path, args: argparse.Namespace
) -> list[tuple[str, harness.WrkResult]]:
    searches = [f"/api/patterns?search={quote(q)}" for q in QUERIES]
    for path in [*searches, "/api/patterns?sort_by=trending", "/api/feed/trending"]:
        harness.api_call(base, "GET", path)
    rotate = harness.paths_script(tmp / "rotate.lua", searches)
    routes = [
        ("GET /api/patterns?search=… (8 queries in turn)", searches[0], rotate),
        ("GET /api/patterns?sort_by=trending", "/api/patterns?sort_by=trending", None),
        ("GET /api/feed/trending", "/api/feed/trending", None),
    ]
    return [
        (label, harness.measure_url(wrk, label, base + p, args, lua)) for label, p, lua in routes
    ]


def docs_section(
    http_rows: list[tuple[str, harness.WrkResult]],
    db_rows: list[list[Any]],
    facts: dict[str, Any],
    args: argparse.Namespace,
    wrk_ver: str,
    load_before: float,
) -> str:
    lines = [
        *harness.section_head(MARKS[0], "pattern_bench.py", load_before),
        f"- Through Serve: `cairn run --port {PORT}` (HAProxy, 2 `Api` replicas, the "
        f"TrendingActor); {harness.wrk_run(wrk_ver, args)}; wrk on the same machine.",
        f"- Database alone: the statements each route sends (captured from the "
        f"repositories: the count and the page), replayed {args.repeats} times over one "
        "psycopg connection on the unix socket; one sample = one request's statements.",
        "",
        *harness.serve_table(http_rows),
        "",
        "| Database time alone | p50 ms | p99 ms | matches |",
        "|---|---:|---:|---:|",
        *(
            f"| {what} | {p50:.2f} | {p99:.2f} | {'' if total is None else f'{total:,}'} |"
            for what, p50, p99, total in db_rows
        ),
        "",
        f"The trending ranking held {facts['ranked']:,} patterns (7 days; at most 1,000 "
        f"are kept) from {facts['counter_votes']:,} standing votes; rebuilding the counter "
        f"from Postgres took {facts['load_s']:.2f} s.",
    ]
    return harness.section_end(lines, "`make bench`", MARKS[1])


def main(argv: list[str] | None = None) -> int:
    parser = harness.wrk_options("pattern_bench")
    parser.add_argument("--repeats", type=int, default=200, help="database replays (200)")
    parser.add_argument("--no-http", action="store_true", help="database time only")
    args = parser.parse_args(argv)
    harness.stop_on_sigterm()
    # This process stays attached to the embedded Postgres for the whole run.
    env, _, prepared = harness.prepare_here(BENCH_ENV)
    seed(prepared.database_url)
    load_before = os.getloadavg()[0]

    print("bench: database time alone", flush=True)
    db_rows, facts = measure_db(prepared.database_url, args.repeats)
    for what, p50, p99, total in db_rows:
        print(f"bench:   {what:<48} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  {total or ''}")
    if args.no_http:
        return 0
    wrk = harness.ensure_wrk()
    with (
        harness.serve_running(PORT, env, STATE_DIR, keep_postgres=True) as serve,
        tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp,
    ):
        http_rows = measure_http(serve.base, wrk, Path(tmp), args)
    section = docs_section(http_rows, db_rows, facts, args, harness.wrk_version(wrk), load_before)
    harness.publish(section, *MARKS, args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
