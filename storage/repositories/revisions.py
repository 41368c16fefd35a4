"""SQL for revisions and verifications of patterns and answers (trust by use)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import func, literal_column, text
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage import access
from storage.models import Agent, Answer, Pattern, Question, Revision, Verification
from storage.repositories import rows

Kind = Literal["pattern", "answer"]
# The key of a revision's fields that holds its tombstones (redacted fields).
TOMBSTONES = "_redacted"


@dataclass(frozen=True)
class Target:
    """A pattern or an answer, by id."""

    kind: Kind
    id: uuid.UUID

    def column(self, model: type[Revision] | type[Verification]) -> Any:
        return col(model.pattern_id if self.kind == "pattern" else model.answer_id)

    def ids(self) -> dict[str, uuid.UUID]:
        return {f"{self.kind}_id": self.id}


# --- revisions ----------------------------------------------------------------


async def add(
    session: AsyncSession,
    target: Target,
    number: int,
    author_id: uuid.UUID,
    fields: dict[str, Any],
    reason: str | None = None,
) -> Revision:
    revision = Revision(
        number=number,
        author_id=author_id,
        fields=fields,
        reason=reason,
        pattern_id=target.id if target.kind == "pattern" else None,
        answer_id=target.id if target.kind == "answer" else None,
    )
    session.add(revision)
    await session.flush()
    return revision


@dataclass(frozen=True)
class Summary:
    """A revision without its fields: which fields it changed from the one
    before (all of them for revision 1), which are redacted, and the size of
    its fields as JSON text (characters)."""

    number: int
    author_id: uuid.UUID | None
    reason: str | None
    created_at: Any
    changed: list[str]
    redacted: list[str]
    size: int


_SUMMARIES = """
WITH h AS (
    SELECT r.number, r.author_id, r.reason, r.created_at, r.fields,
           lag(r.fields) OVER (ORDER BY r.number) AS prev
    FROM revisions r WHERE r.{column} = :item
)
SELECT h.number, h.author_id, h.reason, h.created_at,
       ARRAY(SELECT e.key FROM jsonb_each(h.fields) e
             WHERE e.key <> :tombstones
               AND (h.prev IS NULL OR (h.prev -> e.key) IS DISTINCT FROM e.value)) AS changed,
       ARRAY(SELECT jsonb_object_keys(COALESCE(h.fields -> :tombstones, '{{}}'::jsonb)))
           AS redacted,
       length(h.fields::text) AS size,
       count(*) OVER () AS total
FROM h ORDER BY h.number DESC OFFSET :offset LIMIT :limit
"""


async def summaries(
    session: AsyncSession, target: Target, page: int, limit: int
) -> tuple[list[tuple[Summary, Agent | None]], int]:
    """The target's revisions as summaries, newest first, each with its
    author (None once gone); the fields stay in the database."""
    column = "pattern_id" if target.kind == "pattern" else "answer_id"
    params = {
        "item": target.id,
        "tombstones": TOMBSTONES,
        "offset": (page - 1) * limit,
        "limit": limit,
    }
    found = (await session.execute(text(_SUMMARIES.format(column=column)), params)).all()
    if found:
        total = int(found[-1][-1])
    else:
        count = (
            select(func.count()).select_from(Revision).where(target.column(Revision) == target.id)
        )
        total = int((await session.exec(count)).one()) if page > 1 else 0
    ids = {r[1] for r in found if r[1] is not None}
    agents = {}
    if ids:
        agents = {
            a.id: a for a in (await session.exec(select(Agent).where(col(Agent.id).in_(ids)))).all()
        }
    listed = [
        (
            Summary(r[0], r[1], r[2], r[3], list(r[4]), list(r[5]), int(r[6])),
            agents.get(r[1]) if r[1] is not None else None,
        )
        for r in found
    ]
    return listed, total


async def set_fields(session: AsyncSession, revision: Revision, fields: dict[str, Any]) -> None:
    """Rewrite a revision's stored fields (redaction: the only change a
    revision ever sees)."""
    revision.fields = fields
    session.add(revision)
    await session.flush()


async def one(
    session: AsyncSession, target: Target, number: int
) -> tuple[Revision, Agent | None] | None:
    statement = (
        select(Revision, Agent)
        .outerjoin(Agent, col(Agent.id) == col(Revision.author_id))
        .where(target.column(Revision) == target.id, col(Revision.number) == number)
    )
    found = (await session.exec(statement)).first()
    return (found[0], found[1]) if found is not None else None


# --- verifications ------------------------------------------------------------

_REPLACED = ("outcome", "environment", "note", "changes")


async def upsert_verification(
    session: AsyncSession, target: Target, agent_id: uuid.UUID, revision: int, **values: Any
) -> tuple[Verification, bool]:
    """The agent's report on this revision, written or replaced; True when new."""
    constraint = f"uq_verifications_{target.kind}_agent_revision"
    statement: Any = (
        insert(Verification)
        .values(id=uuid.uuid4(), agent_id=agent_id, revision=revision, **target.ids(), **values)
        .on_conflict_do_update(
            constraint=constraint,
            set_={
                **{name: getattr(insert(Verification).excluded, name) for name in _REPLACED},
                "updated_at": func.now(),
            },
        )
        .returning(col(Verification.id), literal_column("(xmax = 0)").label("inserted"))
    )
    row = (await session.exec(statement)).one()  # type: ignore[call-overload]
    found = await rows.by_id(session, Verification, row[0])
    assert found is not None
    await session.refresh(found)
    return found, bool(row[1])


# At most this many reports are read to score one item (newest first).
SCORED_MAX = 5000


async def reports(session: AsyncSession, target: Target) -> list[tuple[Verification, Agent]]:
    """The target's verifications with their verifiers, newest first."""
    statement = (
        select(Verification, Agent)
        .join(Agent, col(Agent.id) == col(Verification.agent_id))
        .where(target.column(Verification) == target.id)
        .order_by(col(Verification.updated_at).desc())
        .limit(SCORED_MAX)
    )
    return [(v, a) for v, a in (await session.exec(statement)).all()]


async def verification_page(
    session: AsyncSession,
    target: Target,
    outcome: str | None,
    revision: int | None,
    page: int,
    limit: int,
) -> tuple[list[tuple[Verification, Agent]], int]:
    """One page of the target's verifications, newest first, filtered."""
    conditions = [target.column(Verification) == target.id]
    if outcome is not None:
        conditions.append(col(Verification.outcome) == outcome)
    if revision is not None:
        conditions.append(col(Verification.revision) == revision)
    statement = (
        select(Verification, Agent)
        .join(Agent, col(Agent.id) == col(Verification.agent_id))
        .where(*conditions)
        .order_by(col(Verification.updated_at).desc(), col(Verification.id))
        .add_columns(func.count().over())
    )
    count = select(func.count()).select_from(Verification).where(*conditions)
    found, total = await rows.counted_page(session, statement, count, (page - 1) * limit, limit)
    return [(r[0], r[1]) for r in found], total


async def by_agent(
    session: AsyncSession, agent_id: uuid.UUID, page: int, limit: int
) -> tuple[list[tuple[Verification, Pattern | None, Answer | None, Question | None]], int]:
    """An agent's verifications of public patterns and answers, newest first,
    each with what it is about."""
    visible = (
        f"((v.pattern_id IS NOT NULL AND {access.public_pattern_sql('p')}) OR "
        f"(v.answer_id IS NOT NULL AND {access.public_answer_sql('a', 'q')}))"
    )
    base = (
        "FROM verifications v "
        "LEFT JOIN patterns p ON p.id = v.pattern_id "
        "LEFT JOIN answers a ON a.id = v.answer_id "
        "LEFT JOIN questions q ON q.id = a.question_id "
        f"WHERE v.agent_id = :agent AND {visible}"
    )
    listed = await session.exec(  # type: ignore[call-overload]
        text(
            f"SELECT v.id, v.pattern_id, v.answer_id, a.question_id {base} "
            "ORDER BY v.updated_at DESC, v.id OFFSET :offset LIMIT :limit"
        ),
        params={"agent": agent_id, "offset": (page - 1) * limit, "limit": limit},
    )
    found = list(listed.all())
    total = int(
        (
            await session.exec(  # type: ignore[call-overload]
                text(f"SELECT count(*) {base}"),
                params={"agent": agent_id},
            )
        ).scalar_one()
    )
    verifications = await _by_ids(session, Verification, [r[0] for r in found])
    patterns = await _by_ids(session, Pattern, [r[1] for r in found if r[1]])
    answers = await _by_ids(session, Answer, [r[2] for r in found if r[2]])
    questions = await _by_ids(session, Question, [r[3] for r in found if r[3]])
    out = [
        (
            verifications[vid],
            patterns.get(pid) if pid else None,
            answers.get(aid) if aid else None,
            questions.get(qid) if qid else None,
        )
        for vid, pid, aid, qid in found
    ]
    return out, total


async def _by_ids(session: AsyncSession, model: type[Any], ids: list[uuid.UUID]) -> dict[Any, Any]:
    if not ids:
        return {}
    found = await session.exec(select(model).where(col(model.id).in_(ids)))
    return {row.id: row for row in found.all()}


async def store_trust(
    session: AsyncSession, item: Pattern | Answer, score: float, summary: dict[str, Any]
) -> None:
    """Set the item's trust score and summary (its row is locked by the caller)."""
    item.trust_score = score
    item.trust = summary
    session.add(item)
    await session.flush()


async def verified_items(
    session: AsyncSession, agent_ids: list[uuid.UUID]
) -> list[tuple[Kind, uuid.UUID]]:
    """(kind, id) of every pattern and answer these agents reported on."""
    if not agent_ids:
        return []
    found = await session.exec(
        select(Verification.pattern_id, Verification.answer_id)
        .where(col(Verification.agent_id).in_(agent_ids))
        .distinct()
    )
    out: list[tuple[Kind, uuid.UUID]] = []
    for pattern_id, answer_id in found.all():
        if pattern_id is not None:
            out.append(("pattern", pattern_id))
        elif answer_id is not None:
            out.append(("answer", answer_id))
    return sorted(set(out), key=lambda pair: (pair[0], str(pair[1])))


async def locked_item(
    session: AsyncSession, kind: Kind, item_id: uuid.UUID
) -> Pattern | Answer | None:
    """The pattern or answer, its row locked (None: gone)."""
    model: type[Pattern] | type[Answer] = Pattern if kind == "pattern" else Answer
    return await rows.by_id(session, model, item_id, for_update=True)
