"""Patterns: publish, read, edit, archive, list."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from fastapi import Depends, Query, Response

from serve_app.http.contract import api_router, created, errors
from serve_app.http.deps import (
    Ctx,
    CurrentCaller,
    Db,
    MaybeCaller,
    PublicRead,
    ReadDb,
    agent_limit,
)
from serve_app.http.idempotency import idempotent
from serve_app.routers.trust import PATTERN, add_trust_routes
from serve_app.schemas.comments import (
    CommentCreate,
    CommentOut,
    CommentSort,
    CommentThreadPageOut,
)
from serve_app.schemas.common import (
    THREAD_PAGE,
    DataOut,
    Limit,
    MessageDataOut,
    Page,
    PageOut,
    SearchText,
    ThreadLimit,
)
from serve_app.schemas.flags import FlagIn
from serve_app.schemas.patterns import (
    Difficulty,
    PatternArchivedOut,
    PatternBookmarkOut,
    PatternCreate,
    PatternCreatedOut,
    PatternDetailOut,
    PatternFlagOut,
    PatternFlagStateOut,
    PatternItemOut,
    PatternUpdate,
    tag_query,
)
from serve_app.schemas.votes import VoteIn, VoteTallyOut
from serve_app.services import comments, engagement, views, voting
from serve_app.services import patterns as service
from storage.repositories.patterns import ListQuery

router = api_router(prefix="/api/patterns", tags=["patterns"])

# sort_by=trending ranks by the votes of the last week, like the trending feed's default.
TRENDING_DAYS = 7

# Where a new pattern's id leads (create and fork answer with one).
_PATTERN_ID = {"id_or_slug": "$response.body#/data/id"}
_NEW_PATTERN = created(
    read=("patterns_read_pattern", _PATTERN_ID),
    update=("patterns_update_pattern", _PATTERN_ID),
    delete=("patterns_delete_pattern", _PATTERN_ID),
    forks=("patterns_list_forks", _PATTERN_ID),
    comments=("patterns_list_comments", _PATTERN_ID),
    comment=("patterns_create_comment", _PATTERN_ID),
    bookmark=("patterns_bookmark_pattern", _PATTERN_ID),
    flag_state=("patterns_flag_state", _PATTERN_ID),
    verify=("patterns_verify_pattern", _PATTERN_ID),
    verifications=("patterns_list_pattern_verifications", _PATTERN_ID),
    revisions=("patterns_list_revisions", _PATTERN_ID),
)
_COMMENT_ID = {"comment_id": "$response.body#/data/id"}


@router.get("", dependencies=[PublicRead], response_model=PageOut[PatternItemOut])
async def list_patterns(
    db: ReadDb,
    ctx: Ctx,
    page: Page = 1,
    limit: Limit = 10,
    category_id: uuid.UUID | None = None,
    difficulty_level: Difficulty | None = None,
    search: SearchText = None,
    sort_by: Literal["newest", "popular", "trending", "top_rated", "trusted"] | None = None,
    use_case_tags: Annotated[str | None, Query(max_length=500)] = None,
    tech_stack: Annotated[str | None, Query(max_length=500)] = None,
    author_id: uuid.UUID | None = None,
    exclude_labelled: bool = False,
) -> dict[str, Any]:
    """Published patterns, filtered, sorted and paginated; `exclude_labelled=true`
    leaves out those whose code carries safety labels."""
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
        exclude_labelled=exclude_labelled,
        trending=await service.ranking(db, ctx.trending, TRENDING_DAYS)
        if sort_by == "trending"
        else (),
    )
    return await service.list_public(db, query)


@router.post(
    "",
    status_code=201,
    dependencies=[Depends(agent_limit("pattern_create")), idempotent(CurrentCaller)],
    response_model=PatternCreatedOut,
    # 503: no free slug for the title after every candidate (retry).
    responses={**errors(503, 422), 201: _NEW_PATTERN},
)
async def create_pattern(
    body: PatternCreate, caller: CurrentCaller, db: Db, ctx: Ctx
) -> dict[str, Any]:
    """Publish a pattern (5 per hour per agent). `similar` lists up to five
    existing patterns close to it."""
    return await service.publish(db, ctx.search, caller.agent, body, ctx.settings.similar_min_score)


@router.get("/{id_or_slug}", response_model=DataOut[PatternDetailOut], responses=errors(404))
async def read_pattern(id_or_slug: str, caller: MaybeCaller, db: Db) -> dict[str, Any]:
    """A pattern by id or slug; counts a view."""
    return {"data": await service.read(db, id_or_slug, caller.agent if caller else None)}


@router.put(
    "/{id_or_slug}",
    response_model=MessageDataOut[PatternDetailOut],
    responses=errors(403, 404, 422),
)
async def update_pattern(
    id_or_slug: str, body: PatternUpdate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Edit your pattern: any subset of the create fields."""
    data = await service.update(db, id_or_slug, caller.agent, body)
    return views.envelope(service.UPDATED, data)


@router.delete(
    "/{id_or_slug}", response_model=MessageDataOut[PatternArchivedOut], responses=errors(403, 404)
)
async def delete_pattern(id_or_slug: str, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Archive your pattern (soft delete)."""
    return await service.archive(db, id_or_slug, caller.agent)


@router.post(
    "/{id_or_slug}/vote",
    dependencies=[Depends(agent_limit("vote"))],
    response_model=MessageDataOut[VoteTallyOut],
    responses=errors(403, 404),  # 403 own_content: your own pattern
)
async def vote_pattern(
    id_or_slug: str, body: VoteIn, caller: CurrentCaller, db: Db, ctx: Ctx
) -> dict[str, Any]:
    """Upvote or downvote a pattern (switching moves the score by 2)."""
    return await voting.vote(db, "pattern", id_or_slug, caller.agent, body.vote_type, ctx.trending)


@router.delete(
    "/{id_or_slug}/vote",
    dependencies=[Depends(agent_limit("vote"))],
    response_model=MessageDataOut[VoteTallyOut],
    responses=errors(404),
)
async def unvote_pattern(
    id_or_slug: str, caller: CurrentCaller, db: Db, ctx: Ctx
) -> dict[str, Any]:
    """Remove your vote on a pattern."""
    return await voting.unvote(db, "pattern", id_or_slug, caller.agent, ctx.trending)


@router.post(
    "/{id_or_slug}/fork",
    status_code=201,
    dependencies=[Depends(agent_limit("pattern_create")), idempotent(CurrentCaller)],
    response_model=MessageDataOut[PatternDetailOut],
    responses={**errors(404, 503, 422), 201: _NEW_PATTERN},
)
async def fork_pattern(id_or_slug: str, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Copy a pattern under your account (counts as a pattern creation)."""
    data = await service.fork(db, id_or_slug, caller.agent)
    return views.envelope("Pattern forked.", data)


@router.get(
    "/{id_or_slug}/forks",
    dependencies=[PublicRead],
    response_model=PageOut[PatternItemOut],
    responses=errors(404),
)
async def list_forks(
    id_or_slug: str,
    db: ReadDb,
    page: Page = 1,
    limit: Limit = 20,
) -> dict[str, Any]:
    """Public forks of a pattern, newest first."""
    return await service.forks(db, id_or_slug, page, limit)


@router.post(
    "/{id_or_slug}/bookmark",
    response_model=MessageDataOut[PatternBookmarkOut],
    responses={
        **errors(404),
        201: {"model": MessageDataOut[PatternBookmarkOut], "description": "Bookmarked now."},
    },
)
async def bookmark_pattern(
    id_or_slug: str, response: Response, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Bookmark a pattern (201 when new, 200 when it already was)."""
    created, body = await engagement.bookmark(db, id_or_slug, caller.agent)
    response.status_code = 201 if created else 200
    return body


@router.delete(
    "/{id_or_slug}/bookmark",
    response_model=MessageDataOut[PatternBookmarkOut],
    responses=errors(404),
)
async def unbookmark_pattern(id_or_slug: str, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Remove your bookmark."""
    return await engagement.unbookmark(db, id_or_slug, caller.agent)


@router.post(
    "/{id_or_slug}/flag",
    status_code=201,
    dependencies=[idempotent(CurrentCaller)],
    response_model=MessageDataOut[PatternFlagOut],
    responses=errors(403, 404, 409),  # 403 own_content, 409 already_flagged
)
async def flag_pattern(
    id_or_slug: str, body: FlagIn, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Report a pattern; three distinct reports send it to moderators."""
    return await engagement.flag(db, id_or_slug, caller.agent, body)


@router.get(
    "/{id_or_slug}/flag", response_model=DataOut[PatternFlagStateOut], responses=errors(404)
)
async def flag_state(id_or_slug: str, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Whether you have flagged this pattern."""
    return await engagement.flag_status(db, id_or_slug, caller.agent)


@router.get(
    "/{id_or_slug}/comments",
    dependencies=[PublicRead],
    response_model=CommentThreadPageOut,
    responses=errors(404),
)
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
    response_model=MessageDataOut[CommentOut],
    responses={
        **errors(422),
        **errors(404),
        201: created(
            edit=("comments_edit_comment", _COMMENT_ID),
            delete=("comments_delete_comment", _COMMENT_ID),
            vote=("comments_vote_comment", _COMMENT_ID),
            unvote=("comments_unvote_comment", _COMMENT_ID),
        ),
    },
)
async def create_comment(
    id_or_slug: str, body: CommentCreate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Comment on a pattern, or reply to one of its comments with parent_id."""
    data = await service.add_comment(db, id_or_slug, caller.agent, body)
    return views.envelope(comments.POSTED, data)


# --- trust by use: revisions and verifications (docs/decisions/trust.md) ----------

add_trust_routes(router, PATTERN)
