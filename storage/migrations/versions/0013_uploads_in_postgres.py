"""uploads stored in Postgres (issue 22)

The bytes of an upload as rows of at most 256 KiB (``upload_chunks``),
written in the upload's transaction and deleted with its row, so every node
of a cluster reads the same images (docs/decisions/storage.md, "Uploads in
Postgres"). Files already in STATE_DIR/uploads are moved in by
``cairn uploads migrate`` (also run by ``cairn run``), not here: a migration
may run where that folder is not.

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "upload_chunks",
        sa.Column("upload_id", sa.UUID(), nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.CheckConstraint("seq >= 0", name="ck_upload_chunks_seq"),
        sa.ForeignKeyConstraint(["upload_id"], ["uploads.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("upload_id", "seq"),
    )
    # Images are compressed already: store them out of line without trying
    # pglz on every chunk (an SVG loses little by it).
    op.execute("ALTER TABLE upload_chunks ALTER COLUMN data SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.drop_table("upload_chunks")
