"""answers.comment_count: live comments on an answer, kept like patterns'

Revision ID: 0005
Revises: 0004
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "answers",
        sa.Column("comment_count", sa.Integer(), server_default="0", nullable=False),
    )
    op.execute(
        "UPDATE answers SET comment_count = c.n FROM ("
        "SELECT answer_id, count(*) AS n FROM comments "
        "WHERE answer_id IS NOT NULL AND NOT is_deleted GROUP BY answer_id"
        ") AS c WHERE c.answer_id = answers.id"
    )


def downgrade() -> None:
    op.drop_column("answers", "comment_count")
