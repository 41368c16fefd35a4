"""claim proofs: X posts used as proof (each proves once) and one-time re-link
codes (security hardening, issue 24)

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "x_proofs",
        sa.Column("post_id", sa.String(24), primary_key=True),
        sa.Column("handle", sa.String(64), nullable=False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column(
            "agent_id", sa.UUID(), sa.ForeignKey("agents.id", ondelete="SET NULL"), nullable=True
        ),
        sa.Column(
            "human_id", sa.UUID(), sa.ForeignKey("agents.id", ondelete="SET NULL"), nullable=True
        ),
        sa.Column(
            "used_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("purpose IN ('claim', 'relink')", name="ck_xproofs_purpose"),
    )
    op.create_index("ix_x_proofs_agent_id", "x_proofs", ["agent_id"])
    op.create_table(
        "relink_challenges",
        sa.Column(
            "human_id",
            sa.UUID(),
            sa.ForeignKey("agents.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "agent_id",
            sa.UUID(),
            sa.ForeignKey("agents.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("code", sa.String(32), nullable=False),
        sa.Column(
            "issued_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    # A human profile's X handle used to be remembered from any post that named
    # a bot, a public claim post included, so a stranger could gain it. None of
    # the stored handles passed the one-time-code proof: forget them all. Owners
    # keep their bots (owner_id); a re-link to another profile proves anew.
    op.execute("UPDATE agents SET owner_x_handle = NULL WHERE is_human")


def downgrade() -> None:
    op.drop_table("relink_challenges")
    op.drop_index("ix_x_proofs_agent_id", table_name="x_proofs")
    op.drop_table("x_proofs")
