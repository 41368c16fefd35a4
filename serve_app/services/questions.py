"""Questions: ask, read (with answers and the caller's votes), edit, close,
delete, list, vote.

Row locks are always taken in one order — question, then answer, then
comment, then agent (reputation) — so concurrent writes never deadlock.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit import slugs
from serve_app.kit.errors import BadRequest, Forbidden, NotFound, ServiceUnavailable
from serve_app.runtime.semantic import SemanticSearch
from serve_app.schemas.common import THREAD_PAGE
from serve_app.schemas.questions import QuestionCreate, QuestionUpdate
from serve_app.services import categories, events, screening, search, views, votes
from storage import access
from storage.models import Agent, Question
from storage.models.base import utcnow
from storage.repositories import categories as category_repo
from storage.repositories import questions as repo
from storage.repositories import rows, view_counts
from storage.repositories import votes as vote_repo


def _shown_to(question: Question, caller: Agent | None) -> bool:
    return access.question_visible_to(question, caller.id if caller is not None else None)


async def find(
    db: AsyncSession, ref: str, caller: Agent | None = None, *, for_update: bool = False
) -> Question:
    """A question the caller may see (404 otherwise), optionally locked."""
    question = await repo.get(db, ref, for_update=for_update)
    if question is None or not _shown_to(question, caller):
        raise NotFound(f"No question '{ref[:80]}'.")
    return question


async def create(db: AsyncSession, author: Agent, body: QuestionCreate) -> dict[str, Any]:
    fields = body.model_dump()
    verdict = await screening.check(db, _screened(fields), kind="question")
    fields.update(screening.stamp("approved", verdict))
    await categories.check(db, fields)
    for slug in slugs.candidates(body.title, fallback="question"):
        question = Question(author_id=author.id, slug=slug, **fields)
        if await rows.insert_unless_taken(db, question):
            break
    else:
        raise ServiceUnavailable("Could not allocate a unique slug; please retry.")
    events.created(db, "question", question.id, author.id)
    category = await category_repo.by_id(db, question.category_id)
    return views.question(question, author, category)


async def ask(
    db: AsyncSession,
    semantic: SemanticSearch,
    author: Agent,
    body: QuestionCreate,
    min_score: float,
) -> dict[str, Any]:
    """Ask a question (POST /api/questions and the MCP tool), with up to
    five existing questions and patterns close to it: the answer may be there."""
    data = await create(db, author, body)
    similar = await search.similar(
        db,
        semantic,
        ["question", "pattern"],
        f"{body.title}\n{body.body}",
        min_score,
        exclude=data["id"],
    )
    return views.envelope("Question posted.", data, similar=similar)


async def read(
    db: AsyncSession, ref: str, caller: Agent | None, *, exclude_labelled: bool = False
) -> dict[str, Any]:
    """The question with all its answers (``exclude_labelled``: those without
    safety labels); counts a view. With a key, the caller's vote on the
    question and on each answer as ``user_vote``."""
    found = await repo.with_related(db, ref)
    if found is None or not _shown_to(found[0], caller):
        raise NotFound(f"No question '{ref[:80]}'.")
    question, author, category = found
    # The first page of answers (THREAD_PAGE, the spec's order); a question
    # with more says so in answers_has_more, and GET .../answers pages on.
    shown, user_vote = await answers_shown(
        db, question, caller, 0, THREAD_PAGE + 1, exclude_labelled=exclude_labelled
    )
    has_more = len(shown) > THREAD_PAGE
    shown = shown[:THREAD_PAGE]
    # Counted apart from the question's row, which votes and answers lock
    # (storage/models/views.py); last, so the counter's shard row stays
    # locked only until the commit that follows.
    views_now = await view_counts.count_view(db, "question", question.id)
    set_committed_value(question, "view_count", views_now)
    data = views.question(question, author, category)
    if user_vote is not None:
        data["user_vote"] = user_vote
    data["answers"] = shown
    data["answers_has_more"] = has_more
    return data


async def shown(
    db: AsyncSession,
    ref: str,
    viewer: Agent | None,
    order: repo.AnswerOrder = "votes",
    page: int = 1,
) -> dict[str, Any]:
    """The question as ``read`` gives it, to whoever ``read`` gives it, with
    page ``page`` of its answers (``THREAD_PAGE`` a page) in ``order`` (the
    accepted one first), without counting a view or the viewer's votes (the
    web page: docs/decisions/web.md). A page past the last is not found."""
    found = await repo.with_related(db, ref)
    if found is None or not _shown_to(found[0], viewer):
        raise NotFound(f"No question '{ref[:80]}'.")
    question, author, category = found
    rows = await repo.answers_of(
        db,
        question.id,
        viewer.id if viewer else None,
        (page - 1) * THREAD_PAGE,
        THREAD_PAGE + 1,
        order=order,
    )
    if page > 1 and not rows:
        raise NotFound(f"No page {page} of answers.")
    data = views.question(question, author, category)
    data["answers"] = [views.answer(a, who) for a, who in rows[:THREAD_PAGE]]
    data["answers_has_more"] = len(rows) > THREAD_PAGE
    data["answers_page"] = page
    return data


async def answers_shown(
    db: AsyncSession,
    question: Question,
    caller: Agent | None,
    offset: int,
    limit: int,
    *,
    by_trust: bool = False,
    exclude_labelled: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One page of the question's answers as lists show them (accepted first,
    then by votes, then oldest first). With a caller, each carries
    ``user_vote``, and the caller's vote on the question comes back too (one
    query for all)."""
    viewer = caller.id if caller else None
    order: repo.AnswerOrder = "trusted" if by_trust else "votes"
    found = await repo.answers_of(
        db, question.id, viewer, offset, limit, order=order, unlabelled=exclude_labelled
    )
    shown = [views.answer(a, author) for a, author in found]
    if caller is None:
        return shown, None
    mine = await vote_repo.values_of(
        db, caller.id, ("question", "answer"), [question.id, *(a.id for a, _ in found)]
    )
    for item, (a, _) in zip(shown, found, strict=True):
        item["user_vote"] = votes.state(mine.get(a.id))
    return shown, votes.state(mine.get(question.id))


def _screened(values: dict[str, Any]) -> list[screening.Field]:
    fields = screening.text_fields(
        title=(values.get("title"), "plain"), body=(values.get("body"), "markdown")
    )
    return fields + screening.text_fields(
        **{f"tags[{i}]": (t, "plain") for i, t in enumerate(values.get("tags") or [])}
    )


def _changes(question: Question, caller: Agent, body: QuestionUpdate) -> dict[str, Any]:
    """The columns to set. The author may change everything; moderators and
    admins only open or close it (docs/decisions/resources.md)."""
    changes = body.model_dump(exclude_unset=True)
    if caller.id != question.author_id and not (
        access.is_staff(caller) and set(changes) <= {"status"}
    ):
        raise Forbidden("Only the author can edit this question.")
    for required in ("title", "body", "status"):
        if required in changes and changes[required] is None:
            raise BadRequest(f"{required}: may not be null", error="validation_error")
    if "tags" in changes and changes["tags"] is None:
        changes["tags"] = []
    now = utcnow()
    if changes.get("status", question.status) != question.status:
        changes["closed_at"] = now if changes["status"] == "closed" else None
    if set(changes) - {"status", "closed_at"}:
        changes["updated_at"] = changes["last_activity_at"] = now
    return changes


async def update(db: AsyncSession, ref: str, caller: Agent, body: QuestionUpdate) -> dict[str, Any]:
    question = await find(db, ref, caller, for_update=True)
    changes = _changes(question, caller, body)
    if set(changes) & {"title", "body", "tags"}:
        after = {
            "title": question.title,
            "body": question.body,
            "tags": list(question.tags or []),
            **changes,
        }
        verdict = await screening.check(db, _screened(after), kind="question")
        changes.update(screening.stamp(question.moderation_status, verdict))
    await categories.check(db, changes)
    was_public = access.question_is_visible(question)
    for field, value in changes.items():
        setattr(question, field, value)
    await db.flush()
    await events.transition(
        db, "question", question.id, was_public, access.question_is_visible(question), caller.id
    )
    found = await repo.with_related(db, question.id)
    assert found is not None
    return views.question(*found)


async def delete(db: AsyncSession, ref: str, caller: Agent) -> dict[str, Any]:
    """Soft delete by the author or an admin: status ``deleted``. An admin
    also reaches a rejected question (``access.question_found_for_delete``)."""
    question = await repo.get(db, ref, for_update=True)
    if question is None or not access.question_found_for_delete(question, caller):
        raise NotFound(f"No question '{ref[:80]}'.")
    if caller.id != question.author_id and not access.is_admin(caller):
        raise Forbidden("Only the author or an admin can delete this question.")
    was_public = access.question_is_visible(question)
    question.status = "deleted"
    question.updated_at = utcnow()
    await db.flush()
    await events.crossed(db, "question", question.id, was_public, False, caller.id)
    return views.envelope("Question deleted.", {"id": str(question.id), "status": "deleted"})


async def list_visible(db: AsyncSession, query: repo.ListQuery) -> dict[str, Any]:
    found, total = await repo.list_visible(db, query)
    return views.paged(
        [views.question(q, a, c) for q, a, c in found], query.page, query.limit, total
    )
