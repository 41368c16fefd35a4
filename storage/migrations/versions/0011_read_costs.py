"""read costs (security hardening, issue 24): view counters apart from the rows

Views move from patterns.view_count / questions.view_count into sharded
counter tables, so counting a view never locks the row that votes update.
Existing counts become shard 0 of each item.

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (counter table, key column, counted table)
COUNTERS = (("pattern_views", "pattern_id", "patterns"), ("question_views", "question_id", "questions"))


def upgrade() -> None:
    for table, key, counted in COUNTERS:
        op.create_table(
            table,
            sa.Column(key, postgresql.UUID(as_uuid=True), nullable=False),
            sa.Column("shard", sa.SmallInteger(), autoincrement=False, nullable=False),
            sa.Column("views", sa.BigInteger(), server_default="0", nullable=False),
            sa.ForeignKeyConstraint([key], [f"{counted}.id"], ondelete="CASCADE"),
            sa.PrimaryKeyConstraint(key, "shard"),
        )
        op.execute(
            f"INSERT INTO {table} ({key}, shard, views) "  # noqa: S608 - names are ours
            f"SELECT id, 0, view_count FROM {counted} WHERE view_count > 0"
        )
        op.drop_column(counted, "view_count")


def downgrade() -> None:
    for table, key, counted in COUNTERS:
        op.add_column(
            counted,
            sa.Column("view_count", sa.Integer(), server_default="0", nullable=False),
        )
        op.execute(
            f"UPDATE {counted} t SET view_count = LEAST(v.total, 2147483647) "  # noqa: S608
            f"FROM (SELECT {key}, sum(views) AS total FROM {table} GROUP BY {key}) v "
            f"WHERE v.{key} = t.id"
        )
        op.drop_table(table)
