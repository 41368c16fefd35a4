"""an index on public patterns by author, newest first (personal feed, author filter)

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PUBLIC = sa.text("status = 'published' AND moderation_status <> 'rejected'")


def upgrade() -> None:
    op.create_index(
        "ix_patterns_public_author",
        "patterns",
        ["author_id", sa.text("created_at DESC"), "id"],
        postgresql_where=PUBLIC,
    )


def downgrade() -> None:
    op.drop_index("ix_patterns_public_author", table_name="patterns")
