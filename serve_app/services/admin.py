"""The admin view (site-wide counts; every agent, pattern and question, hidden
ones included) and the admin's changes to them. A change to a pattern's or a
question's ``moderation_status`` that approves or rejects it goes through the
moderation decision (logged, author notified, counters and flags kept right);
see docs/decisions/resources.md, "Admin"."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit import hooks
from serve_app.kit.errors import BadRequest, Conflict, Forbidden, NotFound
from serve_app.schemas.admin import (
    MODERATION_FILTERS,
    STATUS_FILTERS,
    PatternChange,
    QuestionChange,
    UserChange,
)
from serve_app.schemas.moderation import Decision
from serve_app.services import events, moderation, verifications, views
from storage import access
from storage.models import Agent, Category, Pattern, Question
from storage.models.base import utcnow
from storage.models.patterns import MODERATION_STATUSES, PATTERN_STATUSES
from storage.models.questions import QUESTION_STATUSES
from storage.repositories import admin as repo
from storage.repositories import patterns as pattern_repo
from storage.repositories import questions as question_repo
from storage.repositories import rows

ADMIN = "admin"
# moderation_status values that are moderation decisions (PATCH /api/moderation's actions).
DECISIONS = {"approved": "approve", "rejected": "reject"}


def require_admin(caller: Agent) -> None:
    if not access.is_admin(caller):
        raise Forbidden("Admins only.", error="forbidden")


# Rows as the admin sees them ----------------------------------------------------


def user_row(agent: Agent, bots: list[Agent] | None = None) -> dict[str, Any]:
    """The profile with its account state. Never a password or key hash; the claim
    code only while unclaimed, as the public claim status shows it."""
    return {
        **views.own_profile(agent, bots),
        "email": agent.email,
        "claim_code": agent.claim_code if not agent.is_claimed else None,
        "updated_at": views.iso(agent.updated_at),
    }


def pattern_row(pattern: Pattern, author: Agent, category: Category | None) -> dict[str, Any]:
    """A pattern as lists show it, plus its state, counters and dates (not its content)."""
    return {
        **views.pattern_item(pattern, author, category),
        "status": pattern.status,
        "moderation_status": pattern.moderation_status,
        "comment_count": pattern.comment_count,
        "fork_count": pattern.fork_count,
        "bookmark_count": pattern.bookmark_count,
        "flag_count": pattern.flag_count,
        "forked_from_id": str(pattern.forked_from_id) if pattern.forked_from_id else None,
        "updated_at": views.iso(pattern.updated_at),
        "archived_at": views.iso(pattern.archived_at),
    }


def question_row(question: Question, author: Agent, category: Category | None) -> dict[str, Any]:
    return views.question(question, author, category)


# GET /api/admin -------------------------------------------------------------------


def _check_filters(
    tab: str, search: str | None, status: str | None, moderation_status: str | None
) -> None:
    """Each filter only where it means something, with one of its values."""
    if tab == "overview":
        sent = [n for n, v in (("search", search), ("status", status)) if v is not None]
        if moderation_status is not None:
            sent.append("moderation_status")
        if sent:
            raise BadRequest(f"The overview takes no {', '.join(sent)}.", error="validation_error")
        return
    if status is not None and status not in STATUS_FILTERS[tab]:
        raise BadRequest(
            f"status: on the {tab} tab, one of {', '.join(STATUS_FILTERS[tab])}.",
            error="validation_error",
        )
    if moderation_status is not None:
        if tab == "users":
            raise BadRequest("The users tab takes no moderation_status.", error="validation_error")
        if moderation_status not in MODERATION_FILTERS:
            raise BadRequest(
                f"moderation_status: one of {', '.join(MODERATION_FILTERS)}.",
                error="validation_error",
            )


async def view(
    db: AsyncSession,
    caller: Agent,
    tab: str,
    page: int,
    limit: int,
    *,
    search: str | None = None,
    status: str | None = None,
    moderation_status: str | None = None,
) -> dict[str, Any]:
    """One tab of the admin view: ``overview`` counts, or a page of ``users``,
    ``patterns`` or ``questions``."""
    require_admin(caller)
    _check_filters(tab, search, status, moderation_status)
    if tab == "overview":
        return {"tab": tab, "data": await overview(db)}
    shown: list[dict[str, Any]]
    if tab == "users":
        active = None if status is None else status == "active"
        agents, total = await repo.agents(db, repo.AgentFilter(search, active), page, limit)
        bots = await repo.linked_bots_of(db, [a.id for a in agents if a.is_human])
        shown = [user_row(a, bots.get(a.id, [])) for a in agents]
    else:
        query = repo.ContentFilter(search, status, moderation_status)
        if tab == "patterns":
            found, total = await repo.patterns(db, query, page, limit)
            shown = [pattern_row(*r) for r in found]
        else:
            questions, total = await repo.questions(db, query, page, limit)
            shown = [question_row(*r) for r in questions]
    return {"tab": tab, **views.paged(shown, page, limit, total)}


def _by(values: tuple[str, ...], pairs: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Counts per value, every value listed (zero when absent)."""
    counts = dict.fromkeys(values, 0)
    for value, n in pairs:
        counts[value] = counts.get(value, 0) + n
    return counts


async def overview(db: AsyncSession) -> dict[str, Any]:
    counts = await repo.overview(db)
    staff = {"moderators": counts.agents.pop("moderators"), "admins": counts.agents.pop("admins")}
    patterns = {
        "total": sum(n for _, _, n in counts.patterns),
        "public": sum(
            n
            for state, moderated, n in counts.patterns
            if access.pattern_state_is_public(state, moderated)
        ),
        "by_status": _by(PATTERN_STATUSES, ((s, n) for s, _, n in counts.patterns)),
        "by_moderation_status": _by(MODERATION_STATUSES, ((m, n) for _, m, n in counts.patterns)),
    }
    questions = {
        "total": sum(n for _, _, n in counts.questions),
        "visible": sum(
            n
            for state, moderated, n in counts.questions
            if access.question_state_is_visible(state, moderated)
        ),
        "by_status": _by(QUESTION_STATUSES, ((s, n) for s, _, n in counts.questions)),
        "by_moderation_status": _by(MODERATION_STATUSES, ((m, n) for _, m, n in counts.questions)),
    }
    answers = {
        "total": sum(n for _, n in counts.answers),
        "by_moderation_status": _by(MODERATION_STATUSES, counts.answers),
    }
    return {
        "agents": counts.agents,
        "staff": staff,
        "patterns": patterns,
        "questions": questions,
        "answers": answers,
        "comments": {"total": counts.comments},
        "flags": {"open": counts.open_flags},
        "appeals": {"pending_review": counts.pending_appeals},
    }


# PATCH /api/admin -----------------------------------------------------------------


async def change(
    db: AsyncSession, caller: Agent, body: UserChange | PatternChange | QuestionChange
) -> dict[str, Any]:
    """Apply one admin change; returns the row as the admin view shows it."""
    require_admin(caller)
    if isinstance(body, UserChange):
        return await _change_user(db, caller, body)
    if isinstance(body, PatternChange):
        return await _change_pattern(db, caller, body)
    return await _change_question(db, caller, body)


def _unchanged_dropped(row: Any, changes: dict[str, object]) -> dict[str, object]:
    return {name: value for name, value in changes.items() if getattr(row, name) != value}


def _message(kind: str, changed: dict[str, object]) -> str:
    if not changed:
        return f"Nothing to change: the {kind} already has these values."
    said = ", ".join(f"{name} {'null' if v is None else v}" for name, v in sorted(changed.items()))
    return f"The {kind} was updated: {said}."


async def _change_user(db: AsyncSession, caller: Agent, body: UserChange) -> dict[str, Any]:
    # Lock the admin's row and the target's: two admins demoting or deactivating
    # each other at once are serialised, and the second sees it lost the right.
    locked = await repo.lock_agents(db, sorted({caller.id, body.id}))
    me = locked.get(caller.id)
    if me is None or not me.is_active or me.role != ADMIN:
        raise Forbidden("Admins only.", error="forbidden")
    target = locked.get(body.id)
    if target is None:
        raise NotFound(f"No user {body.id}.")
    changed = _unchanged_dropped(target, body.changes())
    if target.id == me.id and "role" in changed:
        raise Forbidden("You cannot change your own role; ask another admin.", error="forbidden")
    if target.id == me.id and changed.get("is_active") is False:
        raise Forbidden("You cannot deactivate your own account.", error="forbidden")
    if changed:
        for name, value in changed.items():
            setattr(target, name, value)
        target.updated_at = utcnow()
        await db.flush()
        hooks.credentials_changed(db, target.id)
        if "is_active" in changed:
            # A deactivated verifier's reports stop counting (and count again
            # when it is active again): its items' trust follows at once.
            await verifications.verifier_changed(db, target)
    bots = (await repo.linked_bots_of(db, [target.id])).get(target.id, [])
    return views.envelope(_message("user", changed), user_row(target, bots))


async def _decide(db: AsyncSession, caller: Agent, kind: str, item_id: uuid.UUID, new: str) -> None:
    """Approve or reject exactly as PATCH /api/moderation does (log, notice, flags,
    counters), with the admin as the moderator."""
    await moderation.decide(
        db, caller, Decision.model_validate({f"{kind}_id": item_id, "action": DECISIONS[new]})
    )


async def _change_pattern(db: AsyncSession, caller: Agent, body: PatternChange) -> dict[str, Any]:
    pattern = await rows.by_id(db, Pattern, body.id, for_update=True)
    if pattern is None:
        raise NotFound(f"No pattern {body.id}.")
    changed = _unchanged_dropped(pattern, body.changes())
    moderated = changed.get("moderation_status")
    if isinstance(moderated, str) and moderated in DECISIONS:
        await _decide(db, caller, "pattern", pattern.id, moderated)
    elif moderated is not None:
        was_public = access.pattern_is_public(pattern)
        await pattern_repo.update_counted(db, pattern, {"moderation_status": moderated})
        await events.crossed(
            db, "pattern", pattern.id, was_public, access.pattern_is_public(pattern), caller.id
        )
    if "status" in changed:
        was_public = access.pattern_is_public(pattern)
        archived_at = utcnow() if changed["status"] == "archived" else None
        await pattern_repo.update_counted(
            db, pattern, {"status": changed["status"], "archived_at": archived_at}
        )
        await events.crossed(
            db, "pattern", pattern.id, was_public, access.pattern_is_public(pattern), caller.id
        )
    author, category = await pattern_repo.related(db, pattern)
    assert author is not None
    return views.envelope(_message("pattern", changed), pattern_row(pattern, author, category))


async def _set_question_status(
    db: AsyncSession, caller: Agent, question: Question, status: str
) -> None:
    """Like the author's close/reopen and the soft delete: only columns change
    (no counter depends on a question's visibility)."""
    was_public = access.question_is_visible(question)
    now = utcnow()
    question.status = status
    if status != "deleted":
        question.closed_at = now if status == "closed" else None
    question.updated_at = now
    await db.flush()
    await events.transition(
        db, "question", question.id, was_public, access.question_is_visible(question), caller.id
    )


async def _change_question(db: AsyncSession, caller: Agent, body: QuestionChange) -> dict[str, Any]:
    question = await rows.by_id(db, Question, body.id, for_update=True)
    if question is None:
        raise NotFound(f"No question {body.id}.")
    changed = _unchanged_dropped(question, body.changes())
    status = changed.get("status")
    moderated = changed.get("moderation_status")
    decided = isinstance(moderated, str) and moderated in DECISIONS
    if decided and question.status == "deleted" and status is None:
        raise Conflict(
            "A deleted question cannot be approved or rejected; restore it "
            "(status open or closed) in the same change.",
            error="question_deleted",
        )

    async def moderate() -> None:
        if decided:
            await _decide(db, caller, "question", question.id, str(moderated))
        elif moderated is not None:
            was_public = access.question_is_visible(question)
            question.moderation_status = str(moderated)
            question.updated_at = utcnow()
            await db.flush()
            await events.crossed(
                db,
                "question",
                question.id,
                was_public,
                access.question_is_visible(question),
                caller.id,
            )

    # The moderation decision refuses deleted questions: decide before deleting,
    # restore before deciding.
    if status == "deleted":
        await moderate()
        await _set_question_status(db, caller, question, "deleted")
    else:
        if status is not None:
            await _set_question_status(db, caller, question, str(status))
        await moderate()
    found = await question_repo.with_related(db, question.id)
    assert found is not None
    return views.envelope(_message("question", changed), question_row(*found))
