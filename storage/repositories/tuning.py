"""SQL of ``cairn tune`` and ``cairn models`` (issue 50): the visible corpus
as the pair miner reads it, the one-tune-at-a-time lock, and the stored
model versions (their archives in chunks, the log of activations).

Visibility is ``storage.access``'s (through ``storage.models.search``'s
searchable kinds); the text of an item is exactly what the Embedder embeds
(``Searchable.text_sql``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.access import public_answer_sql
from storage.models.search import PATTERNS, QUESTIONS

# Two-key advisory lock space (as idempotency and uploads): held by the
# session of the one tune running on this database, whatever node it runs on.
TUNE_LOCK = (50, 1)
WORKED = "('worked_as_written', 'worked_with_changes')"


@dataclass(frozen=True)
class CorpusRow:
    kind: str
    item_id: uuid.UUID
    title: str
    description: str
    text: str
    worked: int
    forked_from: uuid.UUID | None


@dataclass(frozen=True)
class AcceptedRow:
    question_id: uuid.UUID
    question_title: str
    body: str
    worked: int


async def corpus(session: AsyncSession) -> list[CorpusRow]:
    """Every visible pattern and question, with the text the Embedder embeds,
    how many reports say it worked, and (patterns) its origin."""
    patterns = await session.exec(  # type: ignore[call-overload]
        text(
            f"SELECT t.id, t.title, t.description, {PATTERNS.text_sql}, "  # noqa: S608
            f"(SELECT count(*) FROM verifications v WHERE v.pattern_id = t.id "
            f"AND v.outcome IN {WORKED}), t.forked_from_id "
            f"FROM patterns t WHERE {PATTERNS.visible_sql} ORDER BY t.id"
        )
    )
    out = [CorpusRow("pattern", r[0], r[1], r[2], r[3], int(r[4]), r[5]) for r in patterns]
    questions = await session.exec(  # type: ignore[call-overload]
        text(
            f"SELECT t.id, t.title, t.body, {QUESTIONS.text_sql} "  # noqa: S608
            f"FROM questions t WHERE {QUESTIONS.visible_sql} ORDER BY t.id"
        )
    )
    out += [CorpusRow("question", r[0], r[1], r[2], r[3], 0, None) for r in questions]
    return out


async def accepted_answers(session: AsyncSession) -> list[AcceptedRow]:
    """The public accepted answers with their question's title."""
    rows = await session.exec(  # type: ignore[call-overload]
        text(
            "SELECT q.id, q.title, a.body, (SELECT count(*) FROM verifications v "  # noqa: S608
            f"WHERE v.answer_id = a.id AND v.outcome IN {WORKED}) "
            "FROM answers a JOIN questions q ON q.id = a.question_id "
            f"WHERE a.is_accepted AND {public_answer_sql('a', 'q')} ORDER BY q.id"
        )
    )
    return [AcceptedRow(r[0], r[1], r[2], int(r[3])) for r in rows]


# --- the lock ---------------------------------------------------------------


async def try_lock_tune(session: AsyncSession) -> bool:
    """Take the tune lock for this session's connection (held until
    ``unlock_tune`` or the connection closes); False if another holds it."""
    row = (
        await session.exec(  # type: ignore[call-overload]
            text("SELECT pg_try_advisory_lock(:a, :b)").bindparams(a=TUNE_LOCK[0], b=TUNE_LOCK[1])
        )
    ).one()
    return bool(row[0])


async def unlock_tune(session: AsyncSession) -> None:
    await session.exec(  # type: ignore[call-overload]
        text("SELECT pg_advisory_unlock(:a, :b)").bindparams(a=TUNE_LOCK[0], b=TUNE_LOCK[1])
    )


# --- model versions ---------------------------------------------------------


@dataclass(frozen=True)
class VersionRow:
    name: str
    base: str
    sha256: str
    size: int
    chunks: int
    complete: bool
    accepted: bool
    card: dict[str, Any]
    created_at: datetime


_VERSION = "name, base, sha256, size, chunks, complete, accepted, card, created_at"


def _version(r: Any) -> VersionRow:
    return VersionRow(r[0], r[1], r[2], int(r[3]), int(r[4]), bool(r[5]), bool(r[6]), r[7], r[8])


async def add_version(
    session: AsyncSession,
    name: str,
    base: str,
    sha256: str,
    size: int,
    parts: Iterator[bytes],
    accepted: bool,
    card: dict[str, Any],
) -> int:
    """Store a version and its archive's chunks (``complete`` once all are
    in, in this transaction); the number of chunks."""
    import json

    await session.exec(  # type: ignore[call-overload]
        text(
            "INSERT INTO model_versions (name, base, sha256, size, chunks, accepted, card) "
            "VALUES (:name, :base, :sha, :size, 0, :accepted, CAST(:card AS jsonb))"
        ).bindparams(
            name=name, base=base, sha=sha256, size=size, accepted=accepted, card=json.dumps(card)
        )
    )
    seq = 0
    for seq, data in enumerate(parts, start=1):
        await session.exec(  # type: ignore[call-overload]
            text(
                "INSERT INTO model_chunks (name, seq, data) VALUES (:name, :seq, :data)"
            ).bindparams(name=name, seq=seq - 1, data=data)
        )
    await session.exec(  # type: ignore[call-overload]
        text(
            "UPDATE model_versions SET chunks = :n, complete = true WHERE name = :name"
        ).bindparams(n=seq, name=name)
    )
    return seq


async def versions(session: AsyncSession) -> list[VersionRow]:
    rows = await session.exec(  # type: ignore[call-overload]
        text(f"SELECT {_VERSION} FROM model_versions ORDER BY created_at, name")  # noqa: S608
    )
    return [_version(r) for r in rows]


async def version(session: AsyncSession, name: str) -> VersionRow | None:
    row = (
        await session.exec(  # type: ignore[call-overload]
            text(f"SELECT {_VERSION} FROM model_versions WHERE name = :name").bindparams(  # noqa: S608
                name=name
            )
        )
    ).first()
    return None if row is None else _version(row)


async def chunks(session: AsyncSession, name: str) -> list[bytes]:
    """A version's archive, chunk by chunk in order."""
    rows = await session.exec(  # type: ignore[call-overload]
        text("SELECT data FROM model_chunks WHERE name = :name ORDER BY seq").bindparams(name=name)
    )
    return [bytes(r[0]) for r in rows]


async def activations(session: AsyncSession, limit: int = 50) -> list[tuple[str, datetime]]:
    """The latest switches of the model search uses, newest first."""
    rows = await session.exec(  # type: ignore[call-overload]
        text(
            "SELECT model, activated_at FROM model_activations ORDER BY id DESC LIMIT :n"
        ).bindparams(n=limit)
    )
    return [(r[0], r[1]) for r in rows]
