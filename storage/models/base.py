"""Column helpers shared by the tables (each call makes a fresh Column)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Column, Computed, DateTime, ForeignKey, Identity, Text, func
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR, UUID
from sqlalchemy.orm import deferred
from sqlmodel import Field


def utcnow() -> datetime:
    return datetime.now(UTC)


def id_field() -> Any:
    return Field(default_factory=uuid.uuid4, sa_column=Column(UUID(as_uuid=True), primary_key=True))


def created_field() -> Any:
    return Field(
        default_factory=utcnow,
        sa_column=Column(DateTime(timezone=True), nullable=False, server_default=func.now()),
    )


def ts_field(nullable: bool = True) -> Any:
    if nullable:
        return Field(default=None, sa_column=Column(DateTime(timezone=True), nullable=True))
    return created_field()


def fk_field(
    target: str, *, nullable: bool = False, ondelete: str = "CASCADE", index: bool = True
) -> Any:
    return Field(
        default=None if nullable else ...,
        sa_column=Column(
            UUID(as_uuid=True),
            ForeignKey(target, ondelete=ondelete),
            nullable=nullable,
            index=index,
        ),
    )


def pk_fk_field(target: str) -> Any:
    """A UUID column that is both (part of) the primary key and a cascading FK."""
    return Field(
        sa_column=Column(
            UUID(as_uuid=True), ForeignKey(target, ondelete="CASCADE"), primary_key=True
        )
    )


def text_array_field() -> Any:
    return Field(
        default_factory=list,
        sa_column=Column(ARRAY(Text), nullable=False, server_default="{}"),
    )


def jsonb_field() -> Any:
    return Field(
        default_factory=dict,
        sa_column=Column(JSONB, nullable=False, server_default="{}"),
    )


def safety_field() -> Any:
    """What the content screen found on the item's last write (issue 49,
    docs/decisions/safety.md): labels, reasons, screened_at, ruleset_version;
    null for rows written before screening."""
    return Field(default=None, sa_column=Column(JSONB, nullable=True))


def search_id_field() -> Any:
    """The row's id in the FAISS index: a stable int64 (FAISS ids cannot be UUIDs)."""
    return Field(
        default=None,
        sa_column=Column(BigInteger, Identity(always=False), nullable=False, unique=True),
    )


def tsvector_column(expression: str) -> Column[Any]:
    """A ``tsvector`` Postgres computes from the row and stores (for its GIN
    index). Give it to ``Field(sa_column=...)`` and to ``unloaded``."""
    return Column(TSVECTOR, Computed(expression, persisted=True))


def unloaded(**columns: Column[Any]) -> dict[str, Any]:
    """``__mapper_args__`` that keep these columns out of every ORM load:
    queries still filter and rank on them in SQL, but no Python code reads
    them, and loading them is most of the cost of reading a row (Postgres
    prints each tsvector as text, the driver decodes it: 2.7 against 0.95 ms
    for 50 patterns at 100,000, docs/benchmarks.md "Search latency at
    100,000 patterns")."""
    return {"properties": {name: deferred(column) for name, column in columns.items()}}
