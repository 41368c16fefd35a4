"""SQL for search: the job queue the triggers fill, stored embeddings, the
rebuild scan, full-text candidates and the hydration of hits.

Which text is embedded and which rows may be found are defined once, in
``storage.models.search``; everything here is built from those definitions.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, LargeBinary, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlmodel.ext.asyncio.session import AsyncSession

from storage import access
from storage.db import fetch_tuples
from storage.models.search import SEARCHABLE, Searchable

UUIDS = ARRAY(PG_UUID(as_uuid=True))
BIGINTS = ARRAY(BigInteger)
BYTEAS = ARRAY(LargeBinary)


def searchable(kind: str) -> Searchable:
    try:
        return SEARCHABLE[kind]
    except KeyError:
        raise ValueError(f"unknown search kind {kind!r}") from None


def hash_sql(s: Searchable) -> str:
    return f"sha256(convert_to({s.text_sql}, 'UTF8'))"


def stale_sql(s: Searchable) -> str:
    """Rows ``t`` that may be found and have no current vector under :model
    (none stored, or one made from other text); binds :kind and :model."""
    return (
        f"({s.visible_sql}) AND NOT EXISTS (SELECT 1 FROM embeddings e "  # noqa: S608
        f"WHERE e.kind = :kind AND e.item_id = t.id AND e.model = :model "
        f"AND e.text_hash = {hash_sql(s)})"
    )


# --- the active model -------------------------------------------------------


async def active_model(session: AsyncSession) -> str | None:
    row = (await session.exec(text("SELECT model FROM search_model WHERE id = 1"))).first()  # type: ignore[call-overload]
    return None if row is None else str(row[0])


async def set_active_model(session: AsyncSession, model: str) -> None:
    """Make ``model`` the one search uses, logged in ``model_activations``
    (``cairn models rollback`` goes back one) when it is a change."""
    await session.exec(  # type: ignore[call-overload]
        text(
            "INSERT INTO model_activations (model) SELECT :model WHERE :model IS DISTINCT "
            "FROM (SELECT model FROM model_activations ORDER BY id DESC LIMIT 1)"
        ).bindparams(model=model)
    )
    await session.exec(  # type: ignore[call-overload]
        text(
            "INSERT INTO search_model (id, model) VALUES (1, :model) "
            "ON CONFLICT (id) DO UPDATE SET model = excluded.model, activated_at = now()"
        ).bindparams(model=model)
    )


async def ensure_active_model(session: AsyncSession, default: str) -> str:
    """The active model; ``default`` becomes it on a database that has none."""
    await session.exec(  # type: ignore[call-overload]
        text(
            "WITH first AS (INSERT INTO search_model (id, model) VALUES (1, :model) "
            "ON CONFLICT (id) DO NOTHING RETURNING model) "
            "INSERT INTO model_activations (model) SELECT model FROM first"
        ).bindparams(model=default)
    )
    model = await active_model(session)
    assert model is not None
    return model


# --- the job queue ----------------------------------------------------------


@dataclass(frozen=True)
class Job:
    id: int
    kind: str
    item_id: uuid.UUID
    search_id: int


async def claim_jobs(session: AsyncSession, limit: int) -> list[Job]:
    """The oldest queued jobs, locked for this transaction (other workers skip them)."""
    rows = await session.exec(  # type: ignore[call-overload]
        text(
            "SELECT id, kind, item_id, search_id FROM search_jobs "
            "ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED"
        ).bindparams(limit=limit)
    )
    return [Job(r[0], r[1], r[2], r[3]) for r in rows]


async def delete_jobs(session: AsyncSession, ids: Sequence[int]) -> None:
    await session.exec(  # type: ignore[call-overload]
        text("DELETE FROM search_jobs WHERE id = ANY(:ids)").bindparams(
            bindparam("ids", list(ids), type_=BIGINTS)
        )
    )


async def pending_jobs(session: AsyncSession) -> int:
    return int((await session.exec(text("SELECT count(*) FROM search_jobs"))).one()[0])  # type: ignore[call-overload]


async def queue_lag(session: AsyncSession) -> tuple[int, float]:
    """Rows waiting for the index, and the age in seconds of the oldest (0: none)."""
    row = (
        await session.exec(  # type: ignore[call-overload]
            text(
                "SELECT count(*), coalesce(extract(epoch FROM now() - min(queued_at)), 0) "
                "FROM search_jobs"
            )
        )
    ).one()
    return int(row[0]), max(0.0, float(row[1]))


async def enqueue_stale(session: AsyncSession, kind: str, model: str) -> int:
    """Queue every visible row whose stored vector under ``model`` is missing
    or was made from other text (and that has no job queued yet)."""
    s = searchable(kind)
    result = await session.exec(  # type: ignore[call-overload]
        text(
            f"INSERT INTO search_jobs (kind, item_id, search_id) "  # noqa: S608
            f"SELECT :kind, t.id, t.search_id FROM {s.table} t "
            f"WHERE {stale_sql(s)} "
            f"AND NOT EXISTS (SELECT 1 FROM search_jobs j WHERE j.kind = :kind "
            f"AND j.item_id = t.id)"
        ).bindparams(kind=kind, model=model)
    )
    return int(result.rowcount or 0)


# --- items and their vectors ------------------------------------------------


@dataclass(frozen=True)
class Item:
    """A row as the worker needs it: may it be found, what it says, and what
    is stored for it under the model."""

    item_id: uuid.UUID
    search_id: int
    visible: bool
    text: str
    text_hash: bytes
    stored_hash: bytes | None
    stored_vector: bytes | None

    @property
    def current(self) -> bool:
        return self.stored_hash == self.text_hash and self.stored_vector is not None


async def items(
    session: AsyncSession, kind: str, item_ids: Sequence[uuid.UUID], model: str
) -> list[Item]:
    """The rows that still exist among ``item_ids``."""
    s = searchable(kind)
    rows = await session.exec(  # type: ignore[call-overload]
        text(
            f"SELECT t.id, t.search_id, ({s.visible_sql}) AS visible, {s.text_sql} AS body, "  # noqa: S608
            f"{hash_sql(s)} AS hash, e.text_hash, e.vector "
            f"FROM {s.table} t LEFT JOIN embeddings e "
            f"ON e.kind = :kind AND e.item_id = t.id AND e.model = :model "
            f"WHERE t.id = ANY(:ids)"
        ).bindparams(bindparam("ids", list(item_ids), type_=UUIDS), kind=kind, model=model)
    )
    return [Item(r[0], r[1], bool(r[2]), r[3], bytes(r[4]), _b(r[5]), _b(r[6])) for r in rows]


def _b(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


async def store_embeddings(
    session: AsyncSession, kind: str, model: str, rows: Sequence[tuple[uuid.UUID, bytes, bytes]]
) -> None:
    """Upsert (item_id, text_hash, vector) rows under ``model``, for the rows
    that still exist. The row is key-share locked until the commit, so a
    deletion waits for it, and the deletion's job (``forget``) then finds the
    vector; a row deleted before is skipped: an embedding stored after its
    row went (a batch encoded while it was deleted) is never freed otherwise."""
    if not rows:
        return
    table = searchable(kind).table
    rows = sorted(rows, key=lambda r: r[0])  # rows locked in one order, as far as it goes
    await session.exec(  # type: ignore[call-overload]
        text(
            "INSERT INTO embeddings (kind, item_id, model, text_hash, vector) "  # noqa: S608
            "SELECT :kind, u.item_id, :model, u.text_hash, u.vector "
            "FROM unnest(:ids, :hashes, :vectors) AS u(item_id, text_hash, vector) "
            f"WHERE EXISTS (SELECT 1 FROM {table} r WHERE r.id = u.item_id FOR KEY SHARE) "
            "ON CONFLICT (kind, item_id, model) DO UPDATE SET "
            "text_hash = excluded.text_hash, vector = excluded.vector, embedded_at = now()"
        ).bindparams(
            bindparam("ids", [r[0] for r in rows], type_=UUIDS),
            bindparam("hashes", [r[1] for r in rows], type_=BYTEAS),
            bindparam("vectors", [r[2] for r in rows], type_=BYTEAS),
            kind=kind,
            model=model,
        )
    )


async def forget(session: AsyncSession, kind: str, item_ids: Sequence[uuid.UUID]) -> None:
    """Drop every stored vector of rows that no longer exist."""
    if item_ids:
        await session.exec(  # type: ignore[call-overload]
            text("DELETE FROM embeddings WHERE kind = :kind AND item_id = ANY(:ids)").bindparams(
                bindparam("ids", list(item_ids), type_=UUIDS), kind=kind
            )
        )


async def scan_vectors(
    conn: AsyncConnection, kind: str, model: str, batch: int = 5000
) -> AsyncIterator[list[tuple[int, bytes]]]:
    """(search_id, vector) of every visible row with a vector under ``model``,
    in batches, streamed with a server-side cursor (the index rebuild)."""
    s = searchable(kind)
    result = await conn.stream(
        text(
            f"SELECT t.search_id, e.vector FROM embeddings e "  # noqa: S608
            f"JOIN {s.table} t ON t.id = e.item_id "
            f"WHERE e.kind = :kind AND e.model = :model AND ({s.visible_sql})"
        ).bindparams(kind=kind, model=model),
        execution_options={"yield_per": batch},
    )
    async for part in result.partitions(batch):
        yield [(int(r[0]), bytes(r[1])) for r in part]


# --- full text ---------------------------------------------------------------

# A full-text score at or above this means every word of the query matched.
ALL_WORDS = 1.0
# Rows that full-text search ranks at most, per stage (every-word matches,
# then matches of some word): ranking costs ~10 µs a row (the tsvector is
# read from TOAST), and a common word matches half the corpus. Measured in
# docs/benchmarks.md, "Search latency at 100,000 patterns".
RANK_CANDIDATES = 2000


async def fulltext(
    session: AsyncSession,
    kind: str,
    q: str,
    limit: int,
    *,
    any_word: bool = True,
    candidates: int = RANK_CANDIDATES,
) -> list[tuple[int, float]]:
    """(search_id, score) of the best full-text matches among visible rows,
    best first. Rows matching every word (``websearch_to_tsquery``) score in
    [1, 2), before rows matching some (``any_word``) in [0, 1); normalisation
    32 keeps ``ts_rank_cd`` below 1.

    The cost is bounded: at most ``candidates`` rows matching every word are
    ranked, and only when fewer than ``limit`` match them all, rows matching
    some word are added: up to ``candidates / words`` per query word, so
    every match of a rare word is ranked while a common word contributes a
    sample. Measured against the alternatives in docs/benchmarks.md, "Search
    ranking quality"."""
    s = searchable(kind)
    cap = max(candidates, limit)
    loose = (
        f"UNION SELECT c.search_id FROM q, unnest(q.words) AS w(word), LATERAL ("  # noqa: S608
        f"SELECT t.search_id FROM {s.table} t "
        f"WHERE t.search_vector @@ w.word AND ({s.visible_sql}) "
        f"LIMIT :cap / greatest(1, cardinality(q.words))) c "
        f"WHERE (SELECT count(*) FROM strict) < :limit"
        if any_word
        else ""
    )
    rows = await session.exec(  # type: ignore[call-overload]
        text(
            f"WITH parsed AS (SELECT websearch_to_tsquery('english', :q) AS all_words, "  # noqa: S608
            f"ARRAY(SELECT quote_literal(lexeme)::tsquery "
            f"FROM unnest(tsvector_to_array(to_tsvector('english', :q))) AS lexeme) AS words), "
            f"q AS (SELECT all_words, words, (SELECT string_agg(w::text, ' | ') "
            f"FROM unnest(words) AS w)::tsquery AS any_word FROM parsed), "
            f"strict AS (SELECT t.search_id FROM {s.table} t, q "
            f"WHERE t.search_vector @@ q.all_words AND ({s.visible_sql}) LIMIT :cap), "
            f"found AS (SELECT search_id FROM strict {loose}) "
            f"SELECT t.search_id, ts_rank_cd(t.search_vector, q.any_word, 32) "
            f"+ CASE WHEN t.search_vector @@ q.all_words THEN {ALL_WORDS} ELSE 0 END AS score "
            f"FROM found JOIN {s.table} t USING (search_id), q "
            f"ORDER BY score DESC, t.search_id LIMIT :limit"
        ).bindparams(q=q, limit=limit, cap=cap)
    )
    return [(int(r[0]), float(r[1])) for r in rows]


# Rows ``t`` whose last screen found no risky code (docs/decisions/safety.md);
# rows written before screening (``safety`` null) count as unlabelled.
UNLABELLED_SQL = "(t.safety IS NULL OR coalesce(jsonb_array_length(t.safety->'labels'), 0) = 0)"
# The kinds whose rows carry safety labels.
LABELLED_KINDS = ("pattern", "question")


@dataclass(frozen=True)
class PatternFilter:
    """The patterns a search keeps (GET /api/patterns' filters); empty: all."""

    category_id: uuid.UUID | None = None
    difficulty_level: str | None = None
    tech_stack: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.category_id or self.difficulty_level or self.tech_stack)

    def sql(self) -> tuple[str, dict[str, Any]]:
        """The condition on the patterns table as ``t`` and its binds."""
        parts: list[str] = []
        binds: dict[str, Any] = {}
        if self.category_id is not None:
            parts.append("t.category_id = %(filter_category)s")
            binds["filter_category"] = self.category_id
        if self.difficulty_level is not None:
            parts.append("t.difficulty_level = %(filter_difficulty)s")
            binds["filter_difficulty"] = self.difficulty_level
        if self.tech_stack:
            parts.append("t.tech_stack @> %(filter_tech)s::text[]")
            binds["filter_tech"] = list(self.tech_stack)
        return " AND ".join(parts), binds


NO_FILTER = PatternFilter()


async def visible_with_trust(
    session: AsyncSession,
    kind: str,
    search_ids: Sequence[int],
    unlabelled: bool = False,
    patterns: PatternFilter = NO_FILTER,
) -> dict[int, tuple[uuid.UUID, float | None]]:
    """search_id -> (id, trust score) of those rows that may be found now: a
    pattern's own score, a question's best shown answer's (0 without one), an
    agent none. ``unlabelled``: only rows without safety labels (agents have
    none). ``patterns``: only patterns it keeps, and no other kind (they have
    none of its fields). One statement (each search asks it of every hit)."""
    if patterns and kind != "pattern":
        return {}
    condition, binds = patterns.sql() if patterns else ("", {})
    join = ""
    if kind == "pattern":
        trust = "t.trust_score"
    elif kind == "question":
        trust = "coalesce(best.trust, 0)"
        join = (
            "LEFT JOIN LATERAL (SELECT max(a.trust_score) AS trust FROM answers a "  # noqa: S608
            f"WHERE a.question_id = t.id AND {access.shown_answer_sql('a')}) best ON true"
        )
    else:
        trust = "NULL"
    rows = await _visible_by_search_id(
        session,
        kind,
        f"t.search_id, t.id, {trust}",
        search_ids,
        join=join,
        binds=binds,
        where=UNLABELLED_SQL if unlabelled and kind in LABELLED_KINDS else "",
        condition=condition,
    )
    return {int(r[0]): (r[1], None if r[2] is None else float(r[2])) for r in rows}


async def _visible_by_search_id(
    session: AsyncSession,
    kind: str,
    columns: str,
    search_ids: Sequence[int],
    join: str = "",
    binds: dict[str, Any] | None = None,
    where: str = "",
    condition: str = "",
) -> list[Any]:
    """``columns`` (of the kind's table as ``t``, and of what ``join`` adds,
    with its ``binds`` as psycopg's ``%(name)s``) of those rows among
    ``search_ids`` that may be found now, as tuples; ``where`` (literal SQL)
    and ``condition`` (with its ``binds``) narrow them. Straight through
    psycopg: searches and the Api processes' index copies ask it all the
    time."""
    if not search_ids:
        return []
    s = searchable(kind)
    # Our own SQL, never input; a literal % in it would read as a placeholder.
    visible = s.visible_sql.replace("%", "%%")
    return await fetch_tuples(
        session,
        f"SELECT {columns} FROM {s.table} t {join} "  # noqa: S608
        f"WHERE t.search_id = ANY(%(ids)s::bigint[]) AND ({visible})"
        + (f" AND {where.replace('%', '%%')}" if where else "")
        + (f" AND {condition}" if condition else ""),
        {"ids": list(search_ids), **(binds or {})},
    )


# --- the change log the Api processes' indexes follow (0015, 0016) ---------

# Changes are kept this long; a reader that has not read the log for longer
# rebuilds its index instead.
CHANGES_KEPT_S = 3600


def lexical_select(s: Searchable) -> str:
    title, description, tags, content = s.lexical_sql
    return (
        f"t.search_id, {title} AS title, {description} AS description, "
        f"{tags} AS tags, {content} AS content"
    )


async def database_identity(session: AsyncSession) -> str:
    """Names this database and no other, including one dropped and created
    again under the same name (a new oid) or another cluster's (another
    system identifier, where this role may read it): the key of the BM25
    index folder the Api processes on a node share."""
    row = (
        await session.exec(  # type: ignore[call-overload]
            text(
                "SELECT current_database(), d.oid::bigint FROM pg_database d "
                "WHERE d.datname = current_database()"
            )
        )
    ).one()
    cluster = "?"
    try:
        async with session.begin_nested():
            found = (
                await session.exec(  # type: ignore[call-overload]
                    text("SELECT system_identifier::text FROM pg_control_system()")
                )
            ).one()
        cluster = str(found[0])
    except DBAPIError:
        # Not granted to this role: the address stands in for the cluster.
        url = session.get_bind().engine.url
        cluster = f"{url.host or ''}:{url.port or ''}"
    return f"{cluster}/{row[0]}/{int(row[1])}"


async def snapshot_xmin(session: AsyncSession) -> int:
    """The oldest transaction still running as of this statement: every
    change logged by an older one is committed (or rolled back) and visible."""
    row = (
        await session.exec(  # type: ignore[call-overload]
            text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        )
    ).one()
    return int(row[0])


async def changes_since(
    session: AsyncSession, xmin: int, vectors: bool = False
) -> list[tuple[int, str, int]]:
    """(id, kind, search_id) of the changes logged by transactions from
    ``xmin`` on (those a reader whose snapshot had that xmin may have missed):
    the triggers' changes of rows, or with ``vectors`` the search worker's
    changes of the vector index."""
    rows = await session.exec(  # type: ignore[call-overload]
        text(
            "SELECT id, kind, search_id FROM search_changes "
            "WHERE xid >= :xmin AND vectors = :vectors ORDER BY id"
        ).bindparams(xmin=xmin, vectors=vectors)
    )
    return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]


async def log_vector_changes(session: AsyncSession, kind: str, search_ids: Sequence[int]) -> None:
    """Log, in the caller's transaction, that the vector index entries of
    ``search_ids`` changed (the Api processes' copies re-read them)."""
    if search_ids:
        await session.exec(  # type: ignore[call-overload]
            text(
                "INSERT INTO search_changes (kind, search_id, xid, vectors) "
                "SELECT :kind, u.id, pg_current_xact_id()::text::bigint, true "
                "FROM unnest(:ids) AS u(id)"
            ).bindparams(bindparam("ids", sorted(set(search_ids)), type_=BIGINTS), kind=kind)
        )


async def vector_rows(
    session: AsyncSession, kind: str, search_ids: Sequence[int], model: str
) -> list[tuple[int, bytes]]:
    """(search_id, vector under ``model``) of those rows among ``search_ids``
    that may be found and have one; the others are to leave a vector index."""
    rows = await _visible_by_search_id(
        session,
        kind,
        "t.search_id, e.vector",
        search_ids,
        join="JOIN embeddings e ON e.kind = %(kind)s AND e.item_id = t.id AND e.model = %(model)s",
        binds={"kind": kind, "model": model},
    )
    return [(int(r[0]), bytes(r[1])) for r in rows]


async def prune_changes(session: AsyncSession, keep_s: int = CHANGES_KEPT_S) -> int:
    result = await session.exec(  # type: ignore[call-overload]
        text(
            "DELETE FROM search_changes WHERE changed_at < now() - make_interval(secs => :keep)"
        ).bindparams(keep=keep_s)
    )
    return int(result.rowcount or 0)


LexicalRow = tuple[int, tuple[str | None, str | None, str | None, str | None]]


async def lexical_rows(
    session: AsyncSession, kind: str, search_ids: Sequence[int]
) -> list[LexicalRow]:
    """(search_id, (title, description, tags, content)) of those rows that
    may be found now; the others are to leave the lexical index."""
    columns = lexical_select(searchable(kind))
    rows = await _visible_by_search_id(session, kind, columns, search_ids)
    return [(int(r[0]), (r[1], r[2], r[3], r[4])) for r in rows]


async def scan_lexical(
    conn: AsyncConnection, kind: str, batch: int = 2000
) -> AsyncIterator[list[LexicalRow]]:
    """Every row of ``kind`` that may be found, as ``lexical_rows`` gives
    them, in batches (the lexical index's build)."""
    s = searchable(kind)
    result = await conn.stream(
        text(f"SELECT {lexical_select(s)} FROM {s.table} t WHERE {s.visible_sql}"),  # noqa: S608
        execution_options={"yield_per": batch},
    )
    async for part in result.partitions(batch):
        yield [(int(r[0]), (r[1], r[2], r[3], r[4])) for r in part]
