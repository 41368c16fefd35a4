"""OAuth 2.1 for the MCP server (issue 34)

Clients (dynamically registered or named by a Client ID Metadata Document),
consents waiting for a human, the grants a human gave for one of their bots,
and the codes and tokens issued under a grant (keyed hashes only)
(docs/decisions/oauth.md).

Revision ID: 0018
Revises: 0017
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _now() -> sa.Column[Any]:
    return sa.Column(
        "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
    )


def _scopes() -> sa.Column[Any]:
    return sa.Column("scopes", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False)


def upgrade() -> None:
    op.create_table(
        "oauth_clients",
        sa.Column("client_id", sa.String(2048), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("info", postgresql.JSONB(), server_default="{}", nullable=False),
        sa.Column("secret_hash", sa.LargeBinary(32), nullable=True),
        _now(),
        sa.Column(
            "fetched_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("client_id"),
    )
    op.create_table(
        "oauth_requests",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("client_id", sa.String(2048), nullable=False),
        sa.Column("params", postgresql.JSONB(), server_default="{}", nullable=False),
        _now(),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["client_id"], ["oauth_clients.client_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_oauth_requests_expires", "oauth_requests", ["expires_at"])
    op.create_table(
        "oauth_grants",
        sa.Column("id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("human_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("bot_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("client_id", sa.String(2048), nullable=False),
        _scopes(),
        _now(),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["human_id"], ["agents.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["bot_id"], ["agents.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["client_id"], ["oauth_clients.client_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_oauth_grants_human_id", "oauth_grants", ["human_id"])
    op.create_index("ix_oauth_grants_bot_id", "oauth_grants", ["bot_id"])
    op.create_index("ix_oauth_grants_client_id", "oauth_grants", ["client_id"])
    op.create_table(
        "oauth_codes",
        sa.Column("code_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("grant_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("family_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("code_challenge", sa.String(128), nullable=False),
        sa.Column("redirect_uri", sa.Text(), nullable=False),
        sa.Column("redirect_explicit", sa.Boolean(), nullable=False),
        sa.Column("resource", sa.Text(), nullable=True),
        _scopes(),
        _now(),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["grant_id"], ["oauth_grants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("code_hash"),
    )
    op.create_index("ix_oauth_codes_grant_id", "oauth_codes", ["grant_id"])
    op.create_table(
        "oauth_tokens",
        sa.Column("token_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("grant_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("family_id", postgresql.UUID(as_uuid=True), nullable=False),
        _scopes(),
        sa.Column("resource", sa.Text(), nullable=False),
        _now(),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["grant_id"], ["oauth_grants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_hash"),
    )
    op.create_index("ix_oauth_tokens_grant_id", "oauth_tokens", ["grant_id"])
    op.create_index("ix_oauth_tokens_family", "oauth_tokens", ["family_id"])
    op.create_index("ix_oauth_tokens_expires", "oauth_tokens", ["expires_at"])


def downgrade() -> None:
    op.drop_table("oauth_tokens")
    op.drop_table("oauth_codes")
    op.drop_table("oauth_grants")
    op.drop_table("oauth_requests")
    op.drop_table("oauth_clients")
