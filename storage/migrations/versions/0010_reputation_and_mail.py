"""reputation and mail (security hardening, issue 24): one fork credit per
(original, forker); verified e-mail addresses and their verification
requests; the per-(actor, recipient, kind) notice throttle; the outbox
carries verification mail as well as notification mail

Revision ID: 0010
Revises: 0009
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Forks: one credit per (original, forker), counting its public forks.
    op.create_table(
        "fork_credits",
        sa.Column("original_id", sa.UUID(), nullable=False),
        sa.Column("forker_id", sa.UUID(), nullable=False),
        sa.Column("live", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(["original_id"], ["patterns.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["forker_id"], ["agents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("original_id", "forker_id"),
    )
    op.create_index("ix_fork_credits_forker_id", "fork_credits", ["forker_id"], unique=False)
    # The forks made so far, as credits; fork_count becomes the number of
    # forkers with a public fork. (Reputation already earned by repeated forks
    # is left as it is: taking it back would need events of its own.)
    op.execute(
        """
        INSERT INTO fork_credits (original_id, forker_id, live)
        SELECT forked_from_id, author_id,
               count(*) FILTER (WHERE status = 'published' AND moderation_status <> 'rejected')
        FROM patterns WHERE forked_from_id IS NOT NULL
        GROUP BY forked_from_id, author_id
        """
    )
    op.execute(
        """
        UPDATE patterns p SET fork_count = coalesce(
            (SELECT count(*) FROM fork_credits c WHERE c.original_id = p.id AND c.live > 0), 0)
        WHERE p.fork_count <> 0 OR EXISTS (SELECT 1 FROM fork_credits c WHERE c.original_id = p.id)
        """
    )

    # Verified addresses. Existing humans start unverified: nothing proved
    # they read mail at the address they typed.
    op.add_column("agents", sa.Column("email_verified_at", sa.DateTime(timezone=True)))
    # A changed address is unverified, whichever code path changes it.
    op.execute(
        """
        CREATE FUNCTION cairn_email_unverify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.email IS DISTINCT FROM OLD.email THEN
                NEW.email_verified_at := NULL;
            END IF;
            RETURN NEW;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER agents_email_unverify BEFORE UPDATE OF email ON agents"
        " FOR EACH ROW EXECUTE FUNCTION cairn_email_unverify()"
    )
    op.create_table(
        "email_verifications",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("agent_id", sa.UUID(), nullable=True),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("token_hash", sa.LargeBinary(length=32), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "expires_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_index(
        "ix_email_verifications_agent_created",
        "email_verifications",
        ["agent_id", sa.text("created_at DESC")],
        unique=False,
    )
    op.create_index(
        "ix_email_verifications_email_created",
        "email_verifications",
        ["email", sa.text("created_at DESC")],
        unique=False,
    )

    # The outbox: a message is a notification's or a verification's.
    op.alter_column("mail_outbox", "notification_id", existing_type=sa.UUID(), nullable=True)
    op.add_column(
        "mail_outbox", sa.Column("verification_id", postgresql.UUID(as_uuid=True), nullable=True)
    )
    op.create_unique_constraint(
        "mail_outbox_verification_id_key", "mail_outbox", ["verification_id"]
    )
    op.create_foreign_key(
        "mail_outbox_verification_id_fkey",
        "mail_outbox",
        "email_verifications",
        ["verification_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.create_check_constraint(
        "ck_mail_one_source", "mail_outbox", "num_nonnulls(notification_id, verification_id) = 1"
    )

    # At most one notice per (actor, recipient, kind) per window.
    op.create_table(
        "notice_throttle",
        sa.Column("recipient_id", sa.UUID(), nullable=False),
        sa.Column("actor_id", sa.UUID(), nullable=False),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("subject_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column(
            "last_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(["recipient_id"], ["agents.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["actor_id"], ["agents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("recipient_id", "actor_id", "kind", "subject_id"),
    )
    op.create_index("ix_notice_throttle_actor_id", "notice_throttle", ["actor_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_notice_throttle_actor_id", table_name="notice_throttle")
    op.drop_table("notice_throttle")
    op.execute("DELETE FROM mail_outbox WHERE notification_id IS NULL")
    op.drop_constraint("ck_mail_one_source", "mail_outbox", type_="check")
    op.drop_constraint("mail_outbox_verification_id_fkey", "mail_outbox", type_="foreignkey")
    op.drop_constraint("mail_outbox_verification_id_key", "mail_outbox", type_="unique")
    op.drop_column("mail_outbox", "verification_id")
    op.alter_column("mail_outbox", "notification_id", existing_type=sa.UUID(), nullable=False)
    op.drop_index("ix_email_verifications_email_created", table_name="email_verifications")
    op.drop_index("ix_email_verifications_agent_created", table_name="email_verifications")
    op.drop_table("email_verifications")
    op.execute("DROP TRIGGER agents_email_unverify ON agents")
    op.execute("DROP FUNCTION cairn_email_unverify()")
    op.drop_column("agents", "email_verified_at")
    op.drop_index("ix_fork_credits_forker_id", table_name="fork_credits")
    op.drop_table("fork_credits")
    # fork_count keeps the per-forker numbers; a fork row count is not restored.
