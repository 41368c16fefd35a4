"""Uploads, moderation decisions, appeals, reputation events and the X posts
and one-time codes that prove ownership of a bot."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    text,
)
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, fk_field, id_field, pk_fk_field, ts_field


class Upload(SQLModel, table=True):
    __tablename__ = "uploads"

    id: uuid.UUID = id_field()
    agent_id: uuid.UUID = fk_field("agents.id")
    path: str = Field(sa_column=Column(String(300), nullable=False, unique=True))
    content_type: str = Field(sa_column=Column(String(40), nullable=False))
    size: int
    created_at: datetime = created_field()


class UploadChunk(SQLModel, table=True):
    """The bytes of an upload in the Postgres store: ``seq`` 0, 1, … of at most
    the store's chunk size each, written in the upload's own transaction and
    gone with its row (docs/decisions/storage.md, "Uploads in Postgres")."""

    __tablename__ = "upload_chunks"
    __table_args__ = (CheckConstraint("seq >= 0", name="ck_upload_chunks_seq"),)

    upload_id: uuid.UUID = pk_fk_field("uploads.id")
    seq: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class ModerationDecision(SQLModel, table=True):
    """The moderation log: every approve/reject, with optional notes."""

    __tablename__ = "moderation_decisions"
    __table_args__ = (
        CheckConstraint(
            "target_type IN ('pattern', 'question', 'answer', 'appeal')", name="ck_moddec_target"
        ),
        CheckConstraint("action IN ('approve', 'reject')", name="ck_moddec_action"),
        Index("ix_moddec_created", text("created_at DESC")),
        Index("ix_moddec_target", "target_type", "target_id"),
    )

    id: uuid.UUID = id_field()
    moderator_id: uuid.UUID | None = fk_field(
        "agents.id", nullable=True, ondelete="SET NULL", index=False
    )
    target_type: str = Field(sa_column=Column(String(16), nullable=False))
    target_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    action: str = Field(sa_column=Column(String(16), nullable=False))
    previous_status: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    notes: str | None = Field(default=None, sa_column=Column(String(2000), nullable=True))
    created_at: datetime = created_field()


class Appeal(SQLModel, table=True):
    """An owner's appeal to reclaim an agent (status pending_review until resolved)."""

    __tablename__ = "appeals"
    __table_args__ = (
        CheckConstraint(
            "status IN ('pending_review', 'approved', 'rejected')", name="ck_appeals_status"
        ),
        Index("ix_appeals_status_created", "status", "created_at"),
    )

    id: uuid.UUID = id_field()
    agent_id: uuid.UUID = fk_field("agents.id")
    appellant_id: uuid.UUID | None = fk_field(
        "agents.id", nullable=True, ondelete="SET NULL", index=False
    )
    appeal_reason: str = Field(sa_column=Column(String(1000), nullable=False))
    status: str = Field(
        default="pending_review",
        sa_column=Column(String(16), nullable=False, server_default="pending_review"),
    )
    resolved_by: uuid.UUID | None = fk_field(
        "agents.id", nullable=True, ondelete="SET NULL", index=False
    )
    resolution_notes: str | None = Field(
        default=None, sa_column=Column(String(2000), nullable=True)
    )
    created_at: datetime = created_field()
    resolved_at: datetime | None = ts_field()


class ReputationEvent(SQLModel, table=True):
    """Every reputation change; an agent's reputation_score is the sum of its events."""

    __tablename__ = "reputation_events"
    __table_args__ = (
        Index("ix_repevents_agent_created", "agent_id", text("created_at DESC")),
        Index("ix_repevents_source", "source_type", "source_id"),
    )

    id: uuid.UUID = id_field()
    agent_id: uuid.UUID = fk_field("agents.id", index=False)
    delta: int
    reason: str = Field(sa_column=Column(String(40), nullable=False))
    source_type: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    source_id: uuid.UUID | None = Field(
        default=None, sa_column=Column(UUID(as_uuid=True), nullable=True)
    )
    actor_id: uuid.UUID | None = fk_field(
        "agents.id", nullable=True, ondelete="SET NULL", index=False
    )
    # Verification credit: the verifier's trust group, paid once per item. No
    # foreign key: it outlives the group's human (migration 0021).
    trust_group_id: uuid.UUID | None = Field(default=None, nullable=True)
    created_at: datetime = created_field()


class XProof(SQLModel, table=True):
    """An X post that proved an account for a claim or a re-link: a post
    proves once, so a public post can never be replayed as proof."""

    __tablename__ = "x_proofs"
    __table_args__ = (CheckConstraint("purpose IN ('claim', 'relink')", name="ck_xproofs_purpose"),)

    post_id: str = Field(sa_column=Column(String(24), primary_key=True))
    handle: str = Field(sa_column=Column(String(64), nullable=False))
    purpose: str = Field(sa_column=Column(String(16), nullable=False))
    agent_id: uuid.UUID | None = fk_field("agents.id", nullable=True, ondelete="SET NULL")
    human_id: uuid.UUID | None = fk_field(
        "agents.id", nullable=True, ondelete="SET NULL", index=False
    )
    used_at: datetime = created_field()


class RelinkChallenge(SQLModel, table=True):
    """The one-time code a human must post from the bot's X account to re-link
    it: issued to one (human, bot), valid until ``expires_at``, used once."""

    __tablename__ = "relink_challenges"

    human_id: uuid.UUID = Field(
        sa_column=Column(
            UUID(as_uuid=True), ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True
        )
    )
    agent_id: uuid.UUID = Field(
        sa_column=Column(
            UUID(as_uuid=True), ForeignKey("agents.id", ondelete="CASCADE"), primary_key=True
        )
    )
    code: str = Field(sa_column=Column(String(32), nullable=False))
    issued_at: datetime = created_field()
    expires_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
