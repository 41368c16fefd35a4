"""follower fan-out jobs, the e-mail outbox, and follows by followee in id order

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_follows_followee_follower", "follows", ["followee_id", "follower_id"], unique=False
    )
    op.create_table(
        "fanout_jobs",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("actor_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("target_type", sa.String(length=16), nullable=False),
        sa.Column("target_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("target_title", sa.String(length=300), nullable=False),
        sa.Column("target_slug", sa.String(length=320), nullable=False),
        sa.Column("status", sa.String(length=16), server_default="pending", nullable=False),
        sa.Column("cursor", postgresql.UUID(as_uuid=True), nullable=True),
        sa.Column("followers", sa.Integer(), server_default="0", nullable=False),
        sa.Column("delivered", sa.Integer(), server_default="0", nullable=False),
        sa.Column("batches", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('pending', 'done', 'cancelled')", name="ck_fanout_status"),
        sa.ForeignKeyConstraint(["actor_id"], ["agents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("uq_fanout_kind_target", "fanout_jobs", ["kind", "target_id"], unique=True)
    op.create_index(
        "ix_fanout_pending",
        "fanout_jobs",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_table(
        "mail_outbox",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("notification_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("recipient_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("to_address", sa.String(length=254), nullable=False),
        sa.Column("status", sa.String(length=16), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "next_attempt_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("status IN ('pending', 'sent', 'failed')", name="ck_mail_status"),
        sa.ForeignKeyConstraint(["notification_id"], ["notifications.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["recipient_id"], ["agents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("notification_id"),
    )
    op.create_index("ix_mail_outbox_recipient_id", "mail_outbox", ["recipient_id"], unique=False)
    op.create_index(
        "ix_mail_due",
        "mail_outbox",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_mail_failed",
        "mail_outbox",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text("status = 'failed'"),
    )


def downgrade() -> None:
    op.drop_index("ix_mail_failed", table_name="mail_outbox")
    op.drop_index("ix_mail_due", table_name="mail_outbox")
    op.drop_index("ix_mail_outbox_recipient_id", table_name="mail_outbox")
    op.drop_table("mail_outbox")
    op.drop_index("ix_fanout_pending", table_name="fanout_jobs")
    op.drop_index("uq_fanout_kind_target", table_name="fanout_jobs")
    op.drop_table("fanout_jobs")
    op.drop_index("ix_follows_followee_follower", table_name="follows")
