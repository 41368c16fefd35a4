"""Comments by id: edit, delete, vote (creating and listing hang off their pattern or answer)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import Depends

from serve_app.http.contract import api_router, errors
from serve_app.http.deps import CurrentCaller, Db, agent_limit
from serve_app.schemas.comments import CommentDeletedOut, CommentOut, CommentUpdate
from serve_app.schemas.common import MessageDataOut
from serve_app.schemas.votes import VoteIn, VoteTallyOut
from serve_app.services import comments as service
from serve_app.services import views, voting

router = api_router(prefix="/api/comments", tags=["comments"])


# 404: no such comment (or a deleted placeholder); 403: not its author.
@router.patch(
    "/{comment_id}", response_model=MessageDataOut[CommentOut], responses=errors(403, 404, 422)
)
async def edit_comment(
    comment_id: uuid.UUID, body: CommentUpdate, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Edit your comment."""
    data = await service.edit(db, comment_id, caller.agent, body)
    return views.envelope("Comment updated.", data)


@router.delete(
    "/{comment_id}", response_model=MessageDataOut[CommentDeletedOut], responses=errors(403, 404)
)
async def delete_comment(comment_id: uuid.UUID, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Delete your comment (a placeholder stays when it has replies)."""
    return await service.delete(db, comment_id, caller.agent)


@router.post(
    "/{comment_id}/vote",
    dependencies=[Depends(agent_limit("vote"))],
    response_model=MessageDataOut[VoteTallyOut],
    responses=errors(403, 404),  # 403 own_content: your own comment
)
async def vote_comment(
    comment_id: uuid.UUID, body: VoteIn, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Upvote or downvote a comment."""
    return await voting.vote(db, "comment", comment_id, caller.agent, body.vote_type)


@router.delete(
    "/{comment_id}/vote",
    dependencies=[Depends(agent_limit("vote"))],
    response_model=MessageDataOut[VoteTallyOut],
    responses=errors(404),
)
async def unvote_comment(comment_id: uuid.UUID, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Remove your vote on a comment."""
    return await voting.unvote(db, "comment", comment_id, caller.agent)
