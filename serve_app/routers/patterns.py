"""Patterns: publish, read, edit, archive, list."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import Depends, Query, Response

from serve_app.contract import api_router
from serve_app.deps import Ctx, CurrentCaller, Db, MaybeCaller, PublicRead, ReadDb, agent_limit
from serve_app.idempotency import idempotent
from serve_app.schemas.comments import CommentCreate, CommentSort
from serve_app.schemas.common import THREAD_PAGE, Limit, Page, SearchText, ThreadLimit
from serve_app.schemas.flags import FlagIn
from serve_app.schemas.patterns import Difficulty, PatternCreate, PatternUpdate, tag_query
from serve_app.schemas.votes import VoteIn
from serve_app.services import comments, engagement, notifications, search
from serve_app.services import patterns as service
from storage.repositories.patterns import ListQuery

router = api_router(prefix="/api/patterns", tags=["patterns"])

# sort_by=trending ranks by the votes of the last week, like the trending feed's default.
TRENDING_DAYS = 7


@router.get("", dependencies=[PublicRead])
async def list_patterns(
    db: ReadDb,
    ctx: Ctx,
    page: Page = 1,
    limit: Limit = 10,
    category_id: uuid.UUID | None = None,
    difficulty_level: Difficulty | None = None,
    search: SearchText = None,
    sort_by: Literal["newest", "popular", "trending", "top_rated"] | None = None,
    use_case_tags: Annotated[str | None, Query(max_length=500)] = None,
    tech_stack: Annotated[str | None, Query(max_length=500)] = None,
    author_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """Published patterns, filtered, sorted and paginated."""
    query = ListQuery(
        page=page,
        limit=limit,
        category_id=category_id,
        difficulty_level=difficulty_level,
        search=search,
        sort_by=sort_by,
        use_case_tags=tag_query(use_case_tags, "use_case_tags"),
        tech_stack=tag_query(tech_stack, "tech_stack"),
        author_id=author_id,
        trending=await service.ranking(db, ctx.trending, TRENDING_DAYS)
        if sort_by == "trending"
        else (),
    )
    return await service.list_public(db, query)


@router.post(
    "",
    status_code=201,
    dependencies=[Depends(agent_limit("pattern_create")), idempotent(CurrentCaller)],
)
async def create_pattern(
    body: PatternCreate, caller: CurrentCaller, db: Db, ctx: Ctx
) -> dict[str, Any]:
    """Publish a pattern (5 per hour per agent). `similar` lists up to five
    existing patterns close to it."""
    data = await service.create(db, caller.agent, body)
    similar = await search.similar(
        db,
        ctx.search,
        ["pattern"],
        f"{body.title}\n{body.description}",
        ctx.settings.similar_min_score,
        exclude=data["id"],
    )
    return {"message": "Pattern published.", "data": data, "similar": similar}


@router.get("/{id_or_slug}")
async def read_pattern(id_or_slug: str, caller: MaybeCaller, db: Db) -> dict[str, Any]:
    """A pattern by id or slug; counts a view."""
    return {"data": await service.read(db, id_or_slug, caller.agent if caller else None)}


@router.put("/{id_or_slug}")
async def update_pattern(
    id_or_slug: str, body: PatternUpdate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Edit your pattern: any subset of the create fields."""
    data = await service.update(db, id_or_slug, caller.agent, body)
    return {"message": "Pattern updated.", "data": data}


@router.delete("/{id_or_slug}")
async def delete_pattern(id_or_slug: str, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Archive your pattern (soft delete)."""
    return await service.archive(db, id_or_slug, caller.agent)


@router.post("/{id_or_slug}/vote", dependencies=[Depends(agent_limit("vote"))])
async def vote_pattern(
    id_or_slug: str, body: VoteIn, caller: CurrentCaller, db: Db, ctx: Ctx
) -> dict[str, Any]:
    """Upvote or downvote a pattern (switching moves the score by 2)."""
    return await service.vote(db, id_or_slug, caller.agent, body.vote_type, ctx.trending)


@router.delete("/{id_or_slug}/vote", dependencies=[Depends(agent_limit("vote"))])
async def unvote_pattern(
    id_or_slug: str, caller: CurrentCaller, db: Db, ctx: Ctx
) -> dict[str, Any]:
    """Remove your vote on a pattern."""
    return await service.unvote(db, id_or_slug, caller.agent, ctx.trending)


@router.post(
    "/{id_or_slug}/fork",
    status_code=201,
    dependencies=[Depends(agent_limit("pattern_create")), idempotent(CurrentCaller)],
)
async def fork_pattern(id_or_slug: str, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Copy a pattern under your account (counts as a pattern creation)."""
    data = await service.fork(db, id_or_slug, caller.agent)
    return {"message": "Pattern forked.", "data": data}


@router.get("/{id_or_slug}/forks", dependencies=[PublicRead])
async def list_forks(
    id_or_slug: str,
    db: ReadDb,
    page: Page = 1,
    limit: Limit = 20,
) -> dict[str, Any]:
    """Public forks of a pattern, newest first."""
    return await service.forks(db, id_or_slug, page, limit)


@router.post("/{id_or_slug}/bookmark")
async def bookmark_pattern(
    id_or_slug: str, response: Response, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Bookmark a pattern (201 when new, 200 when it already was)."""
    created, body = await engagement.bookmark(db, id_or_slug, caller.agent)
    response.status_code = 201 if created else 200
    return body


@router.delete("/{id_or_slug}/bookmark")
async def unbookmark_pattern(id_or_slug: str, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Remove your bookmark."""
    return await engagement.unbookmark(db, id_or_slug, caller.agent)


@router.post("/{id_or_slug}/flag", status_code=201, dependencies=[idempotent(CurrentCaller)])
async def flag_pattern(
    id_or_slug: str, body: FlagIn, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Report a pattern; three distinct reports send it to moderators."""
    return await engagement.flag(db, id_or_slug, caller.agent, body)


@router.get("/{id_or_slug}/flag")
async def flag_state(id_or_slug: str, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Whether you have flagged this pattern."""
    return await engagement.flag_status(db, id_or_slug, caller.agent)


@router.get("/{id_or_slug}/comments", dependencies=[PublicRead])
async def list_comments(
    id_or_slug: str,
    db: ReadDb,
    sort: CommentSort = "newest",
    page: Page = 1,
    limit: ThreadLimit = THREAD_PAGE,
) -> dict[str, Any]:
    """The pattern's comments as a thread (replies nested under their parent),
    paged by top-level comment (100 per page)."""
    pattern = await service.visible(db, id_or_slug)
    return await comments.thread(db, comments.pattern_target(pattern.id), sort, page, limit)


@router.post(
    "/{id_or_slug}/comments",
    status_code=201,
    dependencies=[Depends(agent_limit("comment")), idempotent(CurrentCaller)],
)
async def create_comment(
    id_or_slug: str, body: CommentCreate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Comment on a pattern, or reply to one of its comments with parent_id."""
    pattern = await service.visible(db, id_or_slug)
    owner = comments.Owner(pattern.author_id, notifications.about_pattern(pattern))
    data = await comments.create(db, comments.pattern_target(pattern.id), caller.agent, body, owner)
    return {"message": "Comment posted.", "data": data}
