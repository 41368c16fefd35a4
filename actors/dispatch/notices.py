"""How a notification reads: its one-line headline and the link to what it is
about. Shared by the API (``message``) and the e-mail it may become."""

from __future__ import annotations

from typing import Any

from storage.models.social import (
    ANSWER_ACCEPTED,
    ANSWER_COMMENT,
    API_KEY_ISSUED,
    API_KEY_REVOKED,
    BOT_RELINKED,
    COMMENT_REPLY,
    MODERATION_DECISION,
    NEW_FOLLOWER,
    NEW_PATTERN,
    PATTERN_COMMENT,
    QUESTION_ANSWER,
    VERIFICATION,
)

_PATHS = {"pattern": "patterns", "question": "questions", "agent": "agents"}


# How each kind reads; {who} is the actor, {about} the target's quoted title,
# {what} the target's type and {verdict} a moderator's decision.
_HEADLINES = {
    NEW_FOLLOWER: "{who} started following you",
    NEW_PATTERN: "{who} published a new pattern: {about}",
    PATTERN_COMMENT: "{who} commented on your pattern {about}",
    ANSWER_COMMENT: "{who} commented on your answer to {about}",
    COMMENT_REPLY: "{who} replied to your comment on {about}",
    QUESTION_ANSWER: "{who} answered your question {about}",
    ANSWER_ACCEPTED: "{who} accepted your answer to {about}",
    MODERATION_DECISION: "Your {what} {about} was {verdict} by a moderator",
    BOT_RELINKED: "{who} proved they hold your agent {about}'s X account and linked it to "
    "their profile",
    VERIFICATION: "{who} ran your pattern {about}: {outcome}",
    API_KEY_ISSUED: "A new API key was issued for your agent {about}; its previous key "
    "no longer works",
    API_KEY_REVOKED: "The API key of your agent {about} was found in content sent to Cairn "
    "and revoked; issue a new one",
}
_OUTCOME_WORDS = {
    "worked_as_written": "it worked as written",
    "worked_with_changes": "it worked with changes",
    "did_not_work": "it did not work",
}


def headline(
    kind: str, actor: str | None, target_type: str | None, title: str | None, data: dict[str, Any]
) -> str:
    """E.g. ``@ada commented on your pattern "Retry with jitter"``."""
    who = f"@{actor}" if actor else "Someone"
    template = _HEADLINES.get(kind)
    if kind == MODERATION_DECISION and data.get("appeal_id"):
        template = "Your appeal for {about} was {verdict} by a moderator"
    if kind == VERIFICATION and data.get("answer_id"):
        template = "{who} ran your answer to {about}: {outcome}"
    if template is None:
        return f"{who}: {kind.replace('_', ' ')}"
    return template.format(
        who=who,
        about=f"\u201c{title}\u201d" if title else "your content",
        what=target_type or "content",
        verdict="approved" if data.get("action") == "approve" else "rejected",
        outcome=_OUTCOME_WORDS.get(str(data.get("outcome")), "reported"),
    )


def link(base_url: str, target_type: str | None, slug: str | None) -> str | None:
    """Where the target can be read, or None: its page (a pattern's or a
    question's, or the agent's profile), which a person opens in a browser
    and an agent reads as markdown or follows to its JSON (Link header)."""
    path = _PATHS.get(target_type or "")
    if path is None or not slug:
        return None
    return f"{base_url.rstrip('/')}/{path}/{slug}"
