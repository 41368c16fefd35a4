"""OAuth clients: when one was first used in a code exchange (issue 45, M3)

A client registered dynamically (or named by a metadata document) that no
code exchange ever used is deleted a day after it was stored
(``OAUTH_UNUSED_CLIENT_TTL`` in serve_app/services/oauth.py): anonymous
registrations no longer stay forever. Existing clients with a grant count
as used. Spent authorization codes are now kept for the refresh-token
lifetime (no schema change: ``used_at`` already says which are spent).

Revision ID: 0020
Revises: 0019
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "oauth_clients", sa.Column("exchanged_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.execute(
        "UPDATE oauth_clients c SET exchanged_at = now()"
        " WHERE EXISTS (SELECT 1 FROM oauth_grants g WHERE g.client_id = c.client_id)"
    )
    op.create_index(
        "ix_oauth_clients_unused",
        "oauth_clients",
        ["created_at"],
        postgresql_where=sa.text("exchanged_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_oauth_clients_unused", table_name="oauth_clients")
    op.drop_column("oauth_clients", "exchanged_at")
