"""model versions: tuned embedding models stored in Postgres (issue 50)

``model_versions`` (one row a tuned model, its card), ``model_chunks`` (its
files as a tar archive in chunks, as ``upload_chunks``), and
``model_activations`` (each switch of the model search uses, for ``cairn
models rollback``), started with the model active now.

Revision ID: 0024
Revises: 0023
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "model_versions",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("base", sa.String(200), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("chunks", sa.Integer(), nullable=False),
        sa.Column("complete", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("accepted", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("card", postgresql.JSONB(), nullable=False, server_default="{}"),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.create_table(
        "model_chunks",
        sa.Column(
            "name",
            sa.String(200),
            sa.ForeignKey("model_versions.name", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.CheckConstraint("seq >= 0", name="ck_model_chunks_seq"),
    )
    op.create_table(
        "model_activations",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), primary_key=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column(
            "activated_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.now(),
        ),
    )
    op.execute(
        "INSERT INTO model_activations (model, activated_at) "
        "SELECT model, activated_at FROM search_model WHERE id = 1"
    )


def downgrade() -> None:
    op.drop_table("model_activations")
    op.drop_table("model_chunks")
    op.drop_table("model_versions")
