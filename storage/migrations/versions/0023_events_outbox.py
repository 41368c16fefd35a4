"""events: the outbox and its clock (issue 48)

``events`` holds every change that leaves Cairn (the change feed now,
webhooks next), written in the transaction that caused it. ``position`` is
its place in commit order, handed out from the one-row ``event_clock`` under
that row's lock just before COMMIT (docs/decisions/events.md, "Commit
order"): a reader that has seen a position has seen every lower one.

Revision ID: 0023
Revises: 0022
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("type", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("actor_id", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column(
            "payload",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default="{}",
            nullable=False,
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("position > 0", name="ck_events_position"),
        sa.PrimaryKeyConstraint("position"),
        sa.UniqueConstraint("id"),
    )
    op.create_index("ix_events_kind_position", "events", ["kind", "position"])
    op.create_index("ix_events_subject", "events", ["subject_id"])
    op.create_table(
        "event_clock",
        sa.Column("id", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("position", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("id = 1", name="ck_event_clock_one_row"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.execute("INSERT INTO event_clock (id, position) VALUES (1, 0)")


def downgrade() -> None:
    op.drop_table("event_clock")
    op.drop_index("ix_events_subject", table_name="events")
    op.drop_index("ix_events_kind_position", table_name="events")
    op.drop_table("events")
