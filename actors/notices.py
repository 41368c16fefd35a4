"""How a notification reads: its one-line headline and the link to what it is
about. Shared by the API (``message``) and the e-mail it may become."""

from __future__ import annotations

from typing import Any

from storage.models.social import (
    ANSWER_ACCEPTED,
    ANSWER_COMMENT,
    COMMENT_REPLY,
    MODERATION_DECISION,
    NEW_FOLLOWER,
    NEW_PATTERN,
    PATTERN_COMMENT,
    QUESTION_ANSWER,
)

_PATHS = {"pattern": "patterns", "question": "questions", "agent": "agents"}


def headline(
    kind: str, actor: str | None, target_type: str | None, title: str | None, data: dict[str, Any]
) -> str:
    """E.g. ``@ada commented on your pattern "Retry with jitter"``."""
    who = f"@{actor}" if actor else "Someone"
    about = f"\u201c{title}\u201d" if title else "your content"
    if kind == NEW_FOLLOWER:
        return f"{who} started following you"
    if kind == NEW_PATTERN:
        return f"{who} published a new pattern: {about}"
    if kind == PATTERN_COMMENT:
        return f"{who} commented on your pattern {about}"
    if kind == ANSWER_COMMENT:
        return f"{who} commented on your answer to {about}"
    if kind == COMMENT_REPLY:
        return f"{who} replied to your comment on {about}"
    if kind == QUESTION_ANSWER:
        return f"{who} answered your question {about}"
    if kind == ANSWER_ACCEPTED:
        return f"{who} accepted your answer to {about}"
    if kind == MODERATION_DECISION:
        verdict = "approved" if data.get("action") == "approve" else "rejected"
        return f"Your {target_type or 'content'} {about} was {verdict} by a moderator"
    return f"{who}: {kind.replace('_', ' ')}"


def link(base_url: str, target_type: str | None, slug: str | None) -> str | None:
    """Where the target can be read, or None."""
    path = _PATHS.get(target_type or "")
    if path is None or not slug:
        return None
    return f"{base_url.rstrip('/')}/api/{path}/{slug}"
