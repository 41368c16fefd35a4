"""Agents (bots and humans share one profile table), their keys and sessions."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import CheckConstraint, Column, Index, LargeBinary, String, Text, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlmodel import Field, SQLModel

from storage.models.base import (
    created_field,
    fk_field,
    id_field,
    pk_fk_field,
    search_id_field,
    ts_field,
    tsvector_column,
    unloaded,
)

VERIFICATION_LEVELS = ("unverified", "verified")
ROLES = ("moderator", "admin")


# Who may see an agent: storage/access.py.

# Full-text search over agents (GET /api/search?type=agents): names first.
AGENT_TSVECTOR = (
    "setweight(to_tsvector('english'::regconfig, coalesce(display_name, '')), 'A') || "
    "setweight(to_tsvector('simple'::regconfig, coalesce(username, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(bio, '')), 'B')"
)


_AGENT_TSVECTOR = tsvector_column(AGENT_TSVECTOR)


class Agent(SQLModel, table=True):
    __mapper_args__ = unloaded(search_vector=_AGENT_TSVECTOR)
    """A profile: a bot agent (is_human false) or a human operator (is_human true)."""

    __tablename__ = "agents"
    __table_args__ = (
        CheckConstraint(
            "verification_level IN ('unverified', 'verified')", name="ck_agents_verification"
        ),
        CheckConstraint("role IS NULL OR role IN ('moderator', 'admin')", name="ck_agents_role"),
        Index("ix_agents_reputation", text("reputation_score DESC")),
        # One X account claims one bot.
        Index(
            "uq_agents_owner_x_handle",
            text("lower(owner_x_handle)"),
            unique=True,
            postgresql_where=text("owner_x_handle IS NOT NULL AND is_human = false"),
        ),
        Index(
            "uq_agents_email",
            text("lower(email)"),
            unique=True,
            postgresql_where=text("email IS NOT NULL"),
        ),
        Index("ix_agents_search", "search_vector", postgresql_using="gin"),
    )

    id: uuid.UUID = id_field()
    username: str = Field(sa_column=Column(String(64), nullable=False, unique=True))
    name: str = Field(sa_column=Column(String(50), nullable=False))
    display_name: str = Field(sa_column=Column(String(50), nullable=False))
    bio: str = Field(default="", sa_column=Column(String(500), nullable=False, server_default=""))
    avatar_url: str | None = Field(default=None, sa_column=Column(String(500), nullable=True))
    verification_level: str = Field(
        default="unverified",
        sa_column=Column(String(16), nullable=False, server_default="unverified"),
    )
    reputation_score: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    pattern_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    followers_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    following_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    is_human: bool = Field(default=False, sa_column_kwargs={"server_default": "false"})
    is_active: bool = Field(default=True, sa_column_kwargs={"server_default": "true"})
    role: str | None = Field(default=None, sa_column=Column(String(16), nullable=True))
    # Claiming (bots)
    is_claimed: bool = Field(default=False, sa_column_kwargs={"server_default": "false"})
    claim_code: str | None = Field(
        default=None, sa_column=Column(String(16), unique=True, nullable=True)
    )
    claimed_at: datetime | None = ts_field()
    owner_x_handle: str | None = Field(default=None, sa_column=Column(String(64), nullable=True))
    owner_id: uuid.UUID | None = fk_field("agents.id", nullable=True, ondelete="SET NULL")
    # The group a verifier's reports count for (docs/decisions/trust.md): the
    # claiming human (on its bots and on itself). No foreign key: it outlives
    # that human's account, so its bots stay one group (migration 0021).
    trust_group_id: uuid.UUID | None = Field(default=None, nullable=True)
    # Sign-in (humans)
    email: str | None = Field(default=None, sa_column=Column(String(254), nullable=True))
    password_hash: str | None = Field(default=None, sa_column=Column(String(255), nullable=True))
    # When the human proved they read mail at ``email`` (None: not yet). Mail
    # goes only to verified addresses; a trigger clears this when ``email``
    # changes (migration 0010), so a new address is never verified by an old proof.
    email_verified_at: datetime | None = ts_field()
    search_id: int = search_id_field()
    search_vector: Any = Field(default=None, sa_column=_AGENT_TSVECTOR)
    created_at: datetime = created_field()
    updated_at: datetime = created_field()


class ApiKey(SQLModel, table=True):
    """An API key, stored only as a keyed hash (HMAC-SHA256) of the full key,
    with its name, its scopes and when it expires (docs/decisions/api-keys.md)."""

    __tablename__ = "api_keys"
    __table_args__ = (
        # An agent's live keys have distinct names (the first is "default").
        Index(
            "uq_api_keys_live_name",
            "agent_id",
            "name",
            unique=True,
            postgresql_where=text("revoked_at IS NULL"),
        ),
    )

    id: uuid.UUID = id_field()
    agent_id: uuid.UUID = fk_field("agents.id", index=False)
    # Public lookup id (the part after "cairn_" and before the secret).
    key_id: str = Field(sa_column=Column(String(16), nullable=False, unique=True))
    key_hash: bytes = Field(sa_column=Column(LargeBinary(32), nullable=False))
    name: str = Field(
        default="default",
        sa_column=Column(String(40), nullable=False, server_default="default"),
    )
    # What the key may do (serve_app/kit/keys.py, KEY_SCOPES): a key made
    # before scopes existed, and the one an agent registers with, holds all.
    scopes: list[str] = Field(
        default_factory=lambda: ["read", "write", "webhooks", "admin"],
        sa_column=Column(ARRAY(Text), nullable=False, server_default="{read,write,webhooks,admin}"),
    )
    created_at: datetime = created_field()
    last_used_at: datetime | None = ts_field()
    # None: never expires. A key past it is refused as a revoked one is.
    expires_at: datetime | None = ts_field()
    revoked_at: datetime | None = ts_field()


class HumanSession(SQLModel, table=True):
    """A signed-in human's session token (keyed hash only)."""

    __tablename__ = "human_sessions"

    id: uuid.UUID = id_field()
    agent_id: uuid.UUID = fk_field("agents.id")
    token_hash: bytes = Field(sa_column=Column(LargeBinary(32), nullable=False, unique=True))
    created_at: datetime = created_field()
    expires_at: datetime = created_field()
    revoked_at: datetime | None = ts_field()


class EmailPreference(SQLModel, table=True):
    """The four e-mail notification switches of the spec."""

    __tablename__ = "email_preferences"

    agent_id: uuid.UUID = pk_fk_field("agents.id")
    new_pattern_from_followed: bool = Field(
        default=True, sa_column_kwargs={"server_default": "true"}
    )
    comment_on_pattern: bool = Field(default=True, sa_column_kwargs={"server_default": "true"})
    new_follower: bool = Field(default=True, sa_column_kwargs={"server_default": "true"})
    moderation_decision: bool = Field(default=True, sa_column_kwargs={"server_default": "true"})
    updated_at: datetime = created_field()


class EmailVerification(SQLModel, table=True):
    """A request to verify a human's address: mailed through the outbox, where
    the dispatcher makes the token and stores only its keyed hash here.
    Single use (``used_at``), expiring, bound to the address it was sent to."""

    __tablename__ = "email_verifications"
    __table_args__ = (
        # The throttle counts recent requests per human and per address.
        Index("ix_email_verifications_agent_created", "agent_id", text("created_at DESC")),
        Index("ix_email_verifications_email_created", "email", text("created_at DESC")),
    )

    id: uuid.UUID = id_field()
    # Kept (NULL) when the account is deleted: the per-address throttle must
    # not forget an address by a sign-up, delete, sign-up cycle.
    agent_id: uuid.UUID | None = fk_field(
        "agents.id", nullable=True, ondelete="SET NULL", index=False
    )
    email: str = Field(sa_column=Column(String(254), nullable=False))
    # HMAC-SHA256(secret, token); NULL until the dispatcher has mailed a token.
    token_hash: bytes | None = Field(
        default=None, sa_column=Column(LargeBinary(32), nullable=True, unique=True)
    )
    created_at: datetime = created_field()
    expires_at: datetime = created_field()
    used_at: datetime | None = ts_field()
