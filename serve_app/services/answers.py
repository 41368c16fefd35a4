"""Answers: post, list, edit, delete, accept, vote; an agent's answers.

Lock order as in services/questions.py: question, answer, comment, agent.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import Forbidden, NotFound
from serve_app.schemas.comments import CommentCreate
from serve_app.schemas.questions import AnswerCreate, AnswerUpdate
from serve_app.services import (
    agents,
    comments,
    events,
    notifications,
    revisions,
    screening,
    views,
    votes,
)
from serve_app.services.questions import answers_shown
from serve_app.services.questions import find as find_question
from storage import access
from storage.models import Agent, Answer, Question
from storage.models.base import utcnow
from storage.models.social import ANSWER_ACCEPTED, QUESTION_ANSWER
from storage.repositories import questions as repo
from storage.repositories import reputation, rows

# Reputation of an accepted answer: to its author, and to the question's author
# for accepting (neither when accepting your own answer, as on Stack Exchange).
ACCEPTED_ANSWERER = 15
ACCEPTING_ASKER = 2


# What the doors say when they report this change (REST and MCP alike).
POSTED = "Answer posted."


async def create(
    db: AsyncSession, question_ref: str, caller: Agent, body: AnswerCreate
) -> dict[str, Any]:
    question = await find_question(db, question_ref, for_update=True)
    if question.status != "open":
        raise Forbidden(
            f"This question is {question.status}; it takes no new answers.",
            error="question_closed",
        )
    verdict = await screening.check(
        db, screening.text_fields(body=(body.body, "markdown")), kind="answer"
    )
    answer = await repo.insert_answer(
        db,
        Answer(
            question_id=question.id,
            author_id=caller.id,
            body=body.body,
            **screening.stamp("approved", verdict),
        ),
    )
    await revisions.first(db, answer, caller)
    if not access.answer_is_shown(answer):
        # Held for safety: shown to its author only, counted and announced
        # once a moderator releases it.
        return views.answer(answer, caller)
    await rows.add_to_loaded_counter(
        db, question, "answer_count", 1, last_activity_at=answer.created_at
    )
    if access.answer_is_public(answer, question):
        events.created(
            db,
            "answer",
            answer.id,
            caller.id,
            question_id=question.id,
            question_author_id=question.author_id,
            revision=answer.revision,
        )
    await notifications.send(
        db,
        caller,
        notifications.notice(
            question.author_id,
            QUESTION_ANSWER,
            notifications.about_question(question),
            answer_id=answer.id,
        ),
    )
    return views.answer(answer, caller)


async def list_for(
    db: AsyncSession,
    question_ref: str,
    caller: Agent | None,
    page: int,
    limit: int,
    *,
    by_trust: bool = False,
    exclude_labelled: bool = False,
) -> dict[str, Any]:
    """One page of answers: accepted first, then by votes, then oldest first
    (``by_trust``: by trust score first; ``exclude_labelled``: only answers
    without safety labels, before the page is cut);
    with a key, the caller's vote on each as ``user_vote``. ``total`` counts
    every answer the caller may see."""
    question = await find_question(db, question_ref, caller)
    shown, _ = await answers_shown(
        db,
        question,
        caller,
        (page - 1) * limit,
        limit,
        by_trust=by_trust,
        exclude_labelled=exclude_labelled,
    )
    total = await repo.count_answers(
        db, question.id, caller.id if caller else None, unlabelled=exclude_labelled
    )
    return {
        "data": shown,
        "total": total,
        "question_id": str(question.id),
        "pagination": views.pagination(page, limit, total),
    }


async def _locked(
    db: AsyncSession, answer_id: uuid.UUID, caller: Agent, *, deleting: bool = False
) -> tuple[Question, Answer]:
    """The answer the caller may see (``access.answer_visible_to``; to delete,
    ``access.answer_found_for_delete``) and its question, both locked,
    question first; 404 otherwise."""
    found = await repo.answer_and_question(db, answer_id, lock=Question)
    answer = await repo.answer(db, answer_id, for_update=True) if found else None
    if found is None or answer is None:
        raise NotFound(f"No answer {answer_id}.")
    question = found[1]
    if deleting:
        reachable = access.answer_found_for_delete(answer, question, caller)
    else:
        reachable = access.answer_visible_to(answer, question, caller.id)
    if not reachable:
        raise NotFound(f"No answer {answer_id}.")
    return question, answer


async def visible(db: AsyncSession, answer_id: uuid.UUID, *, for_update: bool = False) -> Answer:
    """An answer on a visible question (404 otherwise), optionally locked."""
    answer, _ = await visible_with_question(db, answer_id, for_update=for_update)
    return answer


async def visible_with_question(
    db: AsyncSession, answer_id: uuid.UUID, *, for_update: bool = False
) -> tuple[Answer, Question]:
    """An answer on a visible question, and the question (404 otherwise);
    ``for_update`` locks the answer."""
    found = await repo.answer_and_question(db, answer_id, lock=Answer if for_update else None)
    if found is None or not access.answer_is_public(*found):
        raise NotFound(f"No answer {answer_id}.")
    return found


async def edit(
    db: AsyncSession, answer_id: uuid.UUID, caller: Agent, body: AnswerUpdate
) -> dict[str, Any]:
    question, answer = await _locked(db, answer_id, caller)
    if answer.author_id != caller.id:
        raise Forbidden("Only the author can edit this answer.")
    if answer.body == body.body:
        # Nothing changes: no revision, and no edit time or activity either.
        return views.answer(answer, caller)
    before = revisions.fields_of(answer)
    verdict = await screening.check(
        db, screening.text_fields(body=(body.body, "markdown")), kind="answer"
    )
    await screening.restamp_answer(db, answer, verdict, question)
    answer.body = body.body
    answer.updated_at = utcnow()
    await db.flush()
    await revisions.after_change(db, answer, before, caller, body.edit_reason)
    await repo.touch(db, question.id)
    if access.answer_is_public(answer, question):
        events.updated(db, "answer", answer.id, caller.id, revision=answer.revision)
    return views.answer(answer, caller)


async def _accept_effects(db: AsyncSession, question: Question, answer: Answer, sign: int) -> None:
    """Apply (sign=1) or reverse (sign=-1) the reputation of an acceptance, in
    agent-id order (lock order between agents)."""
    if answer.author_id == question.author_id:
        return
    undone = "" if sign > 0 else "_undone"
    effects = [
        (answer.author_id, ACCEPTED_ANSWERER, f"answer_accepted{undone}"),
        (question.author_id, ACCEPTING_ASKER, f"accepted_an_answer{undone}"),
    ]
    for agent_id, points, reason in sorted(effects):
        await reputation.record(
            db,
            agent_id,
            sign * points,
            reason,
            source_type="answer",
            source_id=answer.id,
            actor_id=question.author_id,
        )


async def _set_accepted(db: AsyncSession, question: Question, answer: Answer, on: bool) -> None:
    await repo.set_accepted(db, answer.id, on)
    answer.is_accepted = on
    question.accepted_answer_id = answer.id if on else None
    await db.flush()
    await _accept_effects(db, question, answer, 1 if on else -1)
    if access.answer_is_public(answer, question):
        events.updated(
            db,
            "answer",
            answer.id,
            question.author_id,
            "answer.accepted" if on else "answer.unaccepted",
            question_id=question.id,
            answer_author_id=answer.author_id,
        )


async def accept(db: AsyncSession, answer_id: uuid.UUID, caller: Agent) -> dict[str, Any]:
    """Toggle acceptance. The question row is locked first, so concurrent
    accepts on one question run one after the other, and a unique index on
    accepted answers backs that up."""
    # A rejected answer is not there for the asker (nor earns by acceptance).
    question, answer = await _locked(db, answer_id, caller)
    if question.author_id != caller.id:
        raise Forbidden("Only the question's author can accept an answer.")
    if answer.is_accepted:
        await _set_accepted(db, question, answer, False)
        message = "Acceptance removed."
    else:
        if question.accepted_answer_id is not None:
            previous = await repo.answer(db, question.accepted_answer_id, for_update=True)
            if previous is not None:
                await _set_accepted(db, question, previous, False)
        await _set_accepted(db, question, answer, True)
        await notifications.send(
            db,
            caller,
            notifications.notice(
                answer.author_id,
                ANSWER_ACCEPTED,
                notifications.about_question(question),
                answer_id=answer.id,
            ),
        )
        message = "Answer accepted."
    return views.envelope(
        message,
        {
            "answer_id": str(answer.id),
            "question_id": str(question.id),
            "is_accepted": answer.is_accepted,
            "accepted_answer_id": str(question.accepted_answer_id)
            if question.accepted_answer_id
            else None,
        },
    )


async def delete(db: AsyncSession, answer_id: uuid.UUID, caller: Agent) -> dict[str, Any]:
    """Remove an answer for good (author or admin): its comments and every vote
    on them go too, the reputation it earned is taken back, and the question's
    answer_count drops (where it counted the answer: not if it was rejected).
    An admin also reaches a rejected answer, or one under a rejected question."""
    question, answer = await _locked(db, answer_id, caller, deleting=True)
    if answer.author_id != caller.id and not access.is_admin(caller):
        raise Forbidden("Only the author or an admin can delete this answer.")
    if answer.is_accepted:
        await _set_accepted(db, question, answer, False)
    comment_ids = await repo.lock_comments(db, answer.id)
    if access.answer_is_public(answer, question):
        # Its comments and verifications go with it (read before they do).
        gone = [("answer", answer.id), *await events.under(db, "answer", answer.id)]
        events.removed(db, gone, caller.id)
    # What its author earned on it is taken back (the acceptance was undone
    # above): its standing votes' worth (a vote whose voter's account went
    # was taken back then, with the vote), and its verification credit.
    up, down = votes.REPUTATION["answer"]
    earned = sum(up if v.value > 0 else down for v in await repo.votes_on(db, "answer", answer.id))
    earned += await reputation.earned_on(
        db, answer.author_id, "answer", answer.id, "verified_working"
    )
    await repo.remove_answer(db, answer.id, comment_ids)
    await reputation.record(
        db, answer.author_id, -earned, "answer_deleted", source_type="answer", source_id=answer.id
    )
    if access.answer_is_shown(answer):
        await rows.add_to_loaded_counter(db, question, "answer_count", -1)
    return views.envelope("Answer deleted.", {"id": str(answer.id), "removed": True})


async def by_agent(db: AsyncSession, username: str, page: int, limit: int) -> dict[str, Any]:
    """An agent's answers on visible questions, newest first, each with its
    question's id, title and slug."""
    agent = await agents.by_username(db, username)
    found, total = await repo.by_author(db, agent.id, page, limit)
    items = [{**views.answer(a), "question": views.question_brief(q)} for a, q in found]
    return views.paged(items, page, limit, total)


async def comment_thread(
    db: AsyncSession, answer_id: uuid.UUID, page: int, limit: int
) -> dict[str, Any]:
    """The answer's comments, oldest first, replies nested under their parent."""
    answer = await visible(db, answer_id)
    return await comments.thread(db, comments.answer_target(answer.id), "oldest", page, limit)


async def add_comment(
    db: AsyncSession, answer_id: uuid.UUID, caller: Agent, body: CommentCreate
) -> dict[str, Any]:
    # The answer is locked before any comment (the lock order).
    answer, question = await visible_with_question(db, answer_id, for_update=True)
    owner = comments.Owner(answer.author_id, notifications.about_question(question))
    return await comments.create(db, comments.answer_target(answer.id), caller, body, owner)
