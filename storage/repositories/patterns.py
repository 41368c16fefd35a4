"""SQL for patterns: create, read (counting the view), update, archive, list."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    String,
    all_,
    and_,
    any_,
    bindparam,
    cast,
    column,
    func,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage import access
from storage.db import driver_sql, fetch_tuples
from storage.models import Agent, Category, Pattern, PatternView, Vote
from storage.models.base import utcnow
from storage.models.views import PATTERN_VIEWS
from storage.repositories import categories, reputation, rows
from storage.repositories.search import RANK_CANDIDATES

# ?search= on the list ranks at most this many matching rows, as /api/search
# does (docs/decisions/rate-limits.md, "Security: read costs").
SEARCH_CANDIDATES = RANK_CANDIDATES


async def update_counted(session: AsyncSession, pattern: Pattern, changes: dict[str, Any]) -> None:
    """Apply ``changes``; what counts the pattern while it is public (the
    author's pattern_count, a fork's credit) follows it in or out of the
    public set (published and not rejected)."""
    was_public = access.pattern_is_public(pattern)
    await apply_update(session, pattern, changes)
    now_public = access.pattern_is_public(pattern)
    if was_public != now_public:
        await publicity_changed(session, pattern, now_public)


async def publicity_changed(session: AsyncSession, pattern: Pattern, now_public: bool) -> None:
    """The pattern (its row locked) entered or left the public set: move the
    counters that count public patterns."""
    await adjust_pattern_count(session, pattern.author_id, 1 if now_public else -1)
    if pattern.forked_from_id is not None:
        await fork_credit(
            session, pattern.forked_from_id, pattern.author_id, pattern.id, now_public
        )


FORK_REPUTATION = 5
_ORIGINAL = text("SELECT author_id FROM patterns WHERE id = :id FOR UPDATE")
_CREDIT = text(
    """
    INSERT INTO fork_credits AS c (original_id, forker_id, live)
    VALUES (:original, :forker, greatest(:delta, 0))
    ON CONFLICT (original_id, forker_id) DO UPDATE SET live = greatest(c.live + :delta, 0)
    RETURNING live
    """
)


async def fork_credit(
    session: AsyncSession,
    original_id: uuid.UUID,
    forker_id: uuid.UUID,
    fork_id: uuid.UUID,
    gained: bool,
) -> None:
    """A public fork of ``original_id`` by ``forker_id`` appeared (``gained``)
    or went. The pair's credit row counts the forker's public forks; only its
    first (0 -> 1) and last (1 -> 0) change ``fork_count`` and the original
    author's reputation (+5, or its withdrawal; none for one's own pattern).

    The upsert on the pair's primary key is what makes concurrent forks by one
    agent reward once: the second waits on the row the first wrote, then sees
    ``live`` 2. The original's row is locked first, the order every fork path
    takes (the fork request holds it already), so a fork and an archive of
    the same pair cannot deadlock."""
    conn = await session.connection()
    found = (await conn.execute(_ORIGINAL.bindparams(id=original_id))).first()
    if found is None:  # the original is gone (its author deleted): nothing to credit
        return
    author_id: uuid.UUID = found[0]
    delta = 1 if gained else -1
    live = int(
        (
            await conn.execute(
                _CREDIT.bindparams(original=original_id, forker=forker_id, delta=delta)
            )
        ).scalar_one()
    )
    if (gained and live != 1) or (not gained and live != 0):
        return  # another of the pair's forks is public: the credit stands as it was
    await add_to_counter(session, original_id, "fork_count", delta)
    if author_id != forker_id:
        await reputation.record(
            session,
            author_id,
            delta * FORK_REPUTATION,
            "pattern_forked" if gained else "pattern_fork_withdrawn",
            source_type="pattern",
            source_id=fork_id,
            actor_id=forker_id,
        )


async def adjust_pattern_count(session: AsyncSession, author_id: uuid.UUID, delta: int) -> None:
    await session.exec(
        update(Agent)
        .where(col(Agent.id) == author_id)
        .values(pattern_count=col(Agent.pattern_count) + delta)
    )


async def get(session: AsyncSession, ref: str, *, for_update: bool = False) -> Pattern | None:
    """A pattern by id or slug."""
    return await rows.by_ref(session, Pattern, ref, for_update=for_update)


async def related(session: AsyncSession, pattern: Pattern) -> tuple[Agent | None, Category | None]:
    """The pattern's author and category: one statement for both (every
    pattern read and page needs them; docs/benchmarks.md, web pages)."""
    if pattern.category_id is None:
        return await session.get(Agent, pattern.author_id), None
    found = (
        await session.execute(
            select(Agent, Category)
            .outerjoin(Category, col(Category.id) == pattern.category_id)
            .where(col(Agent.id) == pattern.author_id)
        )
    ).first()
    if found is None:
        return None, await categories.by_id(session, pattern.category_id)
    return found[0], found[1]


@dataclass(frozen=True)
class ListQuery:
    page: int = 1
    limit: int = 10
    category_id: uuid.UUID | None = None
    difficulty_level: str | None = None
    search: str | None = None
    sort_by: str | None = None  # None: newest, or relevance when searching
    use_case_tags: tuple[str, ...] = ()
    tech_stack: tuple[str, ...] = ()
    author_id: uuid.UUID | None = None
    forked_from_id: uuid.UUID | None = None
    # Leave out patterns whose code carries safety labels (docs/decisions/safety.md).
    exclude_labelled: bool = False
    # sort_by=trending: the TrendingCounter's ranking, best first.
    trending: Ranked = ()


def _views_table() -> Any:
    """(pattern_id, views) of every pattern with a view: the counter's shards
    summed once, for the ``popular`` sort (one hash join, not a subquery per row)."""
    return (
        select(
            col(PatternView.pattern_id),
            cast(func.sum(col(PatternView.views)), BigInteger).label("views"),
        )
        .group_by(col(PatternView.pattern_id))
        .subquery("pattern_view_totals")
    )


def _popularity(views: Any) -> Any:
    """ "popular": views plus weighted engagement (docs/decisions/resources.md)."""
    return (
        func.coalesce(views.c.views, 0)
        + 10 * col(Pattern.vote_score)
        + 20 * col(Pattern.fork_count)
        + 5 * col(Pattern.bookmark_count)
    )


Ranked = tuple[tuple[str, int], ...]


def _ranked_table(ranked: Ranked) -> Any:
    """(id, score) rows from the TrendingCounter's ranking, as a derived table."""
    ids = [uuid.UUID(p) for p, _ in ranked]
    scores = [score for _, score in ranked]
    return (
        func.unnest(
            bindparam("ranked_ids", ids, type_=ARRAY(PG_UUID(as_uuid=True))),
            bindparam("ranked_scores", scores, type_=ARRAY(Integer)),
        )
        .table_valued(column("id", PG_UUID(as_uuid=True)), column("score", Integer))
        .render_derived(name="ranked")
    )


def _conditions(query: ListQuery) -> tuple[list[ColumnElement[bool]], Any]:
    conditions: list[ColumnElement[bool]] = [access.PUBLIC_PATTERN]
    tsquery = None
    if query.category_id:
        conditions.append(col(Pattern.category_id) == query.category_id)
    if query.difficulty_level:
        conditions.append(col(Pattern.difficulty_level) == query.difficulty_level)
    if query.author_id:
        conditions.append(col(Pattern.author_id) == query.author_id)
    if query.forked_from_id:
        conditions.append(col(Pattern.forked_from_id) == query.forked_from_id)
    if query.use_case_tags:
        conditions.append(col(Pattern.use_case_tags).contains(list(query.use_case_tags)))
    if query.tech_stack:
        conditions.append(col(Pattern.tech_stack).contains(list(query.tech_stack)))
    if query.exclude_labelled:
        conditions.append(rows.unlabelled(Pattern.safety))
    if query.search:
        tsquery = func.websearch_to_tsquery("english", query.search)
        conditions.append(col(Pattern.search_vector).op("@@")(tsquery))
    return conditions, tsquery


def _order(query: ListQuery, tsquery: Any) -> tuple[list[Any], Any]:
    """The ORDER BY of a listing, and the table to outer-join by pattern id for
    it (the trending ranking, or the view totals for popular), if any."""
    ranked = None
    order: list[Any]
    if query.sort_by == "popular":
        ranked = _views_table()
        order = [_popularity(ranked).desc()]
    elif query.sort_by == "top_rated":
        order = [col(Pattern.vote_score).desc()]
    elif query.sort_by == "trusted":
        order = [col(Pattern.trust_score).desc()]
    elif query.sort_by == "trending":
        ranked = _ranked_table(query.trending)
        order = [func.coalesce(ranked.c.score, 0).desc(), col(Pattern.vote_score).desc()]
    elif query.sort_by is None and tsquery is not None:
        order = [func.ts_rank_cd(col(Pattern.rank_vector), tsquery).desc()]
    else:
        order = []
    return [*order, col(Pattern.created_at).desc(), col(Pattern.id)], ranked


@dataclass(frozen=True, slots=True)
class ListedPattern:
    """A pattern as a list shows it (``views.pattern_item``): only the columns
    a list reads, so a page is read without the ORM."""

    id: uuid.UUID
    title: str
    slug: str
    description: str
    difficulty_level: str
    vote_score: int
    use_case_tags: list[str]
    tech_stack: list[str]
    created_at: datetime
    trust: dict[str, Any]
    revision: int
    safety: dict[str, Any] | None
    view_count: int | None


@dataclass(frozen=True, slots=True)
class ListedAuthor:
    """A pattern's author as a list shows it (``views.agent_brief``)."""

    id: uuid.UUID
    username: str
    display_name: str | None


@dataclass(frozen=True, slots=True)
class ListedCategory:
    """A pattern's category as a list shows it (``views.category_brief``)."""

    id: uuid.UUID
    name: str
    slug: str


# A page of a list: each pattern with its author and category.
Listed = tuple[Pattern | ListedPattern, Agent | ListedAuthor, Category | ListedCategory | None]


def _with_related_sql() -> tuple[str, dict[str, Any]]:
    """``with_related``'s statement, its columns in the order of the three
    classes' fields (the view count is the model's own expression)."""
    p, a, c = (getattr(m, "__table__") for m in (Pattern, Agent, Category))  # noqa: B009
    names = [f.name for f in fields(ListedPattern) if f.name != "view_count"]
    picked = [p.c[n] for n in names] + [PATTERN_VIEWS]
    picked += [a.c[f.name] for f in fields(ListedAuthor)]
    picked += [c.c[f.name] for f in fields(ListedCategory)]
    statement = (
        select(*picked)  # type: ignore[call-overload]
        .select_from(p.join(a, a.c.id == p.c.author_id).outerjoin(c, c.c.id == p.c.category_id))
        .where(p.c.id == any_(bindparam("ids", type_=ARRAY(PG_UUID(as_uuid=True)))))
    )
    return driver_sql(statement)


_WITH_RELATED, _WITH_RELATED_BINDS = _with_related_sql()
_AUTHOR_AT = len(fields(ListedPattern))
_CATEGORY_AT = _AUTHOR_AT + len(fields(ListedAuthor))


async def with_related(session: AsyncSession, ids: list[uuid.UUID]) -> list[Listed]:
    """The patterns with these ids, with author and category, in this order,
    as lists show them. Read straight through psycopg, the statement compiled
    once: the ORM's load of a page of 20 (every column of three models) cost
    about four times the CPU (docs/benchmarks.md, "New queries at 100,000
    patterns: the page read without the ORM, and queries that wait
    together"); search, trending and the filtered lists read their pages here."""
    if not ids:
        return []
    found = await fetch_tuples(session, _WITH_RELATED, {**_WITH_RELATED_BINDS, "ids": list(ids)})
    by_id: dict[uuid.UUID, Listed] = {}
    for row in found:
        cat = row[_CATEGORY_AT:]
        by_id[row[0]] = (
            ListedPattern(*row[:_AUTHOR_AT]),
            ListedAuthor(*row[_AUTHOR_AT:_CATEGORY_AT]),
            ListedCategory(*cat) if cat[0] is not None else None,
        )
    return [by_id[i] for i in ids if i in by_id]


async def list_public(session: AsyncSession, query: ListQuery) -> tuple[list[Listed], int]:
    """One page of public patterns with author and category, and the total."""
    conditions, tsquery = _conditions(query)
    where = and_(*conditions)
    order, joined = _order(query, tsquery)
    on = _joined_on(joined)
    offset = (query.page - 1) * query.limit
    count = select(func.count()).select_from(Pattern).where(where)
    if tsquery is not None:
        # Bounded like /api/search: only the first SEARCH_CANDIDATES matches
        # are ranked, sorted and counted (a common word matches half the
        # corpus); ``total`` then says how many were ranked, at most the cap.
        candidates = select(col(Pattern.id)).where(where).limit(SEARCH_CANDIDATES).subquery()
        page = select(col(Pattern.id), func.count().over()).join(
            candidates, candidates.c.id == col(Pattern.id)
        )
        if joined is not None:
            page = page.outerjoin(joined, on)
        hits, total = await rows.counted_page(
            session,
            page.order_by(*order),
            select(func.count()).select_from(candidates),
            offset,
            query.limit,
        )
        return await with_related(session, [h[0] for h in hits]), total
    total = int((await session.exec(count)).one())
    if joined is not None and query.sort_by == "trending":
        return await _trending_list(session, query, where, joined), total
    statement = (
        select(Pattern, Agent, Category)
        .join(Agent, col(Agent.id) == col(Pattern.author_id))
        .outerjoin(Category, col(Category.id) == col(Pattern.category_id))
    )
    if joined is not None:
        statement = statement.outerjoin(joined, on)
    found = (
        await session.exec(
            statement.where(where).order_by(*order).offset(offset).limit(query.limit)
        )
    ).all()
    return [(r[0], r[1], r[2]) for r in found], total


def _joined_on(joined: Any) -> Any:
    """The join condition of ``_order``'s table (keyed ``id`` or ``pattern_id``)."""
    if joined is None:
        return None
    key = joined.c.id if "id" in joined.c else joined.c.pattern_id
    return key == col(Pattern.id)


def _by_trending(ranked: Any) -> list[Any]:
    """Trending score, then total score, then newest."""
    return [
        ranked.c.score.desc(),
        col(Pattern.vote_score).desc(),
        col(Pattern.created_at).desc(),
        col(Pattern.id),
    ]


async def _trending_list(
    session: AsyncSession, query: ListQuery, where: ColumnElement[bool], ranked: Any
) -> list[Listed]:
    """sort_by=trending without a full sort: the ranked patterns that pass the
    filters come first (at most 1,000, looked up by id), then the others in
    ix_patterns_public_top order (vote score, newest)."""
    first = (
        await session.exec(
            select(col(Pattern.id))
            .join(ranked, ranked.c.id == col(Pattern.id))
            .where(where)
            .order_by(*_by_trending(ranked))
        )
    ).all()
    offset = (query.page - 1) * query.limit
    ids = list(first[offset : offset + query.limit])
    if len(ids) < query.limit:
        rest = select(col(Pattern.id)).where(where)
        if first:
            seen = bindparam("seen", list(first), type_=ARRAY(PG_UUID(as_uuid=True)))
            rest = rest.where(col(Pattern.id) != all_(seen))
        ids += (
            await session.exec(
                rest.order_by(
                    col(Pattern.vote_score).desc(), col(Pattern.created_at).desc(), col(Pattern.id)
                )
                .offset(max(0, offset - len(first)))
                .limit(query.limit - len(ids))
            )
        ).all()
    return await with_related(session, ids)


async def trending_page(
    session: AsyncSession, ranked: Ranked, page: int, limit: int, *, unlabelled: bool = False
) -> tuple[list[tuple[*Listed, int]], int]:
    """One page of the public patterns among ``ranked``, by trending score, then
    total score, then newest; with the number of such patterns. ``unlabelled``:
    only patterns without safety labels (before the page is cut)."""
    if not ranked:
        return [], 0
    table = _ranked_table(ranked)
    where = (
        and_(access.PUBLIC_PATTERN, rows.unlabelled(Pattern.safety))
        if unlabelled
        else access.PUBLIC_PATTERN
    )
    offset = (page - 1) * limit
    # Narrow rows and the count in one pass (nested-loop lookups by id), then
    # the page's rows with their author and category.
    hits, total = await rows.counted_page(
        session,
        select(col(Pattern.id), table.c.score, func.count().over())
        .join(table, table.c.id == col(Pattern.id))
        .where(where)
        .order_by(*_by_trending(table)),
        select(func.count())
        .select_from(Pattern)
        .join(table, table.c.id == col(Pattern.id))
        .where(access.PUBLIC_PATTERN),
        offset,
        limit,
    )
    scores = {h[0]: int(h[1]) for h in hits}
    found = await with_related(session, list(scores))
    return [(p, a, c, scores[p.id]) for p, a, c in found], total


async def apply_update(session: AsyncSession, pattern: Pattern, changes: dict[str, Any]) -> None:
    for field, value in changes.items():
        setattr(pattern, field, value)
    pattern.updated_at = utcnow()
    await session.flush()


async def add_to_counter(
    session: AsyncSession, pattern_id: uuid.UUID, column: str, delta: int
) -> int:
    """Atomically add ``delta`` to one of the pattern's counters; returns the new value."""
    return await rows.add_to_counter(session, Pattern, pattern_id, column, delta)


async def ranked_from_votes(session: AsyncSession, days: int, limit: int) -> Ranked:
    """The trending ranking computed from the votes table (when the counter is
    unavailable): net votes cast or changed in the last ``days`` days."""
    score = func.sum(col(Vote.value))
    rows = await session.exec(
        select(col(Vote.target_id), score)
        .where(
            col(Vote.target_type) == "pattern",
            col(Vote.updated_at) > func.now() - func.make_interval(0, 0, 0, days),
        )
        .group_by(col(Vote.target_id))
        .having(score > 0)
        .order_by(score.desc(), func.cast(col(Vote.target_id), String))
        .limit(limit)
    )
    return tuple((str(pattern_id), int(total)) for pattern_id, total in rows.all())
