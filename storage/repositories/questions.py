"""SQL for questions and answers."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, delete, func, or_, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage import access
from storage.models import Agent, Answer, Category, Comment, Question, Vote
from storage.models.base import utcnow
from storage.repositories import rows
from storage.repositories.search import RANK_CANDIDATES

# ?search= on the list ranks at most this many matching rows, as /api/search
# does (docs/decisions/rate-limits.md, "Security: read costs").
SEARCH_CANDIDATES = RANK_CANDIDATES


async def get(session: AsyncSession, ref: str, *, for_update: bool = False) -> Question | None:
    """A question by slug (or id)."""
    return await rows.by_ref(session, Question, ref, for_update=for_update)


async def by_ids(session: AsyncSession, question_ids: list[uuid.UUID]) -> list[Question]:
    found = await session.exec(select(Question).where(col(Question.id).in_(question_ids)))
    return list(found.all())


async def touch(session: AsyncSession, question_id: uuid.UUID) -> None:
    """Record activity on the question (sort_by=active)."""
    await session.exec(
        update(Question).where(col(Question.id) == question_id).values(last_activity_at=utcnow())
    )


# The orders a question's answers are read in (votes: the spec's default).
AnswerOrder = Literal["votes", "newest", "trusted"]


@dataclass(frozen=True)
class ListQuery:
    page: int = 1
    limit: int = 10
    category_id: uuid.UUID | None = None
    search: str | None = None
    sort_by: str | None = None  # None: newest, or relevance when searching
    tags: tuple[str, ...] = ()
    status: str = "open"  # open | closed | all
    author_id: uuid.UUID | None = None
    # Leave out questions whose text carries safety labels (docs/decisions/safety.md).
    exclude_labelled: bool = False


def _conditions(query: ListQuery) -> tuple[list[ColumnElement[bool]], Any]:
    conditions: list[ColumnElement[bool]] = [access.VISIBLE_QUESTION]
    tsquery = None
    if query.status != "all":
        conditions.append(col(Question.status) == query.status)
    if query.category_id:
        conditions.append(col(Question.category_id) == query.category_id)
    if query.author_id:
        conditions.append(col(Question.author_id) == query.author_id)
    if query.tags:
        conditions.append(col(Question.tags).contains(list(query.tags)))
    if query.exclude_labelled:
        conditions.append(rows.unlabelled(Question.safety))
    if query.sort_by == "unanswered":
        conditions.append(col(Question.answer_count) == 0)
    if query.search:
        tsquery = func.websearch_to_tsquery("english", query.search)
        conditions.append(col(Question.search_vector).op("@@")(tsquery))
    return conditions, tsquery


def _order(query: ListQuery, tsquery: Any) -> list[Any]:
    order: list[Any]
    if query.sort_by == "votes":
        order = [col(Question.vote_score).desc()]
    elif query.sort_by == "active":
        order = [col(Question.last_activity_at).desc()]
    elif query.sort_by == "trusted":
        order = [_best_answer_trust().desc()]
    elif query.sort_by is None and tsquery is not None:
        order = [func.ts_rank_cd(col(Question.search_vector), tsquery).desc()]
    else:  # newest, unanswered
        order = []
    return [*order, col(Question.created_at).desc(), col(Question.id)]


def _best_answer_trust() -> Any:
    """The best trust score among the question's shown answers (0 without any)."""
    best = (
        select(func.max(col(Answer.trust_score)))
        .where(col(Answer.question_id) == col(Question.id), access.ANSWER_SHOWN)
        .correlate(Question)
        .scalar_subquery()
    )
    return func.coalesce(best, 0)


Listed = tuple[Question, Agent, Category | None]


def _with_related() -> Any:
    return (
        select(Question, Agent, Category)
        .join(Agent, col(Agent.id) == col(Question.author_id))
        .outerjoin(Category, col(Category.id) == col(Question.category_id))
    )


async def list_visible(session: AsyncSession, query: ListQuery) -> tuple[list[Listed], int]:
    """One page of visible questions with author and category, and the total."""
    conditions, tsquery = _conditions(query)
    where = and_(*conditions)
    order = _order(query, tsquery)
    offset = (query.page - 1) * query.limit
    count = select(func.count()).select_from(Question).where(where)
    if tsquery is not None:
        # Bounded like /api/search: only the first SEARCH_CANDIDATES matches
        # are ranked, sorted and counted, in one pass over narrow rows; then
        # the page's rows are loaded by id. ``total`` says how many were
        # ranked, at most the cap.
        candidates = select(col(Question.id)).where(where).limit(SEARCH_CANDIDATES).subquery()
        hits, total = await rows.counted_page(
            session,
            select(col(Question.id), func.count().over())
            .join(candidates, candidates.c.id == col(Question.id))
            .order_by(*order),
            select(func.count()).select_from(candidates),
            offset,
            query.limit,
        )
        ids = [h[0] for h in hits]
        found = (await session.exec(_with_related().where(col(Question.id).in_(ids)))).all()
        by_id = {r[0].id: (r[0], r[1], r[2]) for r in found}
        return [by_id[i] for i in ids if i in by_id], total
    total = int((await session.exec(count)).one())
    found = (
        await session.exec(
            _with_related().where(where).order_by(*order).offset(offset).limit(query.limit)
        )
    ).all()
    return [(r[0], r[1], r[2]) for r in found], total


async def with_related(session: AsyncSession, ref: str | uuid.UUID) -> Listed | None:
    """A question by slug or id, with its author and category."""
    where = (
        col(Question.id) == ref if isinstance(ref, uuid.UUID) else rows.id_or_slug(Question, ref)
    )
    row = (await session.exec(_with_related().where(where))).first()
    return (row[0], row[1], row[2]) if row is not None else None


# Answers ----------------------------------------------------------------------


async def answer(
    session: AsyncSession, answer_id: uuid.UUID, *, for_update: bool = False
) -> Answer | None:
    return await rows.by_id(session, Answer, answer_id, for_update=for_update)


async def answer_and_question(
    session: AsyncSession, answer_id: uuid.UUID, *, lock: type[Answer | Question] | None = None
) -> tuple[Answer, Question] | None:
    """An answer and its question in one query; ``lock`` names the one row to
    lock (FOR UPDATE, refreshing the session's copy)."""
    statement = (
        select(Answer, Question)
        .join(Question, col(Question.id) == col(Answer.question_id))
        .where(col(Answer.id) == answer_id)
    )
    if lock is not None:
        statement = statement.with_for_update(of=lock).execution_options(populate_existing=True)
    found = (await session.exec(statement)).first()
    return (found[0], found[1]) if found is not None else None


def _answers_shown(
    question_id: uuid.UUID, viewer_id: uuid.UUID | None, unlabelled: bool = False
) -> Any:
    """A question's answers the viewer may see: rejected ones only for their
    author; ``unlabelled``: only those without safety labels."""
    shown: ColumnElement[bool] = access.ANSWER_SHOWN
    if viewer_id is not None:
        shown = or_(shown, col(Answer.author_id) == viewer_id)
    if unlabelled:
        return and_(col(Answer.question_id) == question_id, shown, rows.unlabelled(Answer.safety))
    return and_(col(Answer.question_id) == question_id, shown)


async def answers_of(
    session: AsyncSession,
    question_id: uuid.UUID,
    viewer_id: uuid.UUID | None,
    offset: int,
    limit: int,
    *,
    order: AnswerOrder = "votes",
    unlabelled: bool = False,
) -> list[tuple[Answer, Agent]]:
    """One page of the answers to a question with their authors: accepted
    first, then by votes, then oldest first (``trusted``: by trust score
    first; ``newest``: the accepted one, then newest first)."""
    keys: list[Any]
    if order == "newest":
        keys = [col(Answer.is_accepted).desc(), col(Answer.created_at).desc()]
    else:
        first: list[Any] = [col(Answer.trust_score).desc()] if order == "trusted" else []
        keys = [
            *first,
            col(Answer.is_accepted).desc(),
            col(Answer.vote_score).desc(),
            col(Answer.created_at),
        ]
    found = await session.exec(
        select(Answer, Agent)
        .join(Agent, col(Agent.id) == col(Answer.author_id))
        .where(_answers_shown(question_id, viewer_id, unlabelled))
        .order_by(*keys, col(Answer.id))
        .offset(offset)
        .limit(limit)
    )
    return [(a, agent) for a, agent in found.all()]


async def count_answers(
    session: AsyncSession,
    question_id: uuid.UUID,
    viewer_id: uuid.UUID | None,
    *,
    unlabelled: bool = False,
) -> int:
    """How many answers ``answers_of`` pages through."""
    found = await session.exec(
        select(func.count())
        .select_from(Answer)
        .where(_answers_shown(question_id, viewer_id, unlabelled))
    )
    return int(found.one())


async def insert_answer(session: AsyncSession, row: Answer) -> Answer:
    session.add(row)
    await session.flush()
    return row


async def set_accepted(session: AsyncSession, answer_id: uuid.UUID, accepted: bool) -> None:
    await session.exec(
        update(Answer).where(col(Answer.id) == answer_id).values(is_accepted=accepted)
    )


async def lock_comments(session: AsyncSession, answer_id: uuid.UUID) -> list[uuid.UUID]:
    """Lock the answer's comments (before removing them) and return their ids."""
    found = await session.exec(
        select(col(Comment.id)).where(col(Comment.answer_id) == answer_id).with_for_update()
    )
    return list(found.all())


async def votes_on(session: AsyncSession, target_type: str, target_id: uuid.UUID) -> list[Vote]:
    found = await session.exec(
        select(Vote).where(col(Vote.target_type) == target_type, col(Vote.target_id) == target_id)
    )
    return list(found.all())


async def remove_answer(
    session: AsyncSession, answer_id: uuid.UUID, comment_ids: Sequence[uuid.UUID]
) -> None:
    """Delete an answer, its comments and every vote on either."""
    on_answer = and_(col(Vote.target_type) == "answer", col(Vote.target_id) == answer_id)
    on_comments = and_(col(Vote.target_type) == "comment", col(Vote.target_id).in_(comment_ids))
    await session.exec(delete(Vote).where(or_(on_answer, on_comments)))
    await session.exec(delete(Comment).where(col(Comment.answer_id) == answer_id))
    await session.exec(delete(Answer).where(col(Answer.id) == answer_id))


async def by_author(
    session: AsyncSession, author_id: uuid.UUID, page: int, limit: int
) -> tuple[list[tuple[Answer, Question]], int]:
    """An agent's public answers (not rejected, on visible questions), newest
    first, with their question."""
    where = and_(col(Answer.author_id) == author_id, access.PUBLIC_ANSWER)
    total = int(
        (
            await session.exec(
                select(func.count())
                .select_from(Answer)
                .join(Question, col(Question.id) == col(Answer.question_id))
                .where(where)
            )
        ).one()
    )
    found = await session.exec(
        select(Answer, Question)
        .join(Question, col(Question.id) == col(Answer.question_id))
        .where(where)
        .order_by(col(Answer.created_at).desc(), col(Answer.id))
        .offset((page - 1) * limit)
        .limit(limit)
    )
    return [(a, q) for a, q in found.all()], total
