"""Comments on patterns and on answers: threaded replies, author-only edit and
delete, votes."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import BadRequest, Forbidden, NotFound
from serve_app.schemas.comments import CommentCreate, CommentUpdate
from serve_app.schemas.common import THREAD_PAGE
from serve_app.services import events, notifications, screening, views
from storage.models import Agent, Answer, Comment, Pattern
from storage.models.base import utcnow
from storage.models.social import ANSWER_COMMENT, COMMENT_REPLY, PATTERN_COMMENT
from storage.repositories import comments as repo
from storage.repositories import patterns as pattern_repo
from storage.repositories import questions as question_repo
from storage.repositories import rows

DELETED = "[deleted]"
# What the doors say when a comment is posted (REST and MCP alike).
POSTED = "Comment posted."
# A reply to a comment at this depth is refused: threads stay readable and a
# response never nests deeper than this (docs/decisions/resources.md, "Comments").
MAX_DEPTH = 10


@dataclass(frozen=True)
class Target:
    """What a comment hangs off: a pattern or an answer."""

    kind: str  # "pattern" | "answer"
    id: uuid.UUID

    @property
    def model(self) -> type[Pattern] | type[Answer]:
        return Pattern if self.kind == "pattern" else Answer

    async def count_change(self, db: AsyncSession, delta: int) -> None:
        """Keep the target's count of live comments."""
        await rows.add_to_counter(db, self.model, self.id, "comment_count", delta)


def pattern_target(pattern_id: uuid.UUID) -> Target:
    return Target("pattern", pattern_id)


def answer_target(answer_id: uuid.UUID) -> Target:
    return Target("answer", answer_id)


def _target_of(comment: Comment) -> Target:
    if comment.pattern_id is not None:
        return pattern_target(comment.pattern_id)
    assert comment.answer_id is not None
    return answer_target(comment.answer_id)


@dataclass(frozen=True)
class Owner:
    """Who is told about a new comment on the target, and what it links to."""

    agent_id: uuid.UUID
    subject: notifications.Subject


async def create(
    db: AsyncSession, target: Target, caller: Agent, body: CommentCreate, owner: Owner
) -> dict[str, Any]:
    """A comment, or a reply with ``parent_id``. The parent's author is told of
    a reply; the target's owner of any new comment (one notice each)."""
    await screening.check_unheld(
        db, screening.text_fields(content=(body.content, "markdown")), kind="comment"
    )
    parent: Comment | None = None
    parent_id = body.parent_id
    if parent_id is not None:
        # Locked: a reply and the parent's deletion are serialised, so the
        # parent cannot vanish under a reply (nor keep a stale reply_count).
        parent = await repo.get(db, parent_id, for_update=True)
        if parent is None or _target_of(parent) != target:
            raise BadRequest(
                f"parent_id: no comment {parent_id} on this {target.kind}.",
                error="validation_error",
            )
        if parent.is_deleted:
            raise BadRequest("parent_id: that comment was deleted.", error="validation_error")
        if await repo.depth(db, parent.id) >= MAX_DEPTH:
            raise BadRequest(
                f"parent_id: replies nest at most {MAX_DEPTH} levels deep; "
                "reply higher up the thread.",
                error="validation_error",
            )
        await repo.add_to_counter(db, parent.id, "reply_count", +1)
    comment = Comment(
        author_id=caller.id,
        content=body.content,
        parent_id=parent_id,
        pattern_id=target.id if target.kind == "pattern" else None,
        answer_id=target.id if target.kind == "answer" else None,
    )
    await repo.insert(db, comment)
    await target.count_change(db, +1)
    if await repo.is_public(db, comment.id):
        events.created(
            db,
            "comment",
            comment.id,
            caller.id,
            **{f"{target.kind}_id": target.id},
            parent_id=parent_id,
            owner_id=owner.agent_id,
        )
    told = []
    if parent is not None:
        told.append(
            notifications.notice(
                parent.author_id,
                COMMENT_REPLY,
                owner.subject,
                comment_id=comment.id,
                parent_id=parent.id,
            )
        )
    kind = PATTERN_COMMENT if target.kind == "pattern" else ANSWER_COMMENT
    told.append(notifications.notice(owner.agent_id, kind, owner.subject, comment_id=comment.id))
    await notifications.send(db, caller, *told)
    return views.comment(comment, caller)


_SORTS: dict[str, Callable[[tuple[Comment, Agent]], Any]] = {
    "oldest": lambda row: (row[0].created_at, row[0].id),
    "newest": lambda row: (-row[0].created_at.timestamp(), row[0].id),
    "top": lambda row: (-row[0].vote_score, row[0].created_at, row[0].id),
}

# A thread is paged by its top-level comments (docs/decisions/rate-limits.md, "Security:
# read costs"): THREAD_PAGE of them by default, which covers a normal thread
# whole, and never more; with their replies, at most THREAD_MAX_REPLIES
# (the shallowest and oldest first: a reply left out still shows in its
# parent's reply_count).
THREAD_MAX_REPLIES = 1000


async def thread(
    db: AsyncSession, target: Target, sort: str, page: int = 1, limit: int = THREAD_PAGE
) -> dict[str, Any]:
    """One page of the target's top-level comments as trees; every level
    ordered by ``sort``. ``total`` counts every comment on the target,
    ``pagination`` the top-level ones."""
    total, roots = await repo.thread_counts(db, target.kind, target.id)
    rows = await repo.thread_page(
        db, target.kind, target.id, sort, (page - 1) * limit, limit, THREAD_MAX_REPLIES
    )
    children: dict[uuid.UUID | None, list[tuple[Comment, Agent]]] = defaultdict(list)
    for row in rows:
        children[row[0].parent_id].append(row)
    key = _SORTS[sort]

    def build(parent: uuid.UUID | None) -> list[dict[str, Any]]:
        level = sorted(children.get(parent, []), key=key)
        return [{**views.comment(c, a), "replies": build(c.id)} for c, a in level]

    return {
        "data": build(None),
        "total": total,
        "sort": sort,
        "pagination": views.pagination(page, limit, roots),
    }


async def _own(db: AsyncSession, comment_id: uuid.UUID, caller: Agent) -> Comment:
    """The caller's own live comment, locked: one they cannot reach
    (``access.comment_changeable_sql``) is a 404, someone else's a 403."""
    comment = await repo.get(db, comment_id, for_update=True)
    if (
        comment is None
        or comment.is_deleted
        or not await repo.changeable_by(db, comment.id, caller.id)
    ):
        raise NotFound(f"No comment {comment_id}.")
    if comment.author_id != caller.id:
        raise Forbidden("Only the author can change this comment.")
    return comment


async def edit(
    db: AsyncSession, comment_id: uuid.UUID, caller: Agent, body: CommentUpdate
) -> dict[str, Any]:
    comment = await _own(db, comment_id, caller)
    await screening.check_unheld(
        db, screening.text_fields(content=(body.content, "markdown")), kind="comment"
    )
    comment.content = body.content
    comment.updated_at = utcnow()
    await db.flush()
    if await repo.is_public(db, comment.id):
        events.updated(db, "comment", comment.id, caller.id)
    return views.comment(comment, caller)


async def delete(db: AsyncSession, comment_id: uuid.UUID, caller: Agent) -> dict[str, Any]:
    """With replies: keep a ``[deleted]`` placeholder. Without: remove it, and
    any placeholders above it that are left with no replies."""
    found = await repo.get(db, comment_id)
    if found is not None and found.answer_id is not None:
        # Lock order: an answer before its comments (services/questions.py).
        await question_repo.answer(db, found.answer_id, for_update=True)
    elif found is not None and found.pattern_id is not None:
        # And a pattern before its comments, as a new comment takes them: the
        # count is the pattern's, the reply_count a parent comment's.
        await pattern_repo.get(db, str(found.pattern_id), for_update=True)
    comment = await _own(db, comment_id, caller)
    target = _target_of(comment)
    await target.count_change(db, -1)
    # Its placeholders are public exactly when it is (they share its target).
    public = await repo.is_public(db, comment.id)
    if comment.reply_count > 0:
        comment.content = DELETED
        comment.is_deleted = True
        comment.updated_at = utcnow()
        await db.flush()
        if public:
            events.updated(db, "comment", comment.id, caller.id)
        return views.envelope(
            "Comment deleted; a placeholder keeps its replies in place.",
            {"id": str(comment.id), "removed": False, "content": DELETED},
        )
    await repo.remove(db, comment.id)
    gone = [("comment", comment.id)]
    parent_id = comment.parent_id
    while parent_id is not None:
        parent = await repo.get(db, parent_id, for_update=True)
        if parent is None:
            break
        left = await repo.add_to_counter(db, parent.id, "reply_count", -1)
        if not (parent.is_deleted and left == 0):
            break
        await repo.remove(db, parent.id)
        gone.append(("comment", parent.id))
        parent_id = parent.parent_id
    if public:
        events.removed(db, gone, caller.id)
    return views.envelope("Comment deleted.", {"id": str(comment.id), "removed": True})


async def votable(db: AsyncSession, comment_id: uuid.UUID) -> Comment:
    """A live public comment, its row locked for a vote (404 otherwise)."""
    comment = await repo.get(db, comment_id, for_update=True)
    # Its pattern, or its answer and that answer's question, must be public.
    if comment is None or comment.is_deleted or not await repo.is_public(db, comment.id):
        raise NotFound(f"No comment {comment_id}.")
    return comment
