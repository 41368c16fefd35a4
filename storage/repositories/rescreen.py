"""SQL of the rescreen job (``cairn rescreen``, docs/decisions/safety.md):
which items were screened by another ruleset than the current one, and the
staff to tell about what it hid.

A row is stale when its ``safety`` column is null (written before screening)
or names another ``ruleset_version``. A row rescreened stores the current
version, so a rerun skips it: the job resumes where it stopped.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import or_, text
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Agent, Answer, Pattern, Question
from storage.models.revisions import Revision

# What a rescreen reads: the items that carry a ``safety`` record.
MODELS: dict[str, Any] = {"pattern": Pattern, "question": Question, "answer": Answer}
TABLES = {"pattern": "patterns", "question": "questions", "answer": "answers"}
KINDS = tuple(MODELS)
# Two-key advisory lock space (as tuning and idempotency): held by the
# driver of a rescreen for its whole run, so two runs never overlap.
RESCREEN_LOCK = (49, 1)


# Rows ``t`` not screened by ruleset :version.
STALE_SQL = "(t.safety IS NULL OR t.safety->>'ruleset_version' IS DISTINCT FROM :version)"


async def count_stale(session: AsyncSession, kind: str, version: str) -> int:
    """How many rows of ``kind`` were not screened by ruleset ``version``."""
    row = (
        await session.exec(  # type: ignore[call-overload]
            text(
                f"SELECT count(*) FROM {TABLES[kind]} t WHERE {STALE_SQL}"  # noqa: S608
            ).bindparams(version=version)
        )
    ).first()
    return int(row[0])


async def stale_ids(
    session: AsyncSession, kind: str, version: str, after: uuid.UUID | None, limit: int
) -> list[uuid.UUID]:
    """Up to ``limit`` ids of stale rows of ``kind`` after ``after`` (keyset, by id)."""
    after_sql = "AND t.id > :after" if after is not None else ""
    binds: dict[str, Any] = {"version": version, "limit": limit}
    if after is not None:
        binds["after"] = after
    rows = await session.exec(  # type: ignore[call-overload]
        text(
            f"SELECT t.id FROM {TABLES[kind]} t WHERE {STALE_SQL} {after_sql} "  # noqa: S608
            "ORDER BY t.id LIMIT :limit"
        ).bindparams(**binds)
    )
    return [r[0] for r in rows]


# The columns a rescreen reads of each kind: the screened text, what the
# verdict is applied against, who to tell. Not the whole row: most rows only
# get a new ``safety`` record, and building a model (search vectors, counters,
# validation) for each cost as much as screening it.
SCREENED: dict[str, tuple[str, ...]] = {
    "pattern": (
        "id", "author_id", "moderation_status", "safety", "revision", "title", "description",
        "content", "code_examples", "use_case_tags", "tech_stack",
    ),
    "question": ("id", "author_id", "moderation_status", "safety", "title", "body", "tags"),
    "answer": ("id", "author_id", "moderation_status", "safety", "revision", "body", "question_id"),
}  # fmt: skip


async def lock_stale(
    session: AsyncSession, kind: str, ids: Sequence[uuid.UUID], version: str
) -> list[Any]:
    """The rows among ``ids`` still stale, locked for this transaction (rows
    another writer holds are skipped: the next run picks them up): rows of
    the ``SCREENED`` columns, read by name; ``load`` gives the model of one
    that changes."""
    model = MODELS[kind]
    safety = col(model.safety)
    statement = (
        select(*(getattr(model, name) for name in SCREENED[kind]))
        .where(col(model.id).in_(list(ids)))
        .where(or_(safety.is_(None), safety["ruleset_version"].astext != version))
        .with_for_update(of=model, skip_locked=True)
    )
    return list((await session.exec(statement)).all())


async def older_revisions(
    session: AsyncSession, kind: str, current: dict[uuid.UUID, int]
) -> list[Revision]:
    """The revisions of the patterns or answers in ``current`` (id → current
    revision number) older than the current one, locked (a rescreen may
    redact them)."""
    if not current or kind not in ("pattern", "answer"):
        return []
    target = col(Revision.pattern_id) if kind == "pattern" else col(Revision.answer_id)
    found = await session.exec(select(Revision).where(target.in_(list(current))).with_for_update())
    older = []
    for revision in found.all():
        item_id = revision.pattern_id or revision.answer_id
        assert item_id is not None  # a revision has one target (ck_revisions_one_target)
        if revision.number < current[item_id]:
            older.append(revision)
    return older


async def load(session: AsyncSession, kind: str, item_id: uuid.UUID) -> Any:
    """The model of a row ``lock_stale`` locked (this transaction holds it)."""
    item = await session.get(MODELS[kind], item_id)
    assert item is not None  # locked by this transaction, so not deleted
    return item


async def set_safety(session: AsyncSession, kind: str, records: dict[uuid.UUID, str]) -> None:
    """Store each row's ``safety`` record (JSON text) in one statement: the
    rows whose rescreen changed nothing else."""
    if not records:
        return
    await session.exec(  # type: ignore[call-overload]
        text(
            f"UPDATE {TABLES[kind]} t SET safety = v.safety::jsonb "  # noqa: S608
            "FROM unnest(CAST(:ids AS uuid[]), CAST(:records AS text[])) AS v(id, safety) "
            "WHERE t.id = v.id"
        ).bindparams(ids=list(records), records=list(records.values()))
    )


async def staff_ids(session: AsyncSession) -> list[uuid.UUID]:
    """The active admins and moderators: who hears of content a rescreen hid."""
    statement = select(Agent.id).where(
        col(Agent.role).in_(("admin", "moderator")), col(Agent.is_active).is_(True)
    )
    return list((await session.exec(statement)).all())


async def try_lock(session: AsyncSession) -> bool:
    """Take the rescreen lock on this session's connection (False: held elsewhere)."""
    row = (
        await session.exec(  # type: ignore[call-overload]
            text("SELECT pg_try_advisory_lock(:a, :b)").bindparams(
                a=RESCREEN_LOCK[0], b=RESCREEN_LOCK[1]
            )
        )
    ).first()
    return bool(row[0])


async def unlock(session: AsyncSession) -> None:
    await session.exec(  # type: ignore[call-overload]
        text("SELECT pg_advisory_unlock(:a, :b)").bindparams(a=RESCREEN_LOCK[0], b=RESCREEN_LOCK[1])
    )
