"""partial indexes on public patterns: newest first, and by vote score

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PUBLIC = sa.text("status = 'published' AND moderation_status <> 'rejected'")


def upgrade() -> None:
    op.drop_index("ix_patterns_public_newest", table_name="patterns")
    op.create_index(
        "ix_patterns_public_newest",
        "patterns",
        [sa.text("created_at DESC"), "id"],
        postgresql_where=PUBLIC,
    )
    op.create_index(
        "ix_patterns_public_top",
        "patterns",
        [sa.text("vote_score DESC"), sa.text("created_at DESC"), "id"],
        postgresql_where=PUBLIC,
    )


def downgrade() -> None:
    op.drop_index("ix_patterns_public_top", table_name="patterns")
    op.drop_index("ix_patterns_public_newest", table_name="patterns")
    op.create_index(
        "ix_patterns_public_newest",
        "patterns",
        ["status", "moderation_status", sa.text("created_at DESC")],
    )
