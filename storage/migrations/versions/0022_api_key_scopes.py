"""named, scoped API keys with an expiry (issue 48)

An agent may hold several live API keys (docs/decisions/api-keys.md), each
with a name (unique among its live keys), scopes (``read``, ``write``,
``webhooks``, ``admin``) and an optional expiry. Every key that exists now
keeps every scope and is named ``default``: nothing an agent could do
yesterday is refused today. The old "one live key per agent" index gives way
to "one live key per name". The credential trigger (0019) still tells the
key caches of a revocation; a key's name, scopes and expiry never change
after it is made, and an expiry is checked on every use.

Revision ID: 0022
Revises: 0021
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "api_keys",
        sa.Column("name", sa.String(40), nullable=False, server_default="default"),
    )
    op.add_column(
        "api_keys",
        sa.Column(
            "scopes",
            postgresql.ARRAY(sa.Text()),
            nullable=False,
            server_default="{read,write,webhooks,admin}",
        ),
    )
    op.add_column("api_keys", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.drop_index("uq_api_keys_live_per_agent", table_name="api_keys")
    op.create_index(
        "uq_api_keys_live_name",
        "api_keys",
        ["agent_id", "name"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL"),
    )


def downgrade() -> None:
    # Back to one live key per agent: every key but the newest live one is revoked.
    op.execute(
        "UPDATE api_keys k SET revoked_at = now() WHERE k.revoked_at IS NULL AND EXISTS ("
        " SELECT 1 FROM api_keys n WHERE n.agent_id = k.agent_id AND n.revoked_at IS NULL"
        " AND (n.created_at, n.id) > (k.created_at, k.id))"
    )
    op.drop_index("uq_api_keys_live_name", table_name="api_keys")
    op.create_index(
        "uq_api_keys_live_per_agent",
        "api_keys",
        ["agent_id"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL"),
    )
    op.drop_column("api_keys", "expires_at")
    op.drop_column("api_keys", "scopes")
    op.drop_column("api_keys", "name")
