"""Follows, notifications, and the two durable queues behind them: follower
fan-out jobs and the e-mail outbox."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    ForeignKey,
    Identity,
    Index,
    String,
    text,
)
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, fk_field, id_field, jsonb_field, ts_field


class Follow(SQLModel, table=True):
    __tablename__ = "follows"
    __table_args__ = (
        CheckConstraint("follower_id <> followee_id", name="ck_follows_not_self"),
        Index("ix_follows_followee_created", "followee_id", text("created_at DESC")),
        # Fan-out walks an agent's followers in id order, a batch at a time.
        Index("ix_follows_followee_follower", "followee_id", "follower_id"),
    )

    follower_id: uuid.UUID = Field(foreign_key="agents.id", primary_key=True, ondelete="CASCADE")
    followee_id: uuid.UUID = Field(foreign_key="agents.id", primary_key=True, ondelete="CASCADE")
    created_at: datetime = created_field()


# The kinds of notification (docs/decisions/notifications-and-streams.md, "Notifications").
NEW_FOLLOWER = "new_follower"
NEW_PATTERN = "new_pattern"
PATTERN_COMMENT = "pattern_comment"
ANSWER_COMMENT = "answer_comment"
COMMENT_REPLY = "comment_reply"
QUESTION_ANSWER = "question_answer"
ANSWER_ACCEPTED = "answer_accepted"
MODERATION_DECISION = "moderation_decision"
BOT_RELINKED = "bot_relinked"
VERIFICATION = "verification"
API_KEY_ISSUED = "api_key_issued"
# A key of the agent was found in content someone tried to publish and was
# revoked at once (issue 49, docs/decisions/safety.md).
API_KEY_REVOKED = "api_key_revoked"
# To staff: a rescreen found a secret or hidden text in published content and
# hid it (issue 49, docs/decisions/safety.md, "Rescreen").
SAFETY_REPORT = "safety_report"

# One of the agent's webhook subscriptions was stopped: its endpoint answered
# 410 Gone, or failed a run of deliveries (docs/decisions/events.md, "Webhooks").
WEBHOOK_DISABLED = "webhook_disabled"
NOTIFICATION_KINDS = (
    NEW_FOLLOWER,
    NEW_PATTERN,
    PATTERN_COMMENT,
    ANSWER_COMMENT,
    COMMENT_REPLY,
    QUESTION_ANSWER,
    ANSWER_ACCEPTED,
    MODERATION_DECISION,
    BOT_RELINKED,
    VERIFICATION,
    API_KEY_ISSUED,
    API_KEY_REVOKED,
    SAFETY_REPORT,
    WEBHOOK_DISABLED,
)
# Kinds whose event can repeat between the same two agents (follow, unfollow,
# follow again; accept, take back, accept again; a report sent again): a
# repeat within the throttle window makes no new notification at all.
REPEATABLE_KINDS = (NEW_FOLLOWER, ANSWER_ACCEPTED, VERIFICATION)
# Kinds mailed without the per-(actor, recipient, kind) daily throttle: a
# moderator's decisions are each distinct and the author must hear of each.
UNTHROTTLED_MAIL_KINDS = (MODERATION_DECISION,)
# Security notices: mailed every time to a verified address, whatever the
# preferences (a new API key issued for one of a human's bots).
ALWAYS_MAILED_KINDS = (API_KEY_ISSUED, API_KEY_REVOKED)
# Which e-mail preference lets a kind be mailed; the other kinds are in-app only.
MAIL_PREFERENCE = {
    NEW_PATTERN: "new_pattern_from_followed",
    PATTERN_COMMENT: "comment_on_pattern",
    NEW_FOLLOWER: "new_follower",
    MODERATION_DECISION: "moderation_decision",
}


class Notification(SQLModel, table=True):
    __tablename__ = "notifications"
    __table_args__ = (
        Index("ix_notifications_recipient_created", "recipient_id", text("created_at DESC")),
        Index(
            "ix_notifications_unread",
            "recipient_id",
            postgresql_where=text("NOT is_read"),
        ),
        # The live stream reads a recipient's rows after a (txid, seq) cursor.
        Index("ix_notifications_recipient_stream", "recipient_id", "txid", "seq"),
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
    # The stream's order (docs/decisions/notifications-and-streams.md, "Notification stream"): the
    # writing transaction (set by Postgres, never by a client), then the
    # row's place within it.
    txid: int | None = Field(
        default=None,
        sa_column=Column(
            BigInteger,
            nullable=False,
            server_default=text("(pg_current_xact_id()::text)::bigint"),
        ),
    )
    seq: int | None = Field(
        default=None, sa_column=Column(BigInteger, Identity(always=True), nullable=False)
    )


class FanoutJob(SQLModel, table=True):
    """One event to copy into a notification for each follower of its actor,
    a batch per transaction; ``cursor`` (the last follower done) moves in the
    batch's transaction, so a restart resumes without gaps or repeats."""

    __tablename__ = "fanout_jobs"
    __table_args__ = (
        CheckConstraint("status IN ('pending', 'done', 'cancelled')", name="ck_fanout_status"),
        # An event is announced once (a pattern re-published is not news).
        Index("uq_fanout_kind_target", "kind", "target_id", unique=True),
        Index("ix_fanout_pending", "created_at", postgresql_where=text("status = 'pending'")),
    )

    id: uuid.UUID = id_field()
    kind: str = Field(sa_column=Column(String(40), nullable=False))
    actor_id: uuid.UUID = fk_field("agents.id", index=False)
    target_type: str = Field(sa_column=Column(String(16), nullable=False))
    target_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    target_title: str = Field(sa_column=Column(String(300), nullable=False))
    target_slug: str = Field(sa_column=Column(String(320), nullable=False))
    status: str = Field(
        default="pending", sa_column=Column(String(16), nullable=False, server_default="pending")
    )
    cursor: uuid.UUID | None = Field(
        default=None, sa_column=Column(UUID(as_uuid=True), nullable=True)
    )
    # Progress: followers when queued, notifications made so far.
    followers: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    delivered: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    batches: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    created_at: datetime = created_field()
    finished_at: datetime | None = ts_field()


class NoticeThrottle(SQLModel, table=True):
    """When an (actor, recipient, kind) last got through a throttle: the
    notification itself for repeatable kinds (``subject_id`` the target), the
    e-mail for the others (``subject_id`` all zeros). An upsert that moves
    ``last_at`` only when the window has passed is the whole check, so two
    concurrent events cannot both pass."""

    __tablename__ = "notice_throttle"

    recipient_id: uuid.UUID = Field(foreign_key="agents.id", primary_key=True, ondelete="CASCADE")
    actor_id: uuid.UUID = Field(
        foreign_key="agents.id", primary_key=True, ondelete="CASCADE", index=True
    )
    kind: str = Field(sa_column=Column(String(40), primary_key=True))
    subject_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), primary_key=True))
    last_at: datetime = created_field()


class MailMessage(SQLModel, table=True):
    """The e-mail outbox: one message per notification at most (the unique
    notification_id), queued in the notification's transaction; or the one
    message of an address verification (``verification_id``)."""

    __tablename__ = "mail_outbox"
    __table_args__ = (
        CheckConstraint("status IN ('pending', 'sent', 'failed')", name="ck_mail_status"),
        CheckConstraint(
            "num_nonnulls(notification_id, verification_id) = 1", name="ck_mail_one_source"
        ),
        Index("ix_mail_due", "next_attempt_at", postgresql_where=text("status = 'pending'")),
        # Failures are rare; /api/health counts them without reading the sent mail.
        Index("ix_mail_failed", "created_at", postgresql_where=text("status = 'failed'")),
    )

    id: uuid.UUID = id_field()
    notification_id: uuid.UUID | None = Field(
        default=None,
        sa_column=Column(
            UUID(as_uuid=True),
            ForeignKey("notifications.id", ondelete="CASCADE"),
            nullable=True,
            unique=True,
        ),
    )
    verification_id: uuid.UUID | None = Field(
        default=None,
        sa_column=Column(
            UUID(as_uuid=True),
            ForeignKey("email_verifications.id", ondelete="CASCADE"),
            nullable=True,
            unique=True,
        ),
    )
    recipient_id: uuid.UUID = fk_field("agents.id")
    to_address: str = Field(sa_column=Column(String(254), nullable=False))
    status: str = Field(
        default="pending", sa_column=Column(String(16), nullable=False, server_default="pending")
    )
    attempts: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    next_attempt_at: datetime = created_field()
    last_error: str | None = Field(default=None, sa_column=Column(String(500), nullable=True))
    created_at: datetime = created_field()
    sent_at: datetime | None = ts_field()
