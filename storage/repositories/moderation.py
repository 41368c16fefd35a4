"""SQL for moderation: the queues, the decision log, and the flags a decision settles."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import and_, func, or_, update
from sqlalchemy.orm import aliased
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import (
    Agent,
    Answer,
    Appeal,
    Flag,
    ModerationDecision,
    Pattern,
    Question,
    Revision,
    Verification,
)
from storage.repositories import rows


async def settle_flags(session: AsyncSession, pattern_id: uuid.UUID, status: str) -> int:
    """Close the pattern's open flags (``resolved`` on reject, ``dismissed`` on approve)."""
    result = await session.exec(
        update(Flag)
        .where(col(Flag.pattern_id) == pattern_id, col(Flag.status) == "open")
        .values(status=status)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def _page(statement: Any, page: int, limit: int) -> tuple[Any, int, int]:
    return statement.add_columns(func.count().over()), (page - 1) * limit, limit


async def _counted(
    session: AsyncSession, statement: Any, count: Any, page: int, limit: int
) -> tuple[list[Any], int]:
    listed, offset, limit = _page(statement, page, limit)
    found, total = await rows.counted_page(session, listed, count, offset, limit)
    return [tuple(r[:-1]) for r in found], total


async def patterns_in(
    session: AsyncSession, status: str, page: int, limit: int
) -> tuple[list[Any], int]:
    """Patterns with ``moderation_status``: the queues oldest first (flagged:
    most flags first), rejected ones most recently changed first."""
    condition = col(Pattern.moderation_status) == status
    order: list[Any] = [col(Pattern.created_at), col(Pattern.id)]
    if status == "flagged":
        order = [col(Pattern.flag_count).desc(), *order]
    elif status == "rejected":
        order = [col(Pattern.updated_at).desc(), col(Pattern.id)]
    statement = (
        select(Pattern, Agent)
        .join(Agent, col(Agent.id) == col(Pattern.author_id))
        .where(condition)
        .order_by(*order)
    )
    count = select(func.count()).select_from(Pattern).where(condition)
    return await _counted(session, statement, count, page, limit)


async def patterns_edited(session: AsyncSession, page: int, limit: int) -> tuple[list[Any], int]:
    """Approved patterns whose text changed after a moderator decided on them,
    most recently changed first."""
    condition = and_(
        col(Pattern.moderation_status) == "approved",
        col(Pattern.reviewed_revision).is_not(None),
        col(Pattern.revision) > col(Pattern.reviewed_revision),
    )
    statement = (
        select(Pattern, Agent)
        .join(Agent, col(Agent.id) == col(Pattern.author_id))
        .where(condition)
        .order_by(col(Pattern.updated_at).desc(), col(Pattern.id))
    )
    count = select(func.count()).select_from(Pattern).where(condition)
    return await _counted(session, statement, count, page, limit)


async def verified_edits(session: AsyncSession, page: int, limit: int) -> tuple[list[Any], int]:
    """Every edit (revision 2 on) of a pattern or an answer that someone had
    verified on an earlier revision, newest first, reviewed or not: each with
    its editor (None once gone), the pattern or the answer and its question,
    and how many reports the earlier revisions had."""
    editor = aliased(Agent)
    reported_before = (
        select(func.count())
        .select_from(Verification)
        .where(
            or_(
                col(Verification.pattern_id) == col(Revision.pattern_id),
                col(Verification.answer_id) == col(Revision.answer_id),
            ),
            col(Verification.revision) < col(Revision.number),
        )
        .correlate(Revision)
        .scalar_subquery()
    )
    condition = and_(col(Revision.number) > 1, reported_before > 0)
    statement = (
        select(Revision, editor, Pattern, Answer)
        .add_columns(Question, reported_before)
        .outerjoin(editor, col(editor.id) == col(Revision.author_id))
        .outerjoin(Pattern, col(Pattern.id) == col(Revision.pattern_id))
        .outerjoin(Answer, col(Answer.id) == col(Revision.answer_id))
        .outerjoin(Question, col(Question.id) == col(Answer.question_id))
        .where(condition)
        .order_by(col(Revision.created_at).desc(), col(Revision.id))
    )
    count = select(func.count()).select_from(Revision).where(condition)
    return await _counted(session, statement, count, page, limit)


async def questions_in(
    session: AsyncSession, status: str, page: int, limit: int
) -> tuple[list[Any], int]:
    condition = and_(col(Question.moderation_status) == status, col(Question.status) != "deleted")
    statement = (
        select(Question, Agent)
        .join(Agent, col(Agent.id) == col(Question.author_id))
        .where(condition)
        .order_by(col(Question.created_at), col(Question.id))
    )
    count = select(func.count()).select_from(Question).where(condition)
    return await _counted(session, statement, count, page, limit)


async def answers_in(
    session: AsyncSession, status: str, page: int, limit: int
) -> tuple[list[Any], int]:
    condition = and_(col(Answer.moderation_status) == status, col(Question.status) != "deleted")
    statement = (
        select(Answer, Agent, Question)
        .join(Agent, col(Agent.id) == col(Answer.author_id))
        .join(Question, col(Question.id) == col(Answer.question_id))
        .where(condition)
        .order_by(col(Answer.created_at), col(Answer.id))
    )
    count = (
        select(func.count())
        .select_from(Answer)
        .join(Question, col(Question.id) == col(Answer.question_id))
        .where(condition)
    )
    return await _counted(session, statement, count, page, limit)


async def decisions(session: AsyncSession, page: int, limit: int) -> tuple[list[Any], int]:
    """The decision log, newest first, with each moderator (None once deleted)."""
    statement = (
        select(ModerationDecision, Agent)
        .outerjoin(Agent, col(Agent.id) == col(ModerationDecision.moderator_id))
        .order_by(col(ModerationDecision.created_at).desc(), col(ModerationDecision.id))
    )
    count = select(func.count()).select_from(ModerationDecision)
    return await _counted(session, statement, count, page, limit)


async def pending_appeals(session: AsyncSession, page: int, limit: int) -> tuple[list[Any], int]:
    """Appeals waiting for review, oldest first, with the agent and the appellant."""
    appellant = aliased(Agent)
    condition = col(Appeal.status) == "pending_review"
    statement = (
        select(Appeal, Agent, appellant)
        .join(Agent, col(Agent.id) == col(Appeal.agent_id))
        .outerjoin(appellant, col(appellant.id) == col(Appeal.appellant_id))
        .where(condition)
        .order_by(col(Appeal.created_at), col(Appeal.id))
    )
    count = select(func.count()).select_from(Appeal).where(condition)
    return await _counted(session, statement, count, page, limit)


async def open_flags(session: AsyncSession, page: int, limit: int) -> tuple[list[Any], int]:
    """Open community flags, newest first, with the pattern and the reporter."""
    condition = col(Flag.status) == "open"
    statement = (
        select(Flag, Pattern, Agent)
        .join(Pattern, col(Pattern.id) == col(Flag.pattern_id))
        .join(Agent, col(Agent.id) == col(Flag.agent_id))
        .where(condition)
        .order_by(col(Flag.created_at).desc(), col(Flag.id))
    )
    count = select(func.count()).select_from(Flag).where(condition)
    return await _counted(session, statement, count, page, limit)
