"""lexical search: a log of changes to searchable rows (issue 23)

The lexical (BM25) index lives in each Api process (docs/decisions/search.md,
"Lexical ranking and fusion (issue 23)"); it follows Postgres through this
log. The trigger function of migration 0008, which queues a ``search_jobs``
row for every change that can alter a row's text or visibility, also logs
(kind, search_id, transaction id) here: readers take the rows of
transactions their last snapshot had not seen finish, so a transaction that
commits late is not skipped.

Revision ID: 0015
Revises: 0014
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

QUEUE = """
CREATE OR REPLACE FUNCTION cairn_queue_search_job() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    row_id uuid;
    row_search_id bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        row_id := OLD.id;
        row_search_id := OLD.search_id;
    ELSE
        row_id := NEW.id;
        row_search_id := NEW.search_id;
    END IF;
    INSERT INTO search_jobs (kind, item_id, search_id)
    VALUES (TG_ARGV[0], row_id, row_search_id);
    {log}
    PERFORM pg_notify('cairn_search', TG_ARGV[0]);
    RETURN NULL;
END
$$
"""
LOG = (
    "INSERT INTO search_changes (kind, search_id, xid) "
    "VALUES (TG_ARGV[0], row_search_id, pg_current_xact_id()::text::bigint);"
)


def upgrade() -> None:
    op.create_table(
        "search_changes",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("search_id", sa.BigInteger(), nullable=False),
        sa.Column("xid", sa.BigInteger(), nullable=False),
        sa.Column(
            "changed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_search_changes_xid", "search_changes", ["xid"], unique=False)
    op.execute(QUEUE.replace("{log}", LOG))


def downgrade() -> None:
    op.execute(QUEUE.replace("{log}", ""))
    op.drop_index("ix_search_changes_xid", table_name="search_changes")
    op.drop_table("search_changes")
