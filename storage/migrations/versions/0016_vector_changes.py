"""vector changes: the search worker logs what it changed in the vector index
(issue 21)

Each Api process may hold its own copy of the FAISS indexes
(serve_app/runtime/index_copies/vectors.py), so a semantic search needs no hop to the VectorIndex
deployment. The copies follow the VectorIndex through ``search_changes``:
the worker logs, in the transaction that stores the vectors, one row per
index entry it adds, replaces or removes, with ``vectors`` true. The rows
the triggers log (migration 0015) keep ``vectors`` false; each reader takes
only its own.

Revision ID: 0016
Revises: 0015
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "search_changes",
        sa.Column("vectors", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("search_changes", "vectors")
