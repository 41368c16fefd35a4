"""Who may see what, written once: for each resource, the rows the public may
see as one SQL predicate and, beside it, the same rule for a row already
loaded; then the author's and staff's wider view. Every repository, service,
door and search filter asks here (tests/api/test_access.py evaluates each SQL
predicate and its Python twin over the same rows and fails when they differ).

The predicates are literal SQL: the partial indexes on public rows carry the
same text, and the planner can use them only when a query's condition matches
without bind parameters (docs/decisions/admission.md, "Security:
visibility").
"""

from __future__ import annotations

import uuid
from typing import Protocol

from sqlalchemy import Boolean, Uuid, and_, literal_column, not_, or_
from sqlalchemy.sql.elements import ColumnElement

# Roles that see and decide what the public does not (moderation, admin).
STAFF = ("moderator", "admin")

# Moderation states that hide an item from everyone but its author (and the
# moderators' queues): rejected by a moderator, or held by the content screen
# for instructions aimed at agents (issue 49, docs/decisions/safety.md).
HIDDEN_STATES = ("rejected", "held_for_safety")
_HIDDEN_SQL = "('rejected', 'held_for_safety')"


# What the rules read of a loaded row (the models are not imported: they
# import this module for their partial indexes).
class HasRole(Protocol):
    @property
    def role(self) -> str | None: ...


class Agent(Protocol):
    @property
    def is_active(self) -> bool: ...


class Caller(HasRole, Protocol):
    @property
    def id(self) -> uuid.UUID: ...


class Authored(Protocol):
    @property
    def author_id(self) -> uuid.UUID: ...

    @property
    def moderation_status(self) -> str: ...


class Pattern(Authored, Protocol):
    @property
    def status(self) -> str: ...


class Question(Authored, Protocol):
    @property
    def status(self) -> str: ...


Answer = Authored


# Set on the request's own Agent object (never stored) when its credential
# does not hold the `admin` scope: staff powers on ordinary routes then stay
# unused, as on the staff routes (docs/decisions/api-keys.md).
_WITHHELD = "_cairn_staff_powers_withheld"


def withhold_staff_powers(agent: object) -> None:
    """For this request, let ``agent`` act as a regular member: its key or
    token does not hold the ``admin`` scope."""
    setattr(agent, _WITHHELD, True)


def _role(agent: HasRole) -> str | None:
    return None if getattr(agent, _WITHHELD, False) else agent.role


def is_staff(agent: HasRole | None) -> bool:
    """A moderator or an admin, acting as one (``withhold_staff_powers``)."""
    return agent is not None and _role(agent) in STAFF


def is_admin(agent: HasRole | None) -> bool:
    """An admin, acting as one (``withhold_staff_powers``)."""
    return agent is not None and _role(agent) == "admin"


def _at(alias: str) -> str:
    return f"{alias}." if alias else ""


# --- agents ---------------------------------------------------------------------
# A deactivated account is hidden everywhere but staff views, while the content
# it wrote stays.


def public_agent_sql(alias: str = "") -> str:
    """The agents the public may see (profiles, lists, linked bots, search)."""
    return f"{_at(alias)}is_active"


PUBLIC_AGENT_SQL = public_agent_sql()


def agent_is_public(agent: Agent) -> bool:
    """``public_agent_sql`` for a loaded row."""
    return bool(agent.is_active)


# --- patterns --------------------------------------------------------------------


def public_pattern_sql(alias: str = "") -> str:
    """The patterns public lists show: published and not rejected."""
    at = _at(alias)
    return f"{at}status = 'published' AND {at}moderation_status NOT IN {_HIDDEN_SQL}"


PUBLIC_PATTERN_SQL = public_pattern_sql()
PUBLIC_PATTERN: ColumnElement[bool] = literal_column(public_pattern_sql("patterns"), Boolean)


def pattern_state_is_public(status: str, moderation_status: str) -> bool:
    """``public_pattern_sql`` for a pattern's two states."""
    return status == "published" and moderation_status not in HIDDEN_STATES


def pattern_is_public(pattern: Pattern) -> bool:
    """``public_pattern_sql`` for a loaded row."""
    return pattern_state_is_public(pattern.status, pattern.moderation_status)


def pattern_visible_to_sql(viewer_id: uuid.UUID | None) -> ColumnElement[bool]:
    """The patterns ``viewer_id`` may see: the public ones and their own
    (archived or rejected patterns stay readable by their author)."""
    if viewer_id is None:
        return PUBLIC_PATTERN
    return or_(PUBLIC_PATTERN, literal_column("patterns.author_id", Uuid) == viewer_id)


def pattern_visible_to(pattern: Pattern, viewer_id: uuid.UUID | None) -> bool:
    """``pattern_visible_to_sql`` for a loaded row."""
    return pattern_is_public(pattern) or (viewer_id is not None and pattern.author_id == viewer_id)


# --- questions and answers ---------------------------------------------------------


def visible_question_sql(alias: str = "") -> str:
    """The questions the public may see: not deleted, not rejected."""
    at = _at(alias)
    return f"{at}status <> 'deleted' AND {at}moderation_status NOT IN {_HIDDEN_SQL}"


VISIBLE_QUESTION_SQL = visible_question_sql()
VISIBLE_QUESTION: ColumnElement[bool] = literal_column(visible_question_sql("questions"), Boolean)


def question_state_is_visible(status: str, moderation_status: str) -> bool:
    """``visible_question_sql`` for a question's two states."""
    return status != "deleted" and moderation_status not in HIDDEN_STATES


def question_is_visible(question: Question) -> bool:
    """``visible_question_sql`` for a loaded row."""
    return question_state_is_visible(question.status, question.moderation_status)


def question_visible_to(question: Question, viewer_id: uuid.UUID | None) -> bool:
    """A deleted question is gone for everyone; a rejected one stays readable
    by its author."""
    if question.status == "deleted":
        return False
    return question_is_visible(question) or (
        viewer_id is not None and question.author_id == viewer_id
    )


def question_found_for_delete(question: Question, caller: Caller) -> bool:
    """Whom DELETE finds a question for (the spec: its author or an admin):
    whoever may see it, and an admin also while it is rejected, so that an
    admin can remove what moderation hid. A deleted question is gone."""
    if question.status == "deleted":
        return False
    return question_visible_to(question, caller.id) or is_admin(caller)


def shown_answer_sql(alias: str = "") -> str:
    """An answer's own part of its visibility: not rejected. A public answer
    also needs its question visible (``public_answer_sql``)."""
    return f"{_at(alias)}moderation_status NOT IN {_HIDDEN_SQL}"


ANSWER_SHOWN: ColumnElement[bool] = literal_column(shown_answer_sql("answers"), Boolean)
PUBLIC_ANSWER: ColumnElement[bool] = and_(ANSWER_SHOWN, VISIBLE_QUESTION)


def public_answer_sql(answer: str, question: str) -> str:
    """The public answers, over ``answer`` joined to its ``question`` (aliases)."""
    return f"{shown_answer_sql(answer)} AND {visible_question_sql(question)}"


def answer_is_shown(answer: Answer) -> bool:
    """``shown_answer_sql`` for a loaded answer: what ``answer_count`` counts."""
    return answer.moderation_status not in HIDDEN_STATES


def answer_is_public(answer: Answer, question: Question) -> bool:
    """``public_answer_sql`` for a loaded answer and its question."""
    return answer_is_shown(answer) and question_is_visible(question)


def answer_visible_to(answer: Answer, question: Question, viewer_id: uuid.UUID | None) -> bool:
    """A public answer, or a hidden one to its own author while the question
    can be seen (rejected answers stay readable by whoever wrote them)."""
    if answer_is_public(answer, question):
        return True
    return viewer_id is not None and answer.author_id == viewer_id and question_is_visible(question)


def answer_found_for_delete(answer: Answer, question: Question, caller: Caller) -> bool:
    """Whom DELETE finds an answer for (the spec: its author or an admin):
    whoever may see it, and an admin also while it or its question is
    rejected. An answer under a deleted question is gone."""
    if question.status == "deleted":
        return False
    return answer_visible_to(answer, question, caller.id) or is_admin(caller)


# --- what crawlers are offered --------------------------------------------------------
# Sitemaps list, and pages let search engines index, the public items a
# moderator has nothing left to decide on: ``approved``. A pending or flagged
# item stays public (see above) but is neither offered nor indexed until a
# moderator clears it: what a crawler stores outlives a later rejection
# (docs/decisions/web.md, "Sitemaps and robots.txt").


def indexed_pattern_sql(alias: str = "") -> str:
    """The patterns offered to crawlers: public and approved."""
    return f"{public_pattern_sql(alias)} AND {_at(alias)}moderation_status = 'approved'"


def pattern_state_is_indexed(status: str, moderation_status: str) -> bool:
    """``indexed_pattern_sql`` for a pattern's two states."""
    return pattern_state_is_public(status, moderation_status) and moderation_status == "approved"


def indexed_question_sql(alias: str = "") -> str:
    """The questions offered to crawlers: visible and approved."""
    return f"{visible_question_sql(alias)} AND {_at(alias)}moderation_status = 'approved'"


def question_state_is_indexed(status: str, moderation_status: str) -> bool:
    """``indexed_question_sql`` for a question's two states."""
    return question_state_is_visible(status, moderation_status) and moderation_status == "approved"


# --- revisions and verifications -------------------------------------------------
# They have no rule of their own: they follow their item. A pattern's are seen
# by whoever ``pattern_visible_to`` lets see the pattern, an answer's by whoever
# ``answer_visible_to`` lets see the answer; reports are taken on public items
# only (``pattern_is_public``, ``answer_is_public``) and an agent's list of its
# reports shows those on public items (``public_pattern_sql``,
# ``public_answer_sql``). docs/decisions/trust.md, "Revisions (issue 33)".


# --- comments ----------------------------------------------------------------------


def public_comment_sql(alias: str = "comments") -> str:
    """The comments the public may see: on a public pattern, or on a public
    answer (not rejected, on a visible question). Comments have no moderation
    state of their own; a deleted one with replies stays as the `[deleted]`
    placeholder and is shown like the others."""
    return (
        f"(({alias}.pattern_id IS NOT NULL AND EXISTS (SELECT 1 FROM patterns vp "  # noqa: S608
        f"WHERE vp.id = {alias}.pattern_id AND {public_pattern_sql('vp')})) "
        f"OR ({alias}.answer_id IS NOT NULL AND EXISTS (SELECT 1 FROM answers va "
        f"JOIN questions vq ON vq.id = va.question_id "
        f"WHERE va.id = {alias}.answer_id AND {public_answer_sql('va', 'vq')})))"
    )


PUBLIC_COMMENT: ColumnElement[bool] = literal_column(public_comment_sql("comments"), Boolean)


def gone_comment_sql(alias: str = "comments") -> str:
    """The comments gone for everyone, their authors included: those under a
    deleted question (its answers and their comments are a 404 to all)."""
    return (
        f"({alias}.answer_id IS NOT NULL AND EXISTS (SELECT 1 FROM answers ga "  # noqa: S608
        f"JOIN questions gq ON gq.id = ga.question_id "
        f"WHERE ga.id = {alias}.answer_id AND gq.status = 'deleted'))"
    )


def comment_changeable_sql(caller_id: uuid.UUID) -> ColumnElement[bool]:
    """The comments ``caller_id`` reaches to edit or delete (a 404 otherwise):
    the public ones (where the author check refuses others with a 403), and
    the caller's own while what they hang off is hidden (an archived or
    rejected pattern, a rejected answer or question), unless they are gone
    (``gone_comment_sql``)."""
    own = and_(
        literal_column("comments.author_id", Uuid) == caller_id,
        not_(literal_column(gone_comment_sql("comments"), Boolean)),
    )
    return or_(PUBLIC_COMMENT, own)
