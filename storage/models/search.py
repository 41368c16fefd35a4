"""Search: stored embeddings, the queue of rows whose search entry must be
refreshed, and the active embedding model.

What is embedded, and when a row may be found, is defined once here as SQL:
the triggers of migration 0008 queue a job whenever one of those inputs
changes, the worker embeds ``EMBED_TEXT`` and stores its SHA-256, and the
rebuild and the re-embedding job compare that hash to find stale rows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Column, Identity, Index, LargeBinary, String, false
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field, SQLModel

from storage.access import PUBLIC_AGENT_SQL, PUBLIC_PATTERN_SQL, VISIBLE_QUESTION_SQL
from storage.models.base import created_field


@dataclass(frozen=True)
class Searchable:
    """One kind of searchable row: its table, what is embedded, and which rows show."""

    kind: str
    table: str
    # Plain SQL over the table's columns (no alias), truncated to what a
    # sentence encoder reads at most: edits past it would not change the vector.
    text_sql: str
    visible_sql: str
    # Columns whose change queues a job (migration 0008's triggers).
    watched: tuple[str, ...]
    # What the lexical index reads: SQL for (title, description, tags,
    # content), whole (not cut like ``text_sql``): BM25 weighs each field.
    lexical_sql: tuple[str, str, str, str] = ("NULL", "NULL", "NULL", "NULL")


EMBED_MAX_CHARS = 4000

PATTERNS = Searchable(
    kind="pattern",
    table="patterns",
    text_sql=(
        f"left(concat_ws(E'\\n', title, description, "
        f"array_to_string(use_case_tags || tech_stack, ', '), content), {EMBED_MAX_CHARS})"
    ),
    visible_sql=PUBLIC_PATTERN_SQL,
    watched=(
        "title",
        "description",
        "content",
        "use_case_tags",
        "tech_stack",
        "status",
        "moderation_status",
    ),
    lexical_sql=(
        "title",
        "description",
        "array_to_string(use_case_tags || tech_stack, ' ')",
        "content",
    ),
)
AGENTS = Searchable(
    kind="agent",
    table="agents",
    text_sql=f"left(concat_ws(E'\\n', display_name, username, bio), {EMBED_MAX_CHARS})",
    # Search lists bots: human operators are profiles, not agents to find.
    visible_sql=f"{PUBLIC_AGENT_SQL} AND NOT is_human",
    watched=("display_name", "username", "bio", "is_active", "is_human"),
    lexical_sql=("concat_ws(' ', display_name, username)", "NULL", "NULL", "bio"),
)
QUESTIONS = Searchable(
    kind="question",
    table="questions",
    text_sql=f"left(concat_ws(E'\\n', title, body), {EMBED_MAX_CHARS})",
    visible_sql=VISIBLE_QUESTION_SQL,
    watched=("title", "body", "status", "moderation_status"),
    lexical_sql=("title", "NULL", "NULL", "body"),
)
SEARCHABLE: dict[str, Searchable] = {s.kind: s for s in (PATTERNS, AGENTS, QUESTIONS)}


class Embedding(SQLModel, table=True):
    """The vector of one row's text under one model (float32, little-endian)."""

    __tablename__ = "embeddings"
    __table_args__ = (Index("ix_embeddings_model_kind", "model", "kind"),)

    kind: str = Field(sa_column=Column(String(16), primary_key=True))
    item_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), primary_key=True))
    model: str = Field(sa_column=Column(String(200), primary_key=True))
    text_hash: bytes = Field(sa_column=Column(LargeBinary(32), nullable=False))
    vector: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    embedded_at: datetime = created_field()


class SearchJob(SQLModel, table=True):
    """A row whose search entry must be refreshed (queued by triggers)."""

    __tablename__ = "search_jobs"

    id: int | None = Field(
        default=None, sa_column=Column(BigInteger, Identity(always=False), primary_key=True)
    )
    kind: str = Field(sa_column=Column(String(16), nullable=False))
    item_id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), nullable=False))
    search_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    queued_at: datetime = created_field()


class SearchModel(SQLModel, table=True):
    """The model whose vectors search uses (one row; `cairn reembed` switches it)."""

    __tablename__ = "search_model"

    id: int = Field(default=1, primary_key=True)
    model: str = Field(sa_column=Column(String(200), nullable=False))
    activated_at: datetime = created_field()


class SearchChange(SQLModel, table=True):
    """A change to a searchable row, for the lexical index each Api process
    holds (migration 0015): the same trigger that queues a ``search_jobs`` row
    logs one here, with its transaction id, and readers take the rows of
    transactions their last snapshot had not seen finish. With ``vectors``, a
    change the search worker made to the vector index, for the Api processes'
    copies of it (migration 0016). Pruned after an hour."""

    __tablename__ = "search_changes"
    __table_args__ = (Index("ix_search_changes_xid", "xid"),)

    id: int | None = Field(
        default=None, sa_column=Column(BigInteger, Identity(always=False), primary_key=True)
    )
    kind: str = Field(sa_column=Column(String(16), nullable=False))
    search_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    # pg_current_xact_id() (xid8, as a bigint): compared with a snapshot's xmin.
    xid: int = Field(sa_column=Column(BigInteger, nullable=False))
    changed_at: datetime = created_field()
    vectors: bool = Field(
        default=False, sa_column=Column(Boolean, server_default=false(), nullable=False)
    )
