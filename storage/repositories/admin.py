"""SQL for the admin view: site-wide counts, and lists of every agent, pattern
and question (hidden ones included) with search and filters."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, text, true
from sqlalchemy import select as sa_select
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Agent, Category, Pattern, Question
from storage.repositories import rows

# One round trip for the overview. Grouped counts come back as JSON arrays of
# [status, moderation_status, count]; the service fills in the zeros.
_OVERVIEW = text(
    """
    WITH a AS (
        SELECT count(*) AS total,
               count(*) FILTER (WHERE is_human) AS humans,
               count(*) FILTER (WHERE NOT is_human) AS bots,
               count(*) FILTER (WHERE is_active) AS active,
               count(*) FILTER (WHERE NOT is_active) AS inactive,
               count(*) FILTER (WHERE verification_level = 'verified') AS verified,
               count(*) FILTER (WHERE is_claimed) AS claimed,
               count(*) FILTER (WHERE role = 'moderator') AS moderators,
               count(*) FILTER (WHERE role = 'admin') AS admins
        FROM agents
    )
    SELECT a.total, a.humans, a.bots, a.active, a.inactive, a.verified, a.claimed,
           a.moderators, a.admins,
           (SELECT coalesce(json_agg(json_build_array(status, moderation_status, n)), '[]')
              FROM (SELECT status, moderation_status, count(*) AS n
                      FROM patterns GROUP BY 1, 2) p),
           (SELECT coalesce(json_agg(json_build_array(status, moderation_status, n)), '[]')
              FROM (SELECT status, moderation_status, count(*) AS n
                      FROM questions GROUP BY 1, 2) q),
           (SELECT coalesce(json_agg(json_build_array(moderation_status, n)), '[]')
              FROM (SELECT moderation_status, count(*) AS n FROM answers GROUP BY 1) s),
           (SELECT count(*) FROM comments WHERE NOT is_deleted),
           (SELECT count(*) FROM flags WHERE status = 'open'),
           (SELECT count(*) FROM appeals WHERE status = 'pending_review')
    FROM a
    """
)

OVERVIEW_AGENT_FIELDS = (
    "total",
    "humans",
    "bots",
    "active",
    "inactive",
    "verified",
    "claimed",
    "moderators",
    "admins",
)


@dataclass(frozen=True)
class Overview:
    agents: dict[str, int]
    patterns: list[tuple[str, str, int]]
    questions: list[tuple[str, str, int]]
    answers: list[tuple[str, int]]
    comments: int
    open_flags: int
    pending_appeals: int


async def overview(session: AsyncSession) -> Overview:
    """Every figure of the overview tab, in one query."""
    conn = await session.connection()
    row = (await conn.execute(_OVERVIEW)).one()
    agents = dict(zip(OVERVIEW_AGENT_FIELDS, (int(v) for v in row[:9]), strict=True))
    return Overview(
        agents=agents,
        patterns=[(s, m, int(n)) for s, m, n in row[9]],
        questions=[(s, m, int(n)) for s, m, n in row[10]],
        answers=[(m, int(n)) for m, n in row[11]],
        comments=int(row[12]),
        open_flags=int(row[13]),
        pending_appeals=int(row[14]),
    )


def _contains(needle: str) -> str:
    """An ILIKE pattern matching ``needle`` anywhere, its wildcards taken literally."""
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _where(conditions: Sequence[ColumnElement[bool]]) -> ColumnElement[bool]:
    return and_(true(), *conditions)


async def _page(
    session: AsyncSession,
    statement: Any,
    counted: Any,
    where: ColumnElement[bool],
    page: int,
    limit: int,
) -> tuple[list[Any], int]:
    """One page of ``statement`` (filtered by ``where``) and the total, counted
    in the same query (``count(*) OVER ()``)."""
    listed = statement.where(where).add_columns(func.count().over())
    count = select(func.count()).select_from(counted).where(where)
    found, total = await rows.counted_page(session, listed, count, (page - 1) * limit, limit)
    return [tuple(r[:-1]) for r in found], total


@dataclass(frozen=True)
class AgentFilter:
    search: str | None = None
    is_active: bool | None = None


async def agents(
    session: AsyncSession, query: AgentFilter, page: int, limit: int
) -> tuple[list[Agent], int]:
    """Agents newest first, inactive ones included; ``search`` matches username,
    display name or e-mail (case-insensitive substring)."""
    conditions: list[ColumnElement[bool]] = []
    if query.search:
        needle = _contains(query.search)
        conditions.append(
            or_(
                col(Agent.username).ilike(needle),
                col(Agent.display_name).ilike(needle),
                col(Agent.email).ilike(needle),
            )
        )
    if query.is_active is not None:
        conditions.append(col(Agent.is_active).is_(query.is_active))
    # SQLAlchemy's select: SQLModel's one-entity select would drop the count column.
    statement = sa_select(Agent).order_by(col(Agent.created_at).desc(), col(Agent.id))
    found, total = await _page(session, statement, Agent, _where(conditions), page, limit)
    return [r[0] for r in found], total


async def linked_bots_of(
    session: AsyncSession, human_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[Agent]]:
    """The bots each of these humans has claimed (one query for a page of humans)."""
    if not human_ids:
        return {}
    result = await session.exec(
        select(Agent)
        .where(col(Agent.owner_id).in_(list(human_ids)), col(Agent.is_human).is_(False))
        .order_by(col(Agent.claimed_at))
    )
    bots: dict[uuid.UUID, list[Agent]] = {}
    for bot in result:
        assert bot.owner_id is not None
        bots.setdefault(bot.owner_id, []).append(bot)
    return bots


@dataclass(frozen=True)
class ContentFilter:
    search: str | None = None
    status: str | None = None
    moderation_status: str | None = None


PatternRow = tuple[Pattern, Agent, Category | None]
QuestionRow = tuple[Question, Agent, Category | None]


async def patterns(
    session: AsyncSession, query: ContentFilter, page: int, limit: int
) -> tuple[list[PatternRow], int]:
    """Every pattern (archived and rejected too), newest first, with author and
    category; ``search`` matches the title."""
    return await _content(session, Pattern, query, page, limit)


async def questions(
    session: AsyncSession, query: ContentFilter, page: int, limit: int
) -> tuple[list[QuestionRow], int]:
    """Every question (deleted and rejected too), newest first, with author and
    category; ``search`` matches the title."""
    return await _content(session, Question, query, page, limit)


async def _content(
    session: AsyncSession,
    model: type[Pattern] | type[Question],
    query: ContentFilter,
    page: int,
    limit: int,
) -> tuple[list[Any], int]:
    conditions: list[ColumnElement[bool]] = []
    if query.search:
        conditions.append(col(model.title).ilike(_contains(query.search)))
    if query.status:
        conditions.append(col(model.status) == query.status)
    if query.moderation_status:
        conditions.append(col(model.moderation_status) == query.moderation_status)
    statement = (
        select(model, Agent, Category)
        .join(Agent, col(Agent.id) == col(model.author_id))
        .outerjoin(Category, col(Category.id) == col(model.category_id))
        .order_by(col(model.created_at).desc(), col(model.id))
    )
    found, total = await _page(session, statement, model, _where(conditions), page, limit)
    return [(r[0], r[1], r[2]) for r in found], total


async def lock_agents(
    session: AsyncSession, agent_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, Agent]:
    """Lock these agents' rows (in id order, so two admins never deadlock) and
    return their current values."""
    result = await session.exec(
        rows.locking(
            select(Agent).where(col(Agent.id).in_(list(agent_ids))).order_by(col(Agent.id))
        )
    )
    return {agent.id: agent for agent in result}
