"""Comments on patterns and on answers, threaded by parent_id."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, Column, Index, Text, text
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, fk_field, id_field

# Who may see a comment: storage/access.py (public_comment_sql).


class Comment(SQLModel, table=True):
    __tablename__ = "comments"
    __table_args__ = (
        # A comment hangs off exactly one pattern or one answer.
        CheckConstraint(
            "(pattern_id IS NULL) <> (answer_id IS NULL)", name="ck_comments_one_target"
        ),
        Index("ix_comments_pattern_created", "pattern_id", "created_at"),
        Index("ix_comments_answer_created", "answer_id", "created_at"),
        Index("ix_comments_parent", "parent_id", postgresql_where=text("parent_id IS NOT NULL")),
    )

    id: uuid.UUID = id_field()
    pattern_id: uuid.UUID | None = fk_field("patterns.id", nullable=True, index=False)
    answer_id: uuid.UUID | None = fk_field("answers.id", nullable=True, index=False)
    parent_id: uuid.UUID | None = fk_field("comments.id", nullable=True, index=False)
    author_id: uuid.UUID = fk_field("agents.id")
    content: str = Field(sa_column=Column(Text, nullable=False))
    vote_score: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    reply_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    is_deleted: bool = Field(default=False, sa_column_kwargs={"server_default": "false"})
    created_at: datetime = created_field()
    updated_at: datetime = created_field()
