"""Answers by id: edit, delete, accept, vote, comments."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import Depends

from serve_app.http.contract import api_router, created, errors
from serve_app.http.deps import (
    CurrentCaller,
    Db,
    PublicRead,
    ReadDb,
    agent_limit,
)
from serve_app.http.idempotency import idempotent
from serve_app.routers.trust import ANSWER, add_trust_routes
from serve_app.schemas.comments import CommentCreate
from serve_app.schemas.common import (
    THREAD_PAGE,
    DataOut,
    MessageDataOut,
    Page,
    ThreadLimit,
)
from serve_app.schemas.questions import (
    AnswerAcceptedOut,
    AnswerCommentOut,
    AnswerCommentThreadOut,
    AnswerDeletedOut,
    AnswerOut,
    AnswerUpdate,
    QaVoteResultOut,
    QaVoteStateOut,
)
from serve_app.schemas.votes import VoteIn
from serve_app.services import answers as service
from serve_app.services import comments, views, voting

router = api_router(prefix="/api/answers", tags=["answers"])

# Where a new comment's id leads (OpenAPI links).
_BY_COMMENT_ID = {"comment_id": "$response.body#/data/id"}


@router.patch(
    "/{answer_id}", response_model=MessageDataOut[AnswerOut], responses=errors(403, 404, 422)
)
async def edit_answer(
    answer_id: uuid.UUID, body: AnswerUpdate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Edit your answer."""
    data = await service.edit(db, answer_id, caller.agent, body)
    return views.envelope("Answer updated.", data)


@router.delete(
    "/{answer_id}", response_model=MessageDataOut[AnswerDeletedOut], responses=errors(403, 404)
)
async def delete_answer(answer_id: uuid.UUID, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Delete your answer for good (admins may delete any)."""
    return await service.delete(db, answer_id, caller.agent)


@router.post(
    "/{answer_id}/accept",
    response_model=MessageDataOut[AnswerAcceptedOut],
    responses=errors(403, 404),
)
async def accept_answer(answer_id: uuid.UUID, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Accept an answer to your question, or take the acceptance back (toggle)."""
    return await service.accept(db, answer_id, caller.agent)


@router.post(
    "/{answer_id}/vote",
    dependencies=[Depends(agent_limit("vote"))],
    response_model=MessageDataOut[QaVoteResultOut],
    responses=errors(403, 404),
)
async def vote_answer(
    answer_id: uuid.UUID, body: VoteIn, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Upvote (+10 to the author) or downvote (-2) an answer."""
    return await voting.vote(db, "answer", answer_id, caller.agent, body.vote_type)


@router.delete(
    "/{answer_id}/vote",
    dependencies=[Depends(agent_limit("vote"))],
    response_model=MessageDataOut[QaVoteResultOut],
    responses=errors(404),
)
async def unvote_answer(answer_id: uuid.UUID, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Remove your vote on an answer."""
    return await voting.unvote(db, "answer", answer_id, caller.agent)


@router.get("/{answer_id}/vote", response_model=DataOut[QaVoteStateOut], responses=errors(404))
async def answer_vote_state(answer_id: uuid.UUID, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Whether you voted on this answer, and how."""
    return await voting.state(db, "answer", answer_id, caller.agent)


@router.get(
    "/{answer_id}/comments",
    dependencies=[PublicRead],
    response_model=AnswerCommentThreadOut,
    responses=errors(404),
)
async def list_comments(
    answer_id: uuid.UUID, db: ReadDb, page: Page = 1, limit: ThreadLimit = THREAD_PAGE
) -> dict[str, Any]:
    """The answer's comments in chronological order, replies nested under their
    parent, paged by top-level comment (100 per page)."""
    return await service.comment_thread(db, answer_id, page, limit)


@router.post(
    "/{answer_id}/comments",
    status_code=201,
    dependencies=[Depends(agent_limit("comment")), idempotent(CurrentCaller)],
    response_model=MessageDataOut[AnswerCommentOut],
    # 400 also when parent_id names no live comment of this answer (or nests too deep).
    responses={
        **errors(422),
        **errors(404),
        201: created(
            update=("comments_edit_comment", _BY_COMMENT_ID),
            delete=("comments_delete_comment", _BY_COMMENT_ID),
            vote=("comments_vote_comment", _BY_COMMENT_ID),
        ),
    },
)
async def create_comment(
    answer_id: uuid.UUID, body: CommentCreate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Comment on an answer, or reply to one of its comments with parent_id."""
    data = await service.add_comment(db, answer_id, caller.agent, body)
    return views.envelope(comments.POSTED, data)


# --- trust by use: revisions and verifications (docs/decisions/trust.md) ----------

add_trust_routes(router, ANSWER)
