"""webhook deliveries: an index for the per-endpoint claim (issue 48)

``ix_webhook_deliveries_pending`` on (webhook_id, next_attempt_at) of the
pending rows: the deliverer's claim skips through it to the endpoints with
pending deliveries and takes each one's oldest due rows, no more than the
endpoint has free slots (docs/decisions/events.md, "Webhooks").

Revision ID: 0027
Revises: 0026
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_webhook_deliveries_pending",
        "webhook_deliveries",
        ["webhook_id", "next_attempt_at"],
        postgresql_where=sa.text("state = 'pending'"),
    )


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_pending", table_name="webhook_deliveries")
