"""storage/access.py: each resource's SQL predicate and its Python twin agree
on every state a row can be in, evaluated by Postgres and by Python over the
same rows."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import Boolean, literal_column, select, text
from sqlmodel.ext.asyncio.session import AsyncSession

from storage import access
from storage.models import Agent, Answer, Pattern, Question
from storage.models.patterns import MODERATION_STATUSES, PATTERN_STATUSES
from storage.models.questions import QUESTION_STATUSES
from tests.api.conftest import register
from tests.api.test_patterns import publish
from tests.api.test_questions import answer, ask

VIEWERS = ("nobody", "author", "someone else")


@pytest.fixture
async def db(app: FastAPI) -> AsyncIterator[AsyncSession]:
    """One transaction, rolled back: the states tried here are never committed."""
    async with app.state.ctx.sessions() as session:
        yield session
        await session.rollback()


async def _set(db: AsyncSession, table: str, row_id: Any, **values: Any) -> None:
    assignments = ", ".join(f"{name} = :{name}" for name in values)
    await db.exec(  # type: ignore[call-overload]
        text(f"UPDATE {table} SET {assignments} WHERE id = :id"),
        params={**values, "id": row_id},
    )
    db.expunge_all()


async def _sql_holds(db: AsyncSession, predicate: Any, table: str, row_id: Any) -> bool:
    condition = literal_column(predicate, Boolean) if isinstance(predicate, str) else predicate
    found = await db.exec(  # type: ignore[call-overload]
        select(condition).select_from(text(table)).where(text(f"{table}.id = :id")),
        params={"id": row_id},
    )
    return bool(found.scalar_one())


def _viewer(name: str, author_id: uuid.UUID) -> uuid.UUID | None:
    return {"nobody": None, "author": author_id, "someone else": uuid.uuid4()}[name]


async def test_patterns(client: httpx.AsyncClient, db: AsyncSession) -> None:
    author = await register(client, "Access Author")
    pattern_id = uuid.UUID((await publish(client, author))["id"])
    seen = set()
    for status, moderation in itertools.product(PATTERN_STATUSES, MODERATION_STATUSES):
        await _set(db, "patterns", pattern_id, status=status, moderation_status=moderation)
        row = await db.get(Pattern, pattern_id)
        assert row is not None
        public = await _sql_holds(db, access.public_pattern_sql("patterns"), "patterns", pattern_id)
        assert access.pattern_is_public(row) == public, (status, moderation)
        assert access.pattern_state_is_public(status, moderation) == public
        # What crawlers are offered: the public rows a moderator cleared.
        indexed = await _sql_holds(
            db, access.indexed_pattern_sql("patterns"), "patterns", pattern_id
        )
        assert access.pattern_state_is_indexed(status, moderation) == indexed
        assert indexed == (public and moderation == "approved")
        seen.add(public)
        for name in VIEWERS:
            viewer = _viewer(name, row.author_id)
            holds = await _sql_holds(
                db, access.pattern_visible_to_sql(viewer), "patterns", pattern_id
            )
            assert access.pattern_visible_to(row, viewer) == holds, (status, moderation, name)
    assert seen == {True, False}  # both sides of the rule were tried


async def test_questions_and_answers(client: httpx.AsyncClient, db: AsyncSession) -> None:
    asker = await register(client, "Access Asker")
    helper = await register(client, "Access Helper")
    question = await ask(client, asker)
    answer_id = uuid.UUID((await answer(client, helper, question["slug"]))["id"])
    question_id = uuid.UUID(question["id"])
    for q_status, q_moderation, a_moderation in itertools.product(
        QUESTION_STATUSES, MODERATION_STATUSES, MODERATION_STATUSES
    ):
        await _set(db, "questions", question_id, status=q_status, moderation_status=q_moderation)
        await _set(db, "answers", answer_id, moderation_status=a_moderation)
        q = await db.get(Question, question_id)
        a = await db.get(Answer, answer_id)
        assert q is not None and a is not None
        visible = await _sql_holds(db, access.visible_question_sql("questions"), "questions", q.id)
        assert access.question_is_visible(q) == visible
        assert access.question_state_is_visible(q_status, q_moderation) == visible
        indexed = await _sql_holds(db, access.indexed_question_sql("questions"), "questions", q.id)
        assert access.question_state_is_indexed(q_status, q_moderation) == indexed
        assert indexed == (visible and q_moderation == "approved")
        public = await _answer_public(db, a.id)
        assert access.answer_is_public(a, q) == public, (q_status, q_moderation, a_moderation)
        # The author's wider view sits on the public rule.
        assert access.question_visible_to(q, None) == visible
        assert access.question_visible_to(q, q.author_id) == (q_status != "deleted")
        assert access.answer_visible_to(a, q, None) == public
        assert access.answer_visible_to(a, q, a.author_id) == visible
        shown = await _sql_holds(db, access.shown_answer_sql("answers"), "answers", a.id)
        assert access.answer_is_shown(a) == shown == (a_moderation != "rejected")
        # DELETE reaches what the caller may see, and an admin all but the deleted.
        alive = q_status != "deleted"
        admin, mod = (
            SimpleNamespace(id=uuid.uuid4(), role="admin"),
            SimpleNamespace(id=uuid.uuid4(), role="moderator"),
        )
        assert access.question_found_for_delete(q, admin) == alive
        assert access.question_found_for_delete(q, mod) == visible
        assert access.question_found_for_delete(q, SimpleNamespace(id=q.author_id, role=None)) == (
            alive
        )
        assert access.answer_found_for_delete(a, q, admin) == alive
        assert access.answer_found_for_delete(a, q, mod) == public
        helper_row = SimpleNamespace(id=a.author_id, role=None)
        assert access.answer_found_for_delete(a, q, helper_row) == visible


async def _answer_public(db: AsyncSession, answer_id: uuid.UUID) -> bool:
    found = await db.exec(  # type: ignore[call-overload]
        select(access.PUBLIC_ANSWER)
        .select_from(text("answers JOIN questions ON questions.id = answers.question_id"))
        .where(text("answers.id = :id")),
        params={"id": answer_id},
    )
    sql_expression = bool(found.scalar_one())
    literal = await db.exec(  # type: ignore[call-overload]
        text(
            "SELECT " + access.public_answer_sql("a", "q") + " FROM answers a "
            "JOIN questions q ON q.id = a.question_id WHERE a.id = :id"
        ),
        params={"id": answer_id},
    )
    assert bool(literal.scalar_one()) == sql_expression  # the two SQL spellings agree
    return sql_expression


async def test_agents(client: httpx.AsyncClient, db: AsyncSession) -> None:
    agent_id = uuid.UUID((await register(client, "Access Agent")).agent_id)
    for active in (True, False):
        await _set(db, "agents", agent_id, is_active=active)
        row = await db.get(Agent, agent_id)
        assert row is not None
        public = await _sql_holds(db, access.public_agent_sql("agents"), "agents", agent_id)
        assert access.agent_is_public(row) == public == active


def test_staff() -> None:
    class Someone:
        def __init__(self, role: str | None) -> None:
            self.role = role

    assert [access.is_staff(Someone(r)) for r in (None, "moderator", "admin")] == [
        False,
        True,
        True,
    ]
    assert not access.is_staff(None)
