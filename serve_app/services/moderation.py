"""Moderation decisions: a moderator or admin approves or rejects a pattern,
question or answer. Every decision is logged, and the author is told
(``moderation_decision``, mailed when their switch is on)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import Conflict, Forbidden, NotFound
from serve_app.schemas.moderation import Decision
from serve_app.services import events, notifications, verifications, views
from storage import access
from storage.models import (
    Agent,
    Answer,
    Appeal,
    Flag,
    ModerationDecision,
    Pattern,
    Question,
    Revision,
)
from storage.models.base import utcnow
from storage.models.social import MODERATION_DECISION
from storage.repositories import claims as claim_repo
from storage.repositories import moderation as repo
from storage.repositories import patterns as pattern_repo
from storage.repositories import questions as question_repo
from storage.repositories import rows

STATUS_AFTER = {"approve": "approved", "reject": "rejected"}


def require_staff(caller: Agent) -> None:
    if not access.is_staff(caller):
        raise Forbidden("Moderators and admins only.", error="forbidden")


async def decide(db: AsyncSession, caller: Agent, body: Decision) -> dict[str, Any]:
    require_staff(caller)
    kind, target_id = body.target
    assert isinstance(target_id, uuid.UUID)
    if kind == "appeal":
        return await _appeal(db, caller, target_id, body)
    new = STATUS_AFTER[body.action]
    item: Pattern | Question | Answer
    parent_visible = True  # an answer's question
    if kind == "pattern":
        item, author_id, subject = await _pattern(db, target_id, new)
    elif kind == "question":
        item, author_id, subject = await _question(db, target_id)
    else:
        item, author_id, subject, parent_visible = await _answer(db, target_id, new)
    previous = item.moderation_status
    was_public = _is_public(item, parent_visible)
    item.moderation_status = new
    if not isinstance(item, Question):
        # What the moderator saw: a later edit shows as edited_since_review.
        item.reviewed_revision = item.revision
    item.updated_at = utcnow()
    await db.flush()
    decision = ModerationDecision(
        moderator_id=caller.id,
        target_type=kind,
        target_id=target_id,
        action=body.action,
        previous_status=previous,
        notes=body.notes,
    )
    db.add(decision)
    await db.flush()
    await events.crossed(db, kind, item.id, was_public, _is_public(item, parent_visible), caller.id)
    data: dict[str, Any] = {"action": body.action}
    if kind == "answer":
        data["answer_id"] = target_id
    if body.notes:
        data["notes"] = body.notes
    await notifications.send(
        db, caller, notifications.notice(author_id, MODERATION_DECISION, subject, **data)
    )
    return views.envelope(
        f"The {kind} was {new}.",
        {
            "type": kind,
            "id": str(target_id),
            "action": body.action,
            "moderation_status": new,
            "previous_status": previous,
            "decision_id": str(decision.id),
            "notes": body.notes,
        },
    )


async def _appeal(
    db: AsyncSession, caller: Agent, appeal_id: uuid.UUID, body: Decision
) -> dict[str, Any]:
    """Uphold (approve) or turn down (reject) an owner's appeal. Upheld: the agent
    is active again and linked to the appellant. Either way it is logged and
    the appellant is told."""
    appeal = await claim_repo.appeal(db, appeal_id, lock=True)
    if appeal is None:
        raise NotFound(f"No appeal {appeal_id}.")
    if appeal.status != "pending_review":
        raise Conflict(f"This appeal was already {appeal.status}.", error="appeal_resolved")
    bot = await claim_repo.bot(db, appeal.agent_id, lock=True)
    assert bot is not None  # an appeal goes with its agent (ON DELETE CASCADE)
    if body.action == "approve" and not bot.is_active and not access.is_admin(caller):
        # Only admins deactivate accounts; a moderator may not overturn that.
        raise Forbidden(
            "This agent was deactivated by an admin; only an admin can uphold this appeal "
            "(a moderator may reject it).",
            error="admin_required",
        )
    if body.action == "approve" and bot.owner_id not in (None, appeal.appellant_id):
        # The latest proof wins: the agent was re-linked to someone else since.
        raise Conflict(
            "This agent has been linked to another human since the appeal was made; "
            "upholding it would take the agent from them. Reject it: the appellant can "
            "re-link with a new proof and appeal again.",
            error="appeal_stale",
        )
    new = STATUS_AFTER[body.action]
    await claim_repo.resolve_appeal(db, appeal, new, caller.id, body.notes)
    if body.action == "approve":
        await claim_repo.restore_bot(db, bot.id, appeal.appellant_id)
        await db.refresh(bot)
        # Active again, in the appellant's group: its reports count anew.
        await verifications.verifier_changed(db, bot)
    decision = ModerationDecision(
        moderator_id=caller.id,
        target_type="appeal",
        target_id=appeal.id,
        action=body.action,
        previous_status="pending_review",
        notes=body.notes,
    )
    db.add(decision)
    await db.flush()
    if appeal.appellant_id is not None:
        data: dict[str, Any] = {"action": body.action, "appeal_id": appeal.id}
        if body.notes:
            data["notes"] = body.notes
        await notifications.send(
            db,
            caller,
            notifications.notice(
                appeal.appellant_id,
                MODERATION_DECISION,
                notifications.about_agent(bot),
                **data,
            ),
        )
    return views.envelope(
        f"The appeal was {new}.",
        {
            "type": "appeal",
            "id": str(appeal.id),
            "agent_id": str(bot.id),
            "action": body.action,
            "status": new,
            "previous_status": "pending_review",
            "decision_id": str(decision.id),
            "notes": body.notes,
        },
    )


async def _pattern(
    db: AsyncSession, pattern_id: uuid.UUID, new: str
) -> tuple[Pattern, uuid.UUID, notifications.Subject]:
    pattern = await rows.by_id(db, Pattern, pattern_id, for_update=True)
    if pattern is None:
        raise NotFound(f"No pattern {pattern_id}.")
    # Rejected or held for safety (access.HIDDEN_STATES): not public.
    hidden_before = pattern.moderation_status in access.HIDDEN_STATES
    if pattern.status == "published" and hidden_before != (new == "rejected"):
        # pattern_count and a fork's credit count public patterns only.
        await pattern_repo.publicity_changed(db, pattern, now_public=hidden_before)
    await repo.settle_flags(db, pattern.id, "resolved" if new == "rejected" else "dismissed")
    return pattern, pattern.author_id, notifications.about_pattern(pattern)


async def _question(
    db: AsyncSession, question_id: uuid.UUID
) -> tuple[Question, uuid.UUID, notifications.Subject]:
    question = await rows.by_id(db, Question, question_id, for_update=True)
    if question is None or question.status == "deleted":
        raise NotFound(f"No question {question_id}.")
    return question, question.author_id, notifications.about_question(question)


def _is_public(item: Pattern | Question | Answer, parent_visible: bool) -> bool:
    """Whether the public sees ``item`` (an answer: under a visible question)."""
    if isinstance(item, Pattern):
        return access.pattern_is_public(item)
    if isinstance(item, Question):
        return access.question_is_visible(item)
    return parent_visible and access.answer_is_shown(item)


async def _answer(
    db: AsyncSession, answer_id: uuid.UUID, new: str
) -> tuple[Answer, uuid.UUID, notifications.Subject, bool]:
    # Lock order: the question, then the answer.
    found = await question_repo.answer_and_question(db, answer_id, lock=Question)
    answer = await question_repo.answer(db, answer_id, for_update=True) if found else None
    if found is None or answer is None or found[1].status == "deleted":
        raise NotFound(f"No answer {answer_id}.")
    question = found[1]
    hidden_before = not access.answer_is_shown(answer)
    if hidden_before != (new == "rejected"):
        # answer_count counts the answers the question shows.
        await rows.add_to_loaded_counter(
            db, question, "answer_count", -1 if not hidden_before else +1
        )
    return (
        answer,
        answer.author_id,
        notifications.about_question(question),
        access.question_is_visible(question),
    )


# The queues -----------------------------------------------------------------------


def _pattern_row(pattern: Pattern, author: Agent) -> dict[str, Any]:
    return {
        **views.pattern_item(pattern, author, None),
        "status": pattern.status,
        "moderation_status": pattern.moderation_status,
        "flag_count": pattern.flag_count,
        "updated_at": views.iso(pattern.updated_at),
        **_review(pattern),
    }


def _review(item: Pattern | Answer) -> dict[str, Any]:
    """Whether the item's text changed since a moderator last decided on it
    (docs/decisions/trust.md, "Edits after review")."""
    reviewed = item.reviewed_revision
    return {
        "reviewed_revision": reviewed,
        "edited_since_review": reviewed is not None and item.revision > reviewed,
    }


def _question_row(question: Question, author: Agent) -> dict[str, Any]:
    return {
        **views.question(question, author, None),
        "moderation_status": question.moderation_status,
    }


def _answer_row(answer: Answer, author: Agent, question: Question) -> dict[str, Any]:
    return {
        **views.answer(answer, author),
        "moderation_status": answer.moderation_status,
        "question": views.question_brief(question),
        "edited_since_review": _review(answer)["edited_since_review"],
    }


def _verified_edit_row(
    revision: Revision,
    editor: Agent | None,
    pattern: Pattern | None,
    answer: Answer | None,
    question: Question | None,
    reports_before: int,
) -> dict[str, Any]:
    item: Pattern | Answer | None = pattern if pattern is not None else answer
    named: Pattern | Question | None = pattern if pattern is not None else question
    assert item is not None and named is not None  # a revision goes with its item
    return {
        "type": "pattern" if pattern is not None else "answer",
        "id": str(item.id),
        "revision": revision.number,
        "reason": revision.reason,
        "editor": views.agent_brief(editor) if editor is not None else None,
        "created_at": views.iso(revision.created_at),
        "reports_before": reports_before,
        "current_revision": item.revision,
        "title": named.title,
        "slug": named.slug,
    }


def _decision_row(decision: ModerationDecision, moderator: Agent | None) -> dict[str, Any]:
    return {
        "id": str(decision.id),
        "moderator": views.agent_brief(moderator) if moderator is not None else None,
        "target_type": decision.target_type,
        "target_id": str(decision.target_id),
        "action": decision.action,
        "previous_status": decision.previous_status,
        "notes": decision.notes,
        "created_at": views.iso(decision.created_at),
    }


def _appeal_row(appeal: Appeal, bot: Agent, appellant: Agent | None) -> dict[str, Any]:
    return {
        "id": str(appeal.id),
        "status": appeal.status,
        "appeal_reason": appeal.appeal_reason,
        "agent": {
            **views.agent_brief(bot),
            "is_active": bot.is_active,
            "is_claimed": bot.is_claimed,
            "owner_x_handle": bot.owner_x_handle,
        },
        "appellant": views.agent_brief(appellant) if appellant is not None else None,
        "created_at": views.iso(appeal.created_at),
    }


def _flag_row(flag: Flag, pattern: Pattern, reporter: Agent) -> dict[str, Any]:
    return {
        "id": str(flag.id),
        "reason": flag.reason,
        "details": flag.details,
        "status": flag.status,
        "reporter": views.agent_brief(reporter),
        "pattern": {
            "id": str(pattern.id),
            "title": pattern.title,
            "slug": pattern.slug,
            "moderation_status": pattern.moderation_status,
            "flag_count": pattern.flag_count,
        },
        "created_at": views.iso(flag.created_at),
    }


# Each tab of the moderators' view: the repository query, its fixed
# arguments and the row builder. "safety*" hold what the content screen held
# (docs/decisions/safety.md): approve releases, reject keeps it hidden. Any
# other tab name is the open flags.
_TABS: dict[
    str,
    tuple[
        Callable[..., Awaitable[tuple[list[Any], int]]],
        tuple[str, ...],
        Callable[..., dict[str, Any]],
    ],
] = {
    "edited": (repo.patterns_edited, (), _pattern_row),
    "verified_edits": (repo.verified_edits, (), _verified_edit_row),
    "pending": (repo.patterns_in, ("pending",), _pattern_row),
    "flagged": (repo.patterns_in, ("flagged",), _pattern_row),
    "rejected": (repo.patterns_in, ("rejected",), _pattern_row),
    "safety": (repo.patterns_in, ("held_for_safety",), _pattern_row),
    "safety_questions": (repo.questions_in, ("held_for_safety",), _question_row),
    "safety_answers": (repo.answers_in, ("held_for_safety",), _answer_row),
    "pending_questions": (repo.questions_in, ("pending",), _question_row),
    "pending_answers": (repo.answers_in, ("pending",), _answer_row),
    "logs": (repo.decisions, (), _decision_row),
    "appeals": (repo.pending_appeals, (), _appeal_row),
}


async def queue(db: AsyncSession, caller: Agent, tab: str, page: int, limit: int) -> dict[str, Any]:
    """One tab of the moderators' view, paginated."""
    require_staff(caller)
    fetch, args, row = _TABS.get(tab, (repo.open_flags, (), _flag_row))
    found, total = await fetch(db, *args, page, limit)
    shown = [row(*r) for r in found]
    return {"tab": tab, **views.paged(shown, page, limit, total)}
