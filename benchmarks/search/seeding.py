"""The search corpus in Postgres: 100,000 patterns and their vectors
stored as the worker would have stored them, and what full text matches
in it (``selectivity``)."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import uuid
from typing import Any

import numpy as np

from benchmarks import corpus
from benchmarks.search.config import N_AGENTS, N_PATTERNS, SLUG_PREFIX


def seed(database_url: str, model: str, basis: np.ndarray, vectors: np.ndarray) -> None:
    """100,000 patterns (realistic titles and descriptions, Zipf-distributed
    contents) and their vectors, stored as the worker would have stored them."""
    from embeddings.encoder import to_bytes
    from storage.models.search import AGENTS, PATTERNS
    from storage.repositories.search import hash_sql

    with corpus.connect(database_url) as conn:
        have = conn.execute(
            "SELECT (SELECT count(*) FROM patterns WHERE slug LIKE %s),"
            " (SELECT count(*) FROM embeddings WHERE kind = 'pattern')",
            (SLUG_PREFIX + "%",),
        ).fetchone()
        if min(have) >= N_PATTERNS:
            print("bench: search corpus already seeded; reusing it", flush=True)
            conn.execute("TRUNCATE search_jobs")
            conn.commit()
            return
        t0 = time.monotonic()
        print(f"bench: seeding {N_PATTERNS:,} patterns and their vectors (once)", flush=True)
        corpus.clear_patterns(conn, "bench_search_%")
        conn.execute("DELETE FROM embeddings")
        rng = random.Random(corpus.SEED)
        vocab = corpus.vocabulary(rng)
        cum, texts = corpus.cum_weights(len(vocab)), corpus.texts_for(len(basis))
        agents = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(N_AGENTS)]
        rows = (
            (a, f"bench_search_{i:04d}", f"Search {i}", f"Search {i}", texts[i])
            for i, a in enumerate(agents)
        )
        corpus.copy_rows(conn, "agents (id, username, name, display_name, bio)", rows)
        categories = [r[0] for r in conn.execute("SELECT id FROM categories").fetchall()]
        ids: list[uuid.UUID] = []

        def pattern(i: int) -> tuple[Any, ...]:
            ids.append(pid := uuid.UUID(int=rng.getrandbits(128), version=4))
            title = corpus.title(rng)
            words = rng.choices(vocab, cum_weights=cum, k=rng.randint(60, 140))
            content = f"{corpus.sentence(rng)} {' '.join(words)}"
            when = f"2026-{rng.randint(1, 10):02d}-{rng.randint(1, 28):02d} 12:00:00+00"
            author, category = rng.choice(agents), rng.choice(categories)
            level = rng.choice(["beginner", "intermediate", "advanced"])
            tags, stack = rng.sample(corpus.TECH[:40], 3), rng.sample(corpus.TECH[:60], 2)
            slug, text = f"{SLUG_PREFIX}{i}", texts[i % len(texts)]
            head = (pid, author, category, title, slug, text, content)
            return (*head, level, tags, stack, when, when)

        corpus.copy_rows(conn, corpus.PATTERN_COLUMNS, (pattern(i) for i in range(N_PATTERNS)))
        print("bench:   patterns written; storing vectors", flush=True)
        vectors_rows = itertools.chain(
            (("pattern", p, model, b"\0", to_bytes(v)) for p, v in zip(ids, vectors, strict=True)),
            (("agent", a, model, b"\0", to_bytes(basis[i])) for i, a in enumerate(agents)),
        )
        corpus.copy_rows(conn, "embeddings (kind, item_id, model, text_hash, vector)", vectors_rows)
        # The hash of each row's embedded text, by the service's own SQL
        # (storage.repositories.search.hash_sql): the rebuild finds them current.
        for s in (PATTERNS, AGENTS):
            conn.execute(
                f"UPDATE embeddings SET text_hash = {hash_sql(s)} FROM {s.table} "
                f"WHERE embeddings.kind = %s AND embeddings.item_id = {s.table}.id",
                (s.kind,),
            )
        corpus.set_search_model(conn, model)
        conn.execute("TRUNCATE search_jobs")  # the insert triggers queued every row
        corpus.vacuum(conn, "patterns", "agents", "embeddings")
        print(f"bench: seeded in {time.monotonic() - t0:.0f}s", flush=True)


def selectivity(database_url: str, queries: list[str]) -> dict[str, float]:
    """Median share of the patterns the service's full-text query matches:
    ``loose`` (any word) and ``strict`` (every word), and the time to rank them."""
    loose, strict = [], []
    with corpus.connect(database_url) as conn:
        total = conn.execute("SELECT count(*) FROM patterns").fetchone()[0]  # type: ignore[index]
        for q in queries:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE search_vector @@ replace(plainto_tsquery("
                "'english', %(q)s)::text, ' & ', ' | ')::tsquery), count(*) FILTER (WHERE "
                "search_vector @@ websearch_to_tsquery('english', %(q)s)) FROM patterns",
                {"q": q},
            ).fetchone()
            assert row is not None
            loose.append(row[0] / total)
            strict.append(row[1] / total)
    medians = {"loose": float(np.median(loose)), "strict": float(np.median(strict))}
    return {**medians, **fulltext_ms(database_url, queries)}


def fulltext_ms(database_url: str, queries: list[str]) -> dict[str, float]:
    """Median and slowest ms of the service's full-text ranking
    (``repo.fulltext``, depth 50, any word). (The same with no bound on the
    rows ranked was measured until 014a80d.)"""
    from storage.db import make_engine, make_sessionmaker
    from storage.repositories import search as repo

    async def go() -> list[float]:
        engine = make_engine(database_url, pool_size=1, max_overflow=0)
        times = []
        try:
            async with make_sessionmaker(engine)() as session:
                await repo.fulltext(session, "pattern", queries[0], 50)
                for q in queries:
                    t0 = time.perf_counter()
                    await repo.fulltext(session, "pattern", q, 50)
                    times.append((time.perf_counter() - t0) * 1000)
        finally:
            await engine.dispose()
        return times

    times = asyncio.run(go())
    ranked = {"rank_candidates": repo.RANK_CANDIDATES}
    return {"fulltext_ms": float(np.median(times)), "fulltext_max_ms": max(times), **ranked}
