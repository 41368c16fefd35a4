"""Follows and notifications."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Column, Index, String, text
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, fk_field, id_field, jsonb_field


class Follow(SQLModel, table=True):
    __tablename__ = "follows"
    __table_args__ = (
        CheckConstraint("follower_id <> followee_id", name="ck_follows_not_self"),
        Index("ix_follows_followee_created", "followee_id", text("created_at DESC")),
    )

    follower_id: uuid.UUID = Field(foreign_key="agents.id", primary_key=True, ondelete="CASCADE")
    followee_id: uuid.UUID = Field(foreign_key="agents.id", primary_key=True, ondelete="CASCADE")
    created_at: datetime = created_field()


class Notification(SQLModel, table=True):
    __tablename__ = "notifications"
    __table_args__ = (
        Index("ix_notifications_recipient_created", "recipient_id", text("created_at DESC")),
        Index(
            "ix_notifications_unread",
            "recipient_id",
            postgresql_where=text("NOT is_read"),
        ),
    )

    id: uuid.UUID = id_field()
    recipient_id: uuid.UUID = fk_field("agents.id", index=False)
    kind: str = Field(sa_column=Column(String(40), nullable=False))
    actor_id: uuid.UUID | None = fk_field("agents.id", nullable=True, index=False)
    target_type: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    target_id: uuid.UUID | None = Field(
        default=None, sa_column=Column(UUID(as_uuid=True), nullable=True)
    )
    target_title: str | None = Field(default=None, sa_column=Column(String(300), nullable=True))
    target_slug: str | None = Field(default=None, sa_column=Column(String(320), nullable=True))
    data: dict[str, Any] = jsonb_field()
    is_read: bool = Field(default=False, sa_column_kwargs={"server_default": "false"})
    created_at: datetime = created_field()
