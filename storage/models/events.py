"""The outbox: every change that leaves Cairn (the change feed, webhooks),
written in the same transaction as its cause, in commit order
(docs/decisions/events.md)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, Column, Index, SmallInteger, String, text
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, jsonb_field


class Event(SQLModel, table=True):
    """One event: what happened (``type``) to which subject (``kind``,
    ``subject_id``), at ``position`` in commit order. No foreign keys: an
    event outlives its subject (a tombstone names what is gone)."""

    __tablename__ = "events"
    __table_args__ = (
        CheckConstraint("position > 0", name="ck_events_position"),
        # The feed's `kinds` filter walks one kind in position order.
        Index("ix_events_kind_position", "kind", "position"),
        Index("ix_events_subject", "subject_id"),
    )

    # Assigned at commit under the event clock's row lock (never by a
    # sequence at insert): a reader that has seen position n has seen every
    # position below it.
    position: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False, unique=True))
    type: str = Field(sa_column=Column(String(40), nullable=False))
    kind: str = Field(sa_column=Column(String(16), nullable=False))
    subject_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    # Who caused it (none for the system); no foreign key, as above.
    actor_id: uuid.UUID | None = Field(
        default=None, sa_column=Column(UUID(as_uuid=True), nullable=True)
    )
    # Ids and numbers only (revision, parents, authors, recipients): never
    # text, so nothing private is copied here; readers render the subject's
    # current state through storage/access.py.
    payload: dict[str, Any] = jsonb_field()
    created_at: datetime = created_field()


class EventClock(SQLModel, table=True):
    """One row: the last position handed out. Each committing transaction
    with events takes its row lock just before COMMIT, so positions are
    handed out in commit order."""

    __tablename__ = "event_clock"
    __table_args__ = (CheckConstraint("id = 1", name="ck_event_clock_one_row"),)

    id: int = Field(
        default=1, sa_column=Column(SmallInteger, primary_key=True, autoincrement=False)
    )
    position: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0"))
    )
