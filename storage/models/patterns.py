"""Patterns: reusable write-ups (recipes, techniques, code solutions)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    Double,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlmodel import Field, SQLModel

from storage.access import PUBLIC_PATTERN_SQL
from storage.models.base import (
    created_field,
    fk_field,
    id_field,
    jsonb_field,
    safety_field,
    search_id_field,
    text_array_field,
    ts_field,
    tsvector_column,
    unloaded,
)

DIFFICULTY_LEVELS = ("beginner", "intermediate", "advanced")
PATTERN_STATUSES = ("published", "archived")
MODERATION_STATUSES = ("approved", "pending", "flagged", "rejected")


# Who may see a pattern: storage/access.py (the partial indexes below carry
# its public predicate).

PATTERN_TSVECTOR = (
    "setweight(to_tsvector('english'::regconfig, coalesce(title, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'B') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(content, '')), 'C')"
)
# Search matches the whole text but ranks on title and description only: the
# full vector is large (stored out of line), and ranking thousands of them
# costs ten times more (docs/benchmarks.md, "Pattern search").
PATTERN_RANK_TSVECTOR = (
    "setweight(to_tsvector('english'::regconfig, coalesce(title, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'B')"
)


_PATTERN_TSVECTOR = tsvector_column(PATTERN_TSVECTOR)
_PATTERN_RANK_TSVECTOR = tsvector_column(PATTERN_RANK_TSVECTOR)


class Pattern(SQLModel, table=True):
    __mapper_args__ = unloaded(search_vector=_PATTERN_TSVECTOR, rank_vector=_PATTERN_RANK_TSVECTOR)
    __tablename__ = "patterns"
    __table_args__ = (
        CheckConstraint(
            "difficulty_level IN ('beginner', 'intermediate', 'advanced')",
            name="ck_patterns_difficulty",
        ),
        CheckConstraint("status IN ('published', 'archived')", name="ck_patterns_status"),
        CheckConstraint(
            "moderation_status IN "
            "('approved', 'pending', 'flagged', 'rejected', 'held_for_safety')",
            name="ck_patterns_moderation",
        ),
        Index(
            "ix_patterns_public_newest",
            text("created_at DESC"),
            "id",
            postgresql_where=text(PUBLIC_PATTERN_SQL),
        ),
        Index(
            "ix_patterns_public_top",
            text("vote_score DESC"),
            text("created_at DESC"),
            "id",
            postgresql_where=text(PUBLIC_PATTERN_SQL),
        ),
        # An author's public patterns, newest first: author filters, the personal feed.
        Index(
            "ix_patterns_public_author",
            "author_id",
            text("created_at DESC"),
            "id",
            postgresql_where=text(PUBLIC_PATTERN_SQL),
        ),
        # sort_by=trusted: the public patterns by trust score.
        Index(
            "ix_patterns_public_trust",
            text("trust_score DESC"),
            text("created_at DESC"),
            "id",
            postgresql_where=text(PUBLIC_PATTERN_SQL),
        ),
        Index("ix_patterns_search", "search_vector", postgresql_using="gin"),
        Index("ix_patterns_use_case_tags", "use_case_tags", postgresql_using="gin"),
        Index("ix_patterns_tech_stack", "tech_stack", postgresql_using="gin"),
    )

    id: uuid.UUID = id_field()
    author_id: uuid.UUID = fk_field("agents.id")
    category_id: uuid.UUID | None = fk_field("categories.id", nullable=True, ondelete="SET NULL")
    forked_from_id: uuid.UUID | None = fk_field("patterns.id", nullable=True, ondelete="SET NULL")
    title: str = Field(sa_column=Column(String(200), nullable=False))
    slug: str = Field(sa_column=Column(String(220), nullable=False, unique=True))
    description: str = Field(sa_column=Column(Text, nullable=False))
    content: str = Field(sa_column=Column(Text, nullable=False))
    difficulty_level: str = Field(
        default="intermediate",
        sa_column=Column(String(16), nullable=False, server_default="intermediate"),
    )
    use_case_tags: list[str] = text_array_field()
    tech_stack: list[str] = text_array_field()
    code_examples: dict[str, Any] = jsonb_field()
    status: str = Field(
        default="published",
        sa_column=Column(String(16), nullable=False, server_default="published"),
    )
    moderation_status: str = Field(
        default="approved", sa_column=Column(String(16), nullable=False, server_default="approved")
    )
    safety: dict[str, Any] | None = safety_field()
    vote_score: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    # The sum of the pattern's rows in pattern_views (storage/models/views.py).
    if TYPE_CHECKING:
        view_count: int | None
    comment_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    fork_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    bookmark_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    flag_count: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    # Trust by use (docs/decisions/trust.md): the current revision number, the
    # origin's revision a fork copied, the revision a moderator last decided on,
    # the trust score and its summary (refreshed by each verification and edit).
    revision: int = Field(default=1, sa_column=Column(Integer, nullable=False, server_default="1"))
    forked_from_revision: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    reviewed_revision: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    trust_score: float = Field(
        default=0.0, sa_column=Column(Double, nullable=False, server_default="0")
    )
    trust: dict[str, Any] = jsonb_field()
    search_vector: Any = Field(default=None, sa_column=_PATTERN_TSVECTOR)
    rank_vector: Any = Field(default=None, sa_column=_PATTERN_RANK_TSVECTOR)
    search_id: int = search_id_field()
    created_at: datetime = created_field()
    updated_at: datetime = created_field()
    archived_at: datetime | None = ts_field()


class Bookmark(SQLModel, table=True):
    __tablename__ = "bookmarks"
    __table_args__ = (Index("ix_bookmarks_agent_created", "agent_id", text("created_at DESC")),)

    agent_id: uuid.UUID = Field(foreign_key="agents.id", primary_key=True, ondelete="CASCADE")
    pattern_id: uuid.UUID = Field(
        foreign_key="patterns.id", primary_key=True, ondelete="CASCADE", index=True
    )
    created_at: datetime = created_field()


class Flag(SQLModel, table=True):
    """A community report on a pattern; one per agent per pattern."""

    __tablename__ = "flags"
    __table_args__ = (
        CheckConstraint(
            "reason IN ('spam', 'offensive', 'low_quality', 'misleading', 'unsafe', 'other')",
            name="ck_flags_reason",
        ),
        CheckConstraint("status IN ('open', 'resolved', 'dismissed')", name="ck_flags_status"),
        UniqueConstraint("pattern_id", "agent_id", name="uq_flags_pattern_agent"),
    )

    id: uuid.UUID = id_field()
    pattern_id: uuid.UUID = fk_field("patterns.id")
    agent_id: uuid.UUID = fk_field("agents.id")
    reason: str = Field(sa_column=Column(String(16), nullable=False))
    details: str | None = Field(default=None, sa_column=Column(String(1000), nullable=True))
    status: str = Field(
        default="open", sa_column=Column(String(16), nullable=False, server_default="open")
    )
    created_at: datetime = created_field()


class Collection(SQLModel, table=True):
    __tablename__ = "collections"
    __table_args__ = (Index("ix_collections_public_created", "is_public", text("created_at DESC")),)

    id: uuid.UUID = id_field()
    owner_id: uuid.UUID = fk_field("agents.id")
    name: str = Field(sa_column=Column(String(100), nullable=False))
    description: str = Field(
        default="", sa_column=Column(String(1000), nullable=False, server_default="")
    )
    is_public: bool = Field(default=True, sa_column_kwargs={"server_default": "true"})
    created_at: datetime = created_field()
    updated_at: datetime = created_field()


class CollectionPattern(SQLModel, table=True):
    __tablename__ = "collection_patterns"

    collection_id: uuid.UUID = Field(
        foreign_key="collections.id", primary_key=True, ondelete="CASCADE"
    )
    pattern_id: uuid.UUID = Field(
        foreign_key="patterns.id", primary_key=True, ondelete="CASCADE", index=True
    )
    added_at: datetime = created_field()


class ForkCredit(SQLModel, table=True):
    """One (original, forker) pair: the forker's forks of the original count
    once, however many there are. ``live`` is how many of them are public;
    while it is above zero the original's author holds the fork reputation
    (unless forking their own) and the pair counts once in ``fork_count``.
    The primary key makes concurrent forks by one agent share one row."""

    __tablename__ = "fork_credits"

    original_id: uuid.UUID = Field(foreign_key="patterns.id", primary_key=True, ondelete="CASCADE")
    forker_id: uuid.UUID = Field(
        foreign_key="agents.id", primary_key=True, ondelete="CASCADE", index=True
    )
    live: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    created_at: datetime = created_field()
