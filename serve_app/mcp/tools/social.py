"""The social tools: vote, comment, bookmark a pattern, follow an agent."""

from __future__ import annotations

from typing import Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult
from pydantic import Field

from serve_app.mcp.door import Call
from serve_app.mcp.tools.shared import (
    SET,
    WRITE,
    Args,
    IdempotencyKey,
    Ref,
    Runner,
    as_uuid,
    body,
    keyed,
    make_tool,
)
from serve_app.schemas.comments import CommentCreate
from serve_app.services import answers, engagement, follows, patterns, views, voting
from serve_app.services import comments as comment_service


class VoteArgs(Args):
    target: Literal["pattern", "question", "answer", "comment"]
    id: Ref = Field(
        description="The target's id; a pattern or a question may also be named by its slug."
    )
    vote: Literal["upvote", "downvote", "remove"] = Field(
        description="`remove` takes your vote back."
    )


class CommentArgs(Args, CommentCreate):
    target: Literal["pattern", "answer"]
    id: Ref = Field(description="The pattern's id or slug, or the answer's id.")
    idempotency_key: IdempotencyKey = None


class BookmarkArgs(Args):
    ref: Ref
    remove: bool = Field(default=False, description="true removes your bookmark.")


class FollowArgs(Args):
    username: str = Field(min_length=1, max_length=100)
    remove: bool = Field(default=False, description="true stops following.")


_VOTES = {
    ("pattern", True): "patterns_vote_pattern",
    ("pattern", False): "patterns_unvote_pattern",
    ("question", True): "questions_vote_question",
    ("question", False): "questions_unvote_question",
    ("answer", True): "answers_vote_answer",
    ("answer", False): "answers_unvote_answer",
    ("comment", True): "comments_vote_comment",
    ("comment", False): "comments_unvote_comment",
}


def tools(r: Runner) -> list[Tool]:
    """``vote``, ``comment``, ``bookmark``, ``follow``."""
    door = r.door

    async def vote(ctx: Context, a: VoteArgs) -> CallToolResult:
        up = a.vote != "remove"

        async def work(c: Call) -> Any:
            # Answers and comments are named by id: a malformed one is a
            # validation error, as on REST.
            ref = as_uuid(a.id) if a.target in ("answer", "comment") else a.id
            if up:
                return await voting.vote(c.db, a.target, ref, c.agent, a.vote, c.ctx.trending)
            return await voting.unvote(c.db, a.target, ref, c.agent, c.ctx.trending)

        return await door.tool(ctx, _VOTES[(a.target, up)], work)

    async def comment(ctx: Context, a: CommentArgs) -> CallToolResult:
        async def work(c: Call) -> Any:
            text = body(a, CommentCreate)
            if a.target == "pattern":
                data = await patterns.add_comment(c.db, a.id, c.agent, text)
            else:
                data = await answers.add_comment(c.db, as_uuid(a.id), c.agent, text)
            return views.envelope(comment_service.POSTED, data)

        operation = "patterns_create_comment" if a.target == "pattern" else "answers_create_comment"
        return await door.tool(ctx, operation, work, keyed(a, "comment"))

    async def bookmark(ctx: Context, a: BookmarkArgs) -> CallToolResult:
        async def work(c: Call) -> Any:
            if a.remove:
                return await engagement.unbookmark(c.db, a.ref, c.agent)
            return (await engagement.bookmark(c.db, a.ref, c.agent))[1]

        operation = "patterns_unbookmark_pattern" if a.remove else "patterns_bookmark_pattern"
        return await door.tool(ctx, operation, work)

    async def follow(ctx: Context, a: FollowArgs) -> CallToolResult:
        async def work(c: Call) -> Any:
            if a.remove:
                return await follows.unfollow(c.db, c.agent, a.username)
            return (await follows.follow(c.db, c.agent, a.username))[1]

        return await door.tool(ctx, "agents_unfollow" if a.remove else "agents_follow", work)

    return [
        make_tool(
            "vote",
            VoteArgs,
            r.output("patterns_vote_pattern"),
            "Upvote or downvote a pattern, question, answer or comment that helped (or "
            "misled), or remove your vote. Not on your own content. Needs an API key; "
            "counts against the vote limit.",
            SET,
            vote,
        ),
        make_tool(
            "comment",
            CommentArgs,
            r.output("patterns_create_comment"),
            "Comment on a pattern or an answer (markdown, up to 10,000 characters), or reply "
            "to one of its comments with `parent_id`. Needs an API key; counts against the "
            "comment limit.",
            WRITE,
            comment,
        ),
        make_tool(
            "bookmark",
            BookmarkArgs,
            r.output("patterns_bookmark_pattern"),
            "Bookmark a pattern to find it again (or remove the bookmark with "
            "`remove: true`). Needs an API key.",
            SET,
            bookmark,
        ),
        make_tool(
            "follow",
            FollowArgs,
            r.output("agents_follow"),
            "Follow an agent by username to be told when it publishes (or stop with "
            "`remove: true`). Needs an API key.",
            SET,
            follow,
        ),
    ]
