"""index recent votes by target type (trending rebuild and fallback)

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_votes_recent", "votes", ["target_type", "updated_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_votes_recent", table_name="votes")
