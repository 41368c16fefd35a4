"""A large search corpus with real vectors, resumable: ``seed_patterns``
writes pattern ``i`` from its own seeded generator (``pattern_row``) in
committed chunks; ``embed_patterns`` embeds those without a vector as the
worker would (its text and its hash); ``load_vectors`` stores vectors
embedded elsewhere (``gpu_embed.py``'s shards) the same way."""

from __future__ import annotations

import hashlib
import random
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from benchmarks import corpus

SLUG_PREFIX = "bench-search-m-"
CHUNK = 20_000
N_AUTHORS = 200


def _vocab() -> tuple[list[str], list[float]]:
    from benchmarks.corpus import vocabulary

    vocab = vocabulary(random.Random(corpus.SEED))
    return vocab, corpus.cum_weights(len(vocab))


def pattern_row(
    i: int, authors: list[uuid.UUID], categories: list[Any], vocab: list[str], cum: list[float]
) -> tuple[Any, ...]:
    """Pattern ``i`` of the corpus: the same row every time it is drawn."""
    rng = random.Random(f"{corpus.SEED}-bulk-{i}")
    when = f"2026-{rng.randint(1, 10):02d}-{rng.randint(1, 28):02d} 12:00:00+00"
    words = rng.choices(vocab, cum_weights=cum, k=rng.randint(60, 140))
    return (
        uuid.UUID(int=rng.getrandbits(128), version=4),
        authors[i % len(authors)],
        categories[i % len(categories)],
        corpus.title(rng),
        f"{SLUG_PREFIX}{i}",
        corpus.sentence(rng),
        f"{corpus.sentence(rng)} {' '.join(words)}",
        rng.choice(["beginner", "intermediate", "advanced"]),
        rng.sample(corpus.TECH[:40], 3),
        rng.sample(corpus.TECH[:60], 2),
        when,
        when,
    )


def pattern_text(i: int, vocab: list[str], cum: list[float], max_chars: int) -> str:
    """The text the worker embeds for pattern ``i`` (``PATTERNS.text_sql``:
    title, description, tags and tech stack, content joined by newlines, cut
    at ``EMBED_MAX_CHARS``), computed without the database: a GPU machine
    with no Postgres embeds the corpus from it (``benchmarks.search.gpu_embed``)
    and ``load_vectors`` checks it against what Postgres gives. ``max_chars``
    is ``EMBED_MAX_CHARS`` (a parameter: that machine has no sqlmodel)."""
    row = pattern_row(i, [None], [None], vocab, cum)  # type: ignore[list-item]
    title, description, content, tags, tech = row[3], row[5], row[6], row[8], row[9]
    return "\n".join((title, description, ", ".join([*tags, *tech]), content))[:max_chars]


def seeded_count(conn: Any) -> int:
    row = conn.execute(
        "SELECT count(*) FROM patterns WHERE slug LIKE %s", (SLUG_PREFIX + "%",)
    ).fetchone()
    return int(row[0]) if row else 0


def seed_patterns(
    database_url: str, n: int, log: Callable[[str], None] = print, chunk: int = CHUNK
) -> dict[str, float]:
    """Patterns ``0..n-1`` of the corpus, those not yet there written in
    chunks of ``chunk`` (each committed). Other patterns (the 100,000-pattern
    corpus of ``seeding.seed``) are removed first, once."""
    t0 = time.monotonic()
    with corpus.connect(database_url) as conn:
        have = seeded_count(conn)
        if have == 0:
            log("bench: bulk: a fresh corpus (removing other patterns and their vectors)")
            corpus.clear_patterns(conn, "bench_bulk_%")
            conn.execute("DELETE FROM embeddings")
            rng = random.Random(f"{corpus.SEED}-bulk-authors")
            ids = [uuid.UUID(int=rng.getrandbits(128), version=4) for _ in range(N_AUTHORS)]
            corpus.copy_rows(
                conn,
                "agents (id, username, name, display_name, bio)",
                ((a, f"bench_bulk_{i:04d}", f"Bulk {i}", f"Bulk {i}", "bulk author")
                 for i, a in enumerate(ids)),
            )  # fmt: skip
            conn.commit()
        if have >= n:
            log(f"bench: bulk: {have:,} patterns already seeded")
            return {"seeded": float(have), "seed_s": 0.0}
        rows = conn.execute(
            "SELECT id FROM agents WHERE username LIKE 'bench_bulk_%' ORDER BY username"
        ).fetchall()
        authors = [r[0] for r in rows]
        categories = [r[0] for r in conn.execute("SELECT id FROM categories ORDER BY id")]
        vocab, cum = _vocab()
        log(f"bench: bulk: seeding patterns {have:,} to {n:,}")
        start = have
        while start < n:
            stop = min(start + chunk, n)
            rows = (pattern_row(i, authors, categories, vocab, cum) for i in range(start, stop))
            corpus.copy_rows(conn, corpus.PATTERN_COLUMNS, rows)
            conn.execute("TRUNCATE search_jobs")  # the insert trigger queued every row
            conn.commit()
            done = stop - have
            rate = done / max(time.monotonic() - t0, 1e-9)
            log(
                f"bench: bulk: {stop:,}/{n:,} patterns  {rate:,.0f} rows/s  "
                f"ETA {(n - stop) / rate:,.0f} s"
            )
            start = stop
    return {"seeded": float(n), "seed_s": time.monotonic() - t0}


def missing_vectors(conn: Any, model: str, after: uuid.UUID | None, limit: int) -> list[Any]:
    """The next ``limit`` seeded patterns (by id, after ``after``) with no
    vector under ``model``, and the text the worker would embed."""
    from storage.models.search import PATTERNS

    return conn.execute(
        f"SELECT t.id, {PATTERNS.text_sql} FROM patterns t "
        "WHERE t.slug LIKE %s AND (%s::uuid IS NULL OR t.id > %s::uuid) "
        "AND NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.kind = 'pattern' "
        "AND e.item_id = t.id AND e.model = %s) ORDER BY t.id LIMIT %s",
        (SLUG_PREFIX + "%", after, after, model, limit),
    ).fetchall()


def count_vectors(conn: Any, model: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM embeddings e JOIN patterns t ON t.id = e.item_id "
        "WHERE e.kind = 'pattern' AND e.model = %s AND t.slug LIKE %s",
        (model, SLUG_PREFIX + "%"),
    ).fetchone()
    return int(row[0]) if row else 0


VECTOR_COLUMNS = "embeddings (kind, item_id, model, text_hash, vector)"


def vector_row(model: str, pid: Any, text: str, vector: Any) -> tuple[Any, ...]:
    """A pattern's row of ``embeddings``, with the hash of its text (as the worker stores it)."""
    from embeddings.encoder import to_bytes

    return ("pattern", pid, model, hashlib.sha256(text.encode()).digest(), to_bytes(vector))


def embed_patterns(
    database_url: str,
    model: str,
    batch: int = 256,
    threads: int = 0,
    limit: int | None = None,
    log: Callable[[str], None] = print,
    encoder: Any = None,
    device: str = "cpu",
) -> dict[str, float]:
    """Vectors for the seeded patterns that have none (at most ``limit`` of
    them this run), ``batch`` texts at a time, each batch committed. ``device``
    ``auto`` uses a GPU where there is one (PyTorch, as the Embedder does)."""
    import os

    from embeddings.encoder import Encoder

    threads = threads or os.cpu_count() or 1
    if encoder is None:
        from serve_app.settings import get_settings

        cache = get_settings().state_path / "models"
        encoder = Encoder(model, device, cache_dir=cache, threads=threads)
    t0 = time.monotonic()
    embedded = 0
    with (
        corpus.connect(database_url) as read,
        corpus.connect(database_url) as write,
        ThreadPoolExecutor(1, thread_name_prefix="bulk-write") as writer,
    ):
        total = seeded_count(read)
        have = count_vectors(read, model)
        todo = total - have if limit is None else min(limit, total - have)
        log(f"bench: bulk: {have:,} of {total:,} patterns have vectors; embedding {todo:,}")

        def store(ids: list[Any], texts: list[str], vectors: Any) -> None:
            rows = zip(ids, texts, vectors, strict=True)
            corpus.copy_rows(write, VECTOR_COLUMNS, (vector_row(model, *row) for row in rows))
            write.commit()

        pending: Future[None] | None = None
        after: uuid.UUID | None = None
        try:
            while embedded < todo:
                rows = missing_vectors(read, model, after, min(batch, todo - embedded))
                read.commit()
                if not rows:
                    break
                after = rows[-1][0]
                ids, texts = [r[0] for r in rows], [r[1] for r in rows]
                vectors = encoder.encode(texts, batch_size=64, threads=threads)
                if pending is not None:
                    pending.result()
                pending = writer.submit(store, ids, texts, vectors)
                embedded += len(rows)
                took = time.monotonic() - t0
                rate = embedded / max(took, 1e-9)
                log(
                    f"bench: bulk: embedded {have + embedded:,}/{total:,}  {rate:,.1f} rows/s  "
                    f"ETA {(todo - embedded) / rate / 60:,.1f} min"
                )
        finally:
            if pending is not None:
                pending.result()
        corpus.set_search_model(write, model)
        write.commit()
    took = time.monotonic() - t0
    return {"embedded": float(embedded), "embed_s": took, "rows_per_s": embedded / max(took, 1e-9)}


def load_vectors(
    database_url: str, model: str, folder: Any, log: Callable[[str], None] = print
) -> dict[str, float]:
    """Vectors embedded elsewhere (``benchmarks.search.gpu_embed``'s shards
    in ``folder``: pattern ``i``'s vector is row ``i``) for the seeded
    patterns that have none. Each pattern's text from Postgres
    (``PATTERNS.text_sql``) must equal the text the shards were embedded
    from (``pattern_text``), else nothing of that chunk is written; the row
    stores the hash of that text, as the worker would."""
    import json
    from pathlib import Path

    from benchmarks.search.shards import dequantise, read_shard
    from storage.models.search import EMBED_MAX_CHARS, PATTERNS

    folder = Path(folder)
    stats = json.loads((folder / "stats.json").read_text())
    if stats["max_chars"] != EMBED_MAX_CHARS:
        raise ValueError(
            f"shards cut texts at {stats['max_chars']}, the worker at {EMBED_MAX_CHARS}"
        )
    dim, per = int(stats["dim"]), int(stats["shard_rows"])
    vocab, cum = _vocab()
    t0 = time.monotonic()
    loaded = 0
    with corpus.connect(database_url) as conn:
        total = seeded_count(conn)
        for shard in sorted(folder.glob("shard_*.i8")):
            k = int(shard.stem.split("_")[1])
            start = k * per
            if start >= total:
                continue
            codes, scale = read_shard(shard, dim)
            vectors = dequantise(codes, scale)
            stop = min(start + len(vectors), total)
            slugs = [f"{SLUG_PREFIX}{i}" for i in range(start, stop)]
            rows = conn.execute(
                f"SELECT t.slug, t.id, {PATTERNS.text_sql} FROM patterns t "
                "WHERE t.slug = ANY(%s) AND NOT EXISTS (SELECT 1 FROM embeddings e "
                "WHERE e.kind = 'pattern' AND e.item_id = t.id AND e.model = %s)",
                (slugs, model),
            ).fetchall()
            if not rows:
                continue
            checked = []
            for slug, pid, text in rows:
                i = int(slug[len(SLUG_PREFIX) :])
                if text != pattern_text(i, vocab, cum, EMBED_MAX_CHARS):
                    raise ValueError(f"pattern {i}: its text is not the one embedded")
                checked.append(vector_row(model, pid, text, vectors[i - start]))
            corpus.copy_rows(conn, VECTOR_COLUMNS, checked)
            conn.commit()
            loaded += len(rows)
            log(
                f"bench: bulk: loaded {loaded:,} vectors from {shard.name}  "
                f"{loaded / max(time.monotonic() - t0, 1e-9):,.0f} rows/s"
            )
    return {"loaded": float(loaded), "load_s": time.monotonic() - t0}
