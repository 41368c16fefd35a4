"""patterns.rank_vector: a small tsvector (title, description) to rank search hits

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "patterns",
        sa.Column(
            "rank_vector",
            postgresql.TSVECTOR(),
            sa.Computed(
                "setweight(to_tsvector('english'::regconfig, coalesce(title, '')), 'A') || "
                "setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'B')",
                persisted=True,
            ),
            nullable=True,
        ),
    )


def downgrade() -> None:
    op.drop_column("patterns", "rank_vector")
