"""The large-corpus seeder of the search benchmark (benchmarks/search/bulk.py):
patterns by COPY, vectors by the real ONNX encoder, both resumable, and the
stored vectors current for the service (same text hash, same vector)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import numpy as np
import psycopg
import pytest

from benchmarks.search import bulk, million
from embeddings.config import IndexConfig
from embeddings.encoder import Encoder, from_bytes
from storage.db import libpq_url
from storage.embedded import database_url, drop_database, ensure_database
from storage.migrate import upgrade
from storage.models.search import PATTERNS
from storage.repositories.search import hash_sql
from storage.seed import seed_categories

N = 120


@pytest.fixture
def fresh_db(pg_admin_url: str) -> Iterator[str]:
    name = f"cairn_bulk_{secrets.token_hex(4)}"
    ensure_database(pg_admin_url, name)
    url = database_url(pg_admin_url, name)
    upgrade(url)
    seed_categories(url)
    yield url
    drop_database(pg_admin_url, name)


def test_seed_and_embed_resume_where_they_stopped(fresh_db: str) -> None:
    lines: list[str] = []
    # An interrupted seed: 70 rows, then a rerun to 120 draws the same rows.
    bulk.seed_patterns(fresh_db, 70, log=lines.append, chunk=64)
    bulk.seed_patterns(fresh_db, N, log=lines.append, chunk=64)
    with psycopg.connect(libpq_url(fresh_db)) as conn:
        rows = conn.execute(
            "SELECT slug, title FROM patterns WHERE slug LIKE %s", (bulk.SLUG_PREFIX + "%",)
        ).fetchall()
    assert len(rows) == N and len({s for s, _ in rows}) == N
    vocab, cum = bulk._vocab()
    again = bulk.pattern_row(7, [None], [None], vocab, cum)  # type: ignore[list-item]
    assert dict(rows)[f"{bulk.SLUG_PREFIX}7"] == again[3]

    encoder = Encoder(threads=1)  # the session's model cache (tests/conftest.py)
    model = encoder.model
    # An interrupted embedding (a limit stands for Ctrl-C), then the rest.
    first = bulk.embed_patterns(
        fresh_db, model, batch=32, limit=80, encoder=encoder, log=lines.append
    )
    assert first["embedded"] == 80
    rest = bulk.embed_patterns(fresh_db, model, batch=32, encoder=encoder, log=lines.append)
    assert rest["embedded"] == N - 80
    assert any("rows/s" in line and "ETA" in line for line in lines)

    with psycopg.connect(libpq_url(fresh_db)) as conn:
        stale = conn.execute(
            f"SELECT count(*) FROM patterns t LEFT JOIN embeddings e ON e.item_id = t.id "
            f"AND e.kind = 'pattern' WHERE e.text_hash IS DISTINCT FROM {hash_sql(PATTERNS)}"
        ).fetchone()
        assert stale is not None and stale[0] == 0  # every pattern has a current vector
        sample = conn.execute(
            f"SELECT {PATTERNS.text_sql}, e.vector FROM patterns t JOIN embeddings e "
            "ON e.item_id = t.id ORDER BY t.id LIMIT 5"
        ).fetchall()
    stored = from_bytes([r[1] for r in sample], encoder.dim)
    fresh = encoder.encode([r[0] for r in sample])
    assert np.allclose(stored, fresh, atol=1e-5)
    # The recall measurement of the bench reads them back: an 8-bit graph
    # over 120 real vectors finds nearly the exact top 10.
    recall = million.semantic_recall(
        fresh_db, encoder, IndexConfig(flat_max=60, hnsw_codes="sq8"), n_queries=30
    )
    assert recall["n"] == N and recall["recall@10"] >= 0.9
    # Nothing left: a rerun embeds nothing.
    assert bulk.embed_patterns(fresh_db, model, encoder=encoder, log=lines.append)["embedded"] == 0


def test_vectors_embedded_elsewhere_load_with_the_worker_text_hash(fresh_db: str, tmp_path) -> None:
    """A GPU machine with no database embeds the corpus from ``pattern_text``
    (``benchmarks.search.gpu_embed``) and ships int8 shards; ``load_vectors``
    stores them for the seeded patterns, with the hash of the text Postgres
    gives the worker, and refuses shards cut at another length."""
    import json

    from benchmarks.search import shards
    from storage.models.search import EMBED_MAX_CHARS

    n, per = 50, 16
    bulk.seed_patterns(fresh_db, n, log=lambda _: None, chunk=100)
    vocab, cum = bulk._vocab()
    encoder = Encoder(threads=1)
    # Shards for more patterns than are seeded (70): only the seeded load.
    texts = [bulk.pattern_text(i, vocab, cum, EMBED_MAX_CHARS) for i in range(70)]
    vectors = encoder.encode(texts)
    folder = tmp_path / "shards"
    folder.mkdir()
    for k, start in enumerate(range(0, len(texts), per)):
        codes, scale = shards.quantise(vectors[start : start + per])
        shards.write_shard(folder / f"shard_{k:05d}.i8", codes, scale)
    meta = {"dim": encoder.dim, "shard_rows": per, "max_chars": EMBED_MAX_CHARS}
    (folder / "stats.json").write_text(json.dumps(meta))

    loaded = bulk.load_vectors(fresh_db, encoder.model, folder, log=lambda _: None)
    assert loaded["loaded"] == n
    assert bulk.load_vectors(fresh_db, encoder.model, folder, log=lambda _: None)["loaded"] == 0
    with psycopg.connect(libpq_url(fresh_db)) as conn:
        stale = conn.execute(
            f"SELECT count(*) FROM patterns t LEFT JOIN embeddings e ON e.item_id = t.id "
            f"AND e.kind = 'pattern' WHERE e.text_hash IS DISTINCT FROM {hash_sql(PATTERNS)}"
        ).fetchone()
        assert stale is not None and stale[0] == 0
        rows = conn.execute(
            f"SELECT {PATTERNS.text_sql}, e.vector FROM patterns t JOIN embeddings e "
            "ON e.item_id = t.id ORDER BY t.id LIMIT 12"
        ).fetchall()
    stored = from_bytes([r[1] for r in rows], encoder.dim)
    fresh = encoder.encode([r[0] for r in rows])
    assert np.einsum("ij,ij->i", stored, fresh).min() >= 0.9999

    (folder / "stats.json").write_text(json.dumps({**meta, "max_chars": 100}))
    with pytest.raises(ValueError, match="cut texts"):
        bulk.load_vectors(fresh_db, encoder.model, folder, log=lambda _: None)


def test_int8_shards_round_trip(tmp_path) -> None:
    from benchmarks.search import shards

    rng = np.random.default_rng(1)
    v = rng.standard_normal((50, 384)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    codes, scale = shards.quantise(v)
    shards.write_shard(tmp_path / "s.i8", codes, scale)
    back_codes, back_scale = shards.read_shard(tmp_path / "s.i8", 384)
    assert (back_codes == codes).all() and (back_scale == scale).all()
    assert np.einsum("ij,ij->i", shards.dequantise(back_codes, back_scale), v).min() >= 0.9999
    (tmp_path / "bad.i8").write_bytes(b"\0" * 1000)
    with pytest.raises(ValueError, match="whole number"):
        shards.read_shard(tmp_path / "bad.i8", 384)
