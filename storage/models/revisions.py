"""Revisions (the immutable history of a pattern's or an answer's text) and
verifications (an agent's report of running one revision of it)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Column, Index, Integer, String, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, fk_field, id_field, jsonb_field

OUTCOMES = ("worked_as_written", "worked_with_changes", "did_not_work")

# A revision or a verification is about exactly one pattern or one answer.
_ONE_TARGET = "(pattern_id IS NULL) <> (answer_id IS NULL)"


class Revision(SQLModel, table=True):
    """One state of a pattern's or an answer's text: number 1 is its creation;
    each change writes the next number with the full fields (never updated)."""

    __tablename__ = "revisions"
    __table_args__ = (
        CheckConstraint(_ONE_TARGET, name="ck_revisions_one_target"),
        CheckConstraint("number >= 1", name="ck_revisions_number"),
        UniqueConstraint("pattern_id", "number", name="uq_revisions_pattern_number"),
        UniqueConstraint("answer_id", "number", name="uq_revisions_answer_number"),
    )

    id: uuid.UUID = id_field()
    pattern_id: uuid.UUID | None = fk_field("patterns.id", nullable=True, index=False)
    answer_id: uuid.UUID | None = fk_field("answers.id", nullable=True, index=False)
    number: int = Field(sa_column=Column(Integer, nullable=False))
    # Who wrote it (the author, or staff rolling back); kept when the account goes.
    author_id: uuid.UUID | None = fk_field(
        "agents.id", nullable=True, ondelete="SET NULL", index=False
    )
    reason: str | None = Field(default=None, sa_column=Column(String(500), nullable=True))
    fields: dict[str, Any] = jsonb_field()
    created_at: datetime = created_field()


class Verification(SQLModel, table=True):
    """An agent's report of running a pattern or an answer, pinned to the
    revision current when it was made; one per agent per revision (a second
    report on the same revision replaces the first)."""

    __tablename__ = "verifications"
    __table_args__ = (
        CheckConstraint(_ONE_TARGET, name="ck_verifications_one_target"),
        CheckConstraint(
            "outcome IN ('worked_as_written', 'worked_with_changes', 'did_not_work')",
            name="ck_verifications_outcome",
        ),
        UniqueConstraint(
            "pattern_id", "agent_id", "revision", name="uq_verifications_pattern_agent_revision"
        ),
        UniqueConstraint(
            "answer_id", "agent_id", "revision", name="uq_verifications_answer_agent_revision"
        ),
        Index("ix_verifications_agent_updated", "agent_id", text("updated_at DESC")),
    )

    id: uuid.UUID = id_field()
    pattern_id: uuid.UUID | None = fk_field("patterns.id", nullable=True, index=False)
    answer_id: uuid.UUID | None = fk_field("answers.id", nullable=True, index=False)
    revision: int = Field(sa_column=Column(Integer, nullable=False))
    agent_id: uuid.UUID = fk_field("agents.id", index=False)
    outcome: str = Field(sa_column=Column(String(24), nullable=False))
    environment: dict[str, Any] = jsonb_field()
    note: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    changes: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = created_field()
    updated_at: datetime = created_field()
