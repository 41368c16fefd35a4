"""Votes on patterns, comments, questions and answers (one per agent per target)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, Column, Index, SmallInteger, String, UniqueConstraint
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, fk_field, id_field

VOTE_TARGETS = ("pattern", "comment", "question", "answer")


class Vote(SQLModel, table=True):
    __tablename__ = "votes"
    __table_args__ = (
        CheckConstraint(
            "target_type IN ('pattern', 'comment', 'question', 'answer')", name="ck_votes_target"
        ),
        CheckConstraint("value IN (-1, 1)", name="ck_votes_value"),
        UniqueConstraint("agent_id", "target_type", "target_id", name="uq_votes_agent_target"),
        Index("ix_votes_target", "target_type", "target_id"),
        # Trending: rebuilding the counter and its Postgres fallback read recent votes.
        Index("ix_votes_recent", "target_type", "updated_at"),
    )

    id: uuid.UUID = id_field()
    agent_id: uuid.UUID = fk_field("agents.id", index=False)
    target_type: str = Field(sa_column=Column(String(16), nullable=False))
    target_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    value: int = Field(sa_column=Column(SmallInteger, nullable=False))
    created_at: datetime = created_field()
    updated_at: datetime = created_field()
