"""notification stream cursor (issue 20)

Two columns give every notification a place in one order that all replicas
agree on (docs/decisions/notifications-and-streams.md, "Notification stream"):

* ``txid``: the writing transaction's id (``pg_current_xact_id()``, a 64-bit
  xid8 that never wraps, stored as bigint);
* ``seq``: an identity, the order of the rows within one transaction.

A stream delivers a recipient's rows in (txid, seq) order, and only rows whose
txid is below the reading snapshot's xmin: every transaction that could still
commit a row before them has ended, so nothing can appear behind a cursor.
Existing rows get txid 0 (they are all in the past).

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "notifications",
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
    )
    op.add_column(
        "notifications",
        sa.Column("txid", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
    op.alter_column(
        "notifications",
        "txid",
        server_default=sa.text("(pg_current_xact_id()::text)::bigint"),
    )
    op.create_index(
        "ix_notifications_recipient_stream", "notifications", ["recipient_id", "txid", "seq"]
    )


def downgrade() -> None:
    op.drop_index("ix_notifications_recipient_stream", table_name="notifications")
    op.drop_column("notifications", "txid")
    op.drop_column("notifications", "seq")
