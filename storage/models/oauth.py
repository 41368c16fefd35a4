"""OAuth 2.1 for the MCP server (docs/decisions/oauth.md): the clients that
asked, the consents pending, the grants a human gave for one of their bots,
and the codes and tokens issued under a grant. Codes and tokens are stored
only as keyed hashes (HMAC-SHA256, like API keys)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    LargeBinary,
    String,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field, SQLModel

from storage.models.base import created_field, fk_field, id_field, jsonb_field, text_array_field

CLIENT_KINDS = ("registered", "metadata_document")
TOKEN_KINDS = ("access", "refresh")


class OAuthClient(SQLModel, table=True):
    """A client: registered dynamically (RFC 7591; a uuid id), or named by the
    HTTPS URL of its Client ID Metadata Document (fetched, kept a while)."""

    __tablename__ = "oauth_clients"
    __table_args__ = (
        Index(
            "ix_oauth_clients_unused",
            "created_at",
            postgresql_where=text("exchanged_at IS NULL"),
        ),
    )

    client_id: str = Field(sa_column=Column(String(2048), primary_key=True))
    kind: str = Field(sa_column=Column(String(32), nullable=False))
    # The client's metadata as the SDK models it (OAuthClientInformationFull), no secret.
    info: dict[str, Any] = jsonb_field()
    # Keyed hash of a registered confidential client's secret (None: a public client).
    secret_hash: bytes | None = Field(default=None, sa_column=Column(LargeBinary(32)))
    created_at: datetime = created_field()
    fetched_at: datetime = created_field()
    # The first code exchange of this client (None: never used; such a client
    # is deleted a day after it was stored, docs/decisions/oauth.md).
    exchanged_at: datetime | None = Field(default=None, sa_column=Column(DateTime(timezone=True)))


class OAuthRequest(SQLModel, table=True):
    """An authorization request waiting for a human's consent (the consent
    page's ``request`` parameter)."""

    __tablename__ = "oauth_requests"
    __table_args__ = (Index("ix_oauth_requests_expires", "expires_at"),)

    id: uuid.UUID = id_field()
    client_id: str = Field(
        sa_column=Column(
            String(2048),
            ForeignKey("oauth_clients.client_id", ondelete="CASCADE"),
            nullable=False,
        )
    )
    # AuthorizationParams: redirect_uri, state, scopes, code_challenge, resource.
    params: dict[str, Any] = jsonb_field()
    created_at: datetime = created_field()
    expires_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))


class OAuthGrant(SQLModel, table=True):
    """What a human allowed one client to do as one of their bots."""

    __tablename__ = "oauth_grants"

    id: uuid.UUID = id_field()
    human_id: uuid.UUID = fk_field("agents.id")
    bot_id: uuid.UUID = fk_field("agents.id")
    client_id: str = Field(
        sa_column=Column(
            String(2048),
            ForeignKey("oauth_clients.client_id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        )
    )
    scopes: list[str] = text_array_field()
    created_at: datetime = created_field()
    revoked_at: datetime | None = Field(default=None, sa_column=Column(DateTime(timezone=True)))


class OAuthCode(SQLModel, table=True):
    """An authorization code: one exchange, a short life, bound to its PKCE
    challenge, redirect URI and resource."""

    __tablename__ = "oauth_codes"

    code_hash: bytes = Field(sa_column=Column(LargeBinary(32), primary_key=True))
    grant_id: uuid.UUID = fk_field("oauth_grants.id")
    # The tokens issued for this code share it: a replayed code revokes them.
    family_id: uuid.UUID = Field(
        default_factory=uuid.uuid4, sa_column=Column(UUID(as_uuid=True), nullable=False)
    )
    code_challenge: str = Field(sa_column=Column(String(128), nullable=False))
    redirect_uri: str = Field(sa_column=Column(Text, nullable=False))
    redirect_explicit: bool = Field(sa_column=Column(Boolean, nullable=False))
    resource: str | None = Field(default=None, sa_column=Column(Text))
    scopes: list[str] = text_array_field()
    created_at: datetime = created_field()
    expires_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    used_at: datetime | None = Field(default=None, sa_column=Column(DateTime(timezone=True)))


class OAuthToken(SQLModel, table=True):
    """An access or refresh token. A refresh is single-use: using it rotates
    the pair; presenting a used one again revokes its whole family."""

    __tablename__ = "oauth_tokens"
    __table_args__ = (
        Index("ix_oauth_tokens_family", "family_id"),
        Index("ix_oauth_tokens_expires", "expires_at"),
    )

    token_hash: bytes = Field(sa_column=Column(LargeBinary(32), primary_key=True))
    kind: str = Field(sa_column=Column(String(16), nullable=False))
    grant_id: uuid.UUID = fk_field("oauth_grants.id")
    family_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    scopes: list[str] = text_array_field()
    resource: str = Field(sa_column=Column(Text, nullable=False))
    created_at: datetime = created_field()
    expires_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    used_at: datetime | None = Field(default=None, sa_column=Column(DateTime(timezone=True)))
    revoked_at: datetime | None = Field(default=None, sa_column=Column(DateTime(timezone=True)))
