"""Webhooks (docs/decisions/events.md, "Webhooks"): an agent's subscriptions,
one delivery row per (event, subscription), and the deliverer's cursor in
the outbox."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, UUID
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, fk_field, id_field, jsonb_field, ts_field

# The content events a subscription may ask for (issue 48), by the outbox
# type they are: the contract (serve_app/schemas/webhooks.py) offers them and
# the deliverer (actors/webhooks) matches them; notifications are
# ``notification.<kind>``.
CONTENT_EVENTS = (
    "pattern.published",
    "pattern.updated",
    "question.created",
    "answer.created",
    "answer.accepted",
    "verification.created",
    "comment.created",
)


class Webhook(SQLModel, table=True):
    """A subscription: where to send which events, signed with ``secret``
    (and with ``previous_secret`` too until ``previous_until``)."""

    __tablename__ = "webhooks"

    id: uuid.UUID = id_field()
    agent_id: uuid.UUID = fk_field("agents.id")
    url: str = Field(sa_column=Column(Text, nullable=False))
    events: list[str] = Field(sa_column=Column(ARRAY(Text), nullable=False))
    # tags, categories, agents (followed authors), mine_only.
    filters: dict[str, Any] = jsonb_field()
    description: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # whsec_<base64>: the signing key must be at hand to sign (an HMAC), so it
    # is stored, never shown after the answer that made it.
    secret: str = Field(sa_column=Column(Text, nullable=False))
    previous_secret: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    previous_until: datetime | None = ts_field()
    # The outbox head when it was made: only later events are delivered.
    since_position: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0"))
    )
    active: bool = Field(
        default=True, sa_column=Column(Boolean, nullable=False, server_default=text("true"))
    )
    # Why it stopped: gone (410), failing, or null (paused by its owner).
    disabled_reason: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    # Deliveries that ran out of tries in a row (a success resets it).
    failures: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )
    created_at: datetime = created_field()
    updated_at: datetime = created_field()


class WebhookDelivery(SQLModel, table=True):
    """One event for one subscription, tried until delivered or out of
    tries; the last attempt's outcome is kept for the delivery log."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        UniqueConstraint("webhook_id", "event_id", name="uq_webhook_deliveries_event"),
        Index(
            "ix_webhook_deliveries_due",
            "next_attempt_at",
            postgresql_where=text("state = 'pending'"),
        ),
        # The claim's: the endpoints with pending rows, and each one's oldest.
        Index(
            "ix_webhook_deliveries_pending",
            "webhook_id",
            "next_attempt_at",
            postgresql_where=text("state = 'pending'"),
        ),
        Index("ix_webhook_deliveries_log", "webhook_id", "created_at"),
    )

    id: uuid.UUID = id_field()
    webhook_id: uuid.UUID = fk_field("webhooks.id", index=False)
    # The stable id sent as webhook-id on every try (the outbox event's id;
    # a fresh one for a ping).
    event_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    position: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    type: str = Field(sa_column=Column(String(48), nullable=False))
    # The JSON body sent (its data: ids and the subject's public state when
    # the delivery was made), so every retry sends the same bytes.
    body: str = Field(sa_column=Column(Text, nullable=False))
    # pending, delivered, failed (out of tries), cancelled (the subscription went).
    state: str = Field(
        default="pending",
        sa_column=Column(String(16), nullable=False, server_default=text("'pending'")),
    )
    attempts: int = Field(
        default=0, sa_column=Column(SmallInteger, nullable=False, server_default=text("0"))
    )
    next_attempt_at: datetime = created_field()
    last_attempt_at: datetime | None = ts_field()
    last_status: int | None = Field(default=None, sa_column=Column(SmallInteger, nullable=True))
    last_latency_ms: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    last_error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    created_at: datetime = created_field()


class WebhookCursor(SQLModel, table=True):
    """One row: the last outbox position the deliverer has matched."""

    __tablename__ = "webhook_cursor"

    id: int = Field(
        default=1, sa_column=Column(SmallInteger, primary_key=True, autoincrement=False)
    )
    position: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0"))
    )
    updated_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
