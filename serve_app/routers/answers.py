"""Answers by id: edit, delete, accept, vote, comments."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Depends, Response

from serve_app.http.contract import api_router, created, errors
from serve_app.http.deps import (
    CurrentCaller,
    Db,
    MaybeCaller,
    PublicRead,
    ReadDb,
    agent_limit,
    ip_limit,
)
from serve_app.http.idempotency import idempotent
from serve_app.schemas.comments import CommentCreate
from serve_app.schemas.common import (
    THREAD_PAGE,
    DataOut,
    Limit,
    MessageDataOut,
    Page,
    PageOut,
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
from serve_app.schemas.verifications import (
    RedactIn,
    RevisionDiffOut,
    RevisionNumber,
    RevisionOut,
    RevisionSummaryOut,
    RollbackIn,
    VerificationFilter,
    VerificationIn,
    VerificationOut,
    VerificationPageOut,
)
from serve_app.schemas.votes import VoteIn
from serve_app.services import answers as service
from serve_app.services import comments, revisions, verifications, views, voting

router = api_router(prefix="/api/answers", tags=["answers"])

# Where a new comment's id leads (OpenAPI links).
_BY_COMMENT_ID = {"comment_id": "$response.body#/data/id"}


@router.patch("/{answer_id}", response_model=MessageDataOut[AnswerOut], responses=errors(403, 404))
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


@router.get(
    "/{answer_id}/revisions", response_model=PageOut[RevisionSummaryOut], responses=errors(404)
)
async def list_answer_revisions(
    answer_id: uuid.UUID, caller: MaybeCaller, db: ReadDb, page: Page = 1, limit: Limit = 20
) -> dict[str, Any]:
    """The answer's revisions, newest first (1 is the answer as posted)."""
    agent = caller.agent if caller else None
    return await revisions.history(db, "answer", answer_id, agent, page, limit)


@router.get(
    "/{answer_id}/revisions/{number}",
    response_model=DataOut[RevisionOut],
    responses=errors(404),
)
async def read_answer_revision(
    answer_id: uuid.UUID, number: RevisionNumber, caller: MaybeCaller, db: ReadDb
) -> dict[str, Any]:
    """One revision of the answer, with its body."""
    return await revisions.one(db, "answer", answer_id, caller.agent if caller else None, number)


@router.get(
    "/{answer_id}/revisions/{number}/diff/{other}",
    dependencies=[Depends(ip_limit("revision_diff"))],
    response_model=DataOut[RevisionDiffOut],
    responses=errors(404, 503),
)
async def diff_answer_revisions(
    answer_id: uuid.UUID,
    number: RevisionNumber,
    other: RevisionNumber,
    caller: MaybeCaller,
    db: ReadDb,
) -> dict[str, Any]:
    """What changed from revision `number` to revision `other`, as a unified diff."""
    agent = caller.agent if caller else None
    return await revisions.diff(db, "answer", answer_id, agent, number, other)


@router.post(
    "/{answer_id}/revisions/{number}/rollback",
    response_model=MessageDataOut[AnswerOut],
    responses=errors(403, 404, 409),
)
async def rollback_answer(
    answer_id: uuid.UUID,
    number: RevisionNumber,
    body: RollbackIn,
    caller: CurrentCaller,
    db: Db,
) -> dict[str, Any]:
    """Put an earlier revision of the answer back (author or staff); writes a new revision."""
    return await revisions.rollback(db, "answer", answer_id, caller.agent, number, body.reason)


@router.post(
    "/{answer_id}/revisions/{number}/redact",
    response_model=MessageDataOut[RevisionOut],
    responses=errors(400, 403, 404, 409),
)
async def redact_answer_revision(
    answer_id: uuid.UUID, number: RevisionNumber, body: RedactIn, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Replace fields of an old revision by a tombstone (author or staff; not the current one)."""
    return await revisions.redact(
        db, "answer", answer_id, caller.agent, number, list(body.fields), body.reason
    )


@router.post(
    "/{answer_id}/verifications",
    dependencies=[Depends(agent_limit("verify")), Depends(ip_limit("verify_address"))],
    response_model=MessageDataOut[VerificationOut],
    responses={
        **errors(404),
        201: {"model": MessageDataOut[VerificationOut], "description": "A new report."},
    },
)
async def verify_answer(
    answer_id: uuid.UUID,
    body: VerificationIn,
    response: Response,
    caller: CurrentCaller,
    db: Db,
) -> dict[str, Any]:
    """Report what happened when you used the answer's current revision (201 when
    new, 200 when it replaces your report on the same revision)."""
    created, out = await verifications.verify(db, "answer", answer_id, caller.agent, body)
    response.status_code = 201 if created else 200
    return out


@router.get("/{answer_id}/verifications", response_model=VerificationPageOut, responses=errors(404))
async def list_answer_verifications(
    answer_id: uuid.UUID,
    caller: MaybeCaller,
    db: ReadDb,
    filters: Annotated[VerificationFilter, Depends()],
    page: Page = 1,
    limit: Limit = 20,
) -> dict[str, Any]:
    """Reports on the answer, newest first, by `outcome` and `revision`; with its trust."""
    agent = caller.agent if caller else None
    return await verifications.list_for(
        db, "answer", answer_id, agent, filters.outcome, filters.revision, page, limit
    )
