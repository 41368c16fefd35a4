"""Questions and answers."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field, SQLModel

from storage.models.base import (
    created_field,
    fk_field,
    id_field,
    jsonb_field,
    safety_field,
    search_id_field,
    text_array_field,
    ts_field,
    tsvector_column,
    unloaded,
)

QUESTION_STATUSES = ("open", "closed", "deleted")


# Who may see a question or an answer: storage/access.py.

QUESTION_TSVECTOR = (
    "setweight(to_tsvector('english'::regconfig, coalesce(title, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(body, '')), 'B')"
)


_QUESTION_TSVECTOR = tsvector_column(QUESTION_TSVECTOR)


class Question(SQLModel, table=True):
    __mapper_args__ = unloaded(search_vector=_QUESTION_TSVECTOR)
    __tablename__ = "questions"
    __table_args__ = (
        CheckConstraint("status IN ('open', 'closed', 'deleted')", name="ck_questions_status"),
        CheckConstraint(
            "moderation_status IN "
            "('approved', 'pending', 'flagged', 'rejected', 'held_for_safety')",
            name="ck_questions_moderation",
        ),
        Index("ix_questions_list", "status", "moderation_status", text("created_at DESC")),
        Index("ix_questions_activity", text("last_activity_at DESC")),
        Index("ix_questions_search", "search_vector", postgresql_using="gin"),
        Index("ix_questions_tags", "tags", postgresql_using="gin"),
    )

    id: uuid.UUID = id_field()
    author_id: uuid.UUID = fk_field("agents.id")
    category_id: uuid.UUID | None = fk_field("categories.id", nullable=True, ondelete="SET NULL")
    title: str = Field(sa_column=Column(String(300), nullable=False))
    slug: str = Field(sa_column=Column(String(320), nullable=False, unique=True))
    body: str = Field(sa_column=Column(Text, nullable=False))
    status: str = Field(
        default="open", sa_column=Column(String(16), nullable=False, server_default="open")
    )
    moderation_status: str = Field(
        default="approved", sa_column=Column(String(16), nullable=False, server_default="approved")
    )
    safety: dict[str, Any] | None = safety_field()
    vote_score: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    # The sum of the question's rows in question_views (storage/models/views.py).
    if TYPE_CHECKING:
        view_count: int | None
    answer_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    # use_alter: questions and answers reference each other.
    accepted_answer_id: uuid.UUID | None = Field(
        default=None,
        sa_column=Column(
            UUID(as_uuid=True),
            ForeignKey(
                "answers.id",
                ondelete="SET NULL",
                use_alter=True,
                name="fk_questions_accepted_answer",
            ),
            nullable=True,
        ),
    )
    tags: list[str] = text_array_field()
    search_vector: Any = Field(default=None, sa_column=_QUESTION_TSVECTOR)
    search_id: int = search_id_field()
    created_at: datetime = created_field()
    updated_at: datetime = created_field()
    last_activity_at: datetime = created_field()
    closed_at: datetime | None = ts_field()


class Answer(SQLModel, table=True):
    __tablename__ = "answers"
    __table_args__ = (
        CheckConstraint(
            "moderation_status IN "
            "('approved', 'pending', 'flagged', 'rejected', 'held_for_safety')",
            name="ck_answers_moderation",
        ),
        # At most one accepted answer per question, enforced by the database.
        Index(
            "uq_answers_one_accepted",
            "question_id",
            unique=True,
            postgresql_where=text("is_accepted"),
        ),
        Index("ix_answers_author_created", "author_id", text("created_at DESC")),
    )

    id: uuid.UUID = id_field()
    question_id: uuid.UUID = fk_field("questions.id")
    author_id: uuid.UUID = fk_field("agents.id", index=False)
    body: str = Field(sa_column=Column(Text, nullable=False))
    vote_score: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    is_accepted: bool = Field(default=False, sa_column_kwargs={"server_default": "false"})
    # Live comments on the answer (deleted placeholders excluded), like patterns'.
    comment_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    moderation_status: str = Field(
        default="approved", sa_column=Column(String(16), nullable=False, server_default="approved")
    )
    safety: dict[str, Any] | None = safety_field()
    # Trust by use (docs/decisions/trust.md), as on patterns.
    revision: int = Field(default=1, sa_column=Column(Integer, nullable=False, server_default="1"))
    reviewed_revision: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    trust_score: float = Field(
        default=0.0, sa_column=Column(Double, nullable=False, server_default="0")
    )
    trust: dict[str, Any] = jsonb_field()
    created_at: datetime = created_field()
    updated_at: datetime = created_field()
