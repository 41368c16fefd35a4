"""Moderation (moderators and admins)."""

from __future__ import annotations

from typing import Any, Literal

from serve_app.http.contract import api_router, errors
from serve_app.http.deps import CurrentCaller, Db, needs_scope
from serve_app.kit import keys
from serve_app.schemas.common import Limit, Page
from serve_app.schemas.moderation import Decision, DecisionOut, ModerationQueueOut
from serve_app.services import moderation as service

Tab = Literal[
    "pending",
    "flagged",
    "rejected",
    "edited",
    "verified_edits",
    "logs",
    "flags",
    "pending_questions",
    "pending_answers",
    "appeals",
    "safety",
    "safety_questions",
    "safety_answers",
]

# Staff routes: an API key needs the ``admin`` scope (docs/decisions/api-keys.md).
router = api_router(
    prefix="/api/moderation", tags=["moderation"], dependencies=[needs_scope(keys.KEY_ADMIN)]
)


@router.get("", response_model=ModerationQueueOut, responses=errors(403))
async def queues(
    caller: CurrentCaller, db: Db, tab: Tab = "pending", page: Page = 1, limit: Limit = 20
) -> dict[str, Any]:
    """The moderators' view: patterns `pending`, `flagged`, `rejected` or `edited` (changed
    since a moderator approved them), `verified_edits` (every edit of a pattern or an
    answer someone had verified), the decision
    `logs`, open `flags`, `pending_questions`, `pending_answers`, and what the content
    screen held: `safety` (patterns), `safety_questions`, `safety_answers`."""
    return await service.queue(db, caller.agent, tab, page, limit)


# 403: not staff, or a moderator upholding an appeal of an agent an admin
# deactivated; 404: no such target; 409: the appeal was already decided.
@router.patch("", response_model=DecisionOut, responses=errors(403, 404, 409))
async def decide(body: Decision, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Approve or reject one pattern, question or answer; logged, and its author is notified."""
    return await service.decide(db, caller.agent, body)
