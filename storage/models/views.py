"""View counters of patterns and questions, kept apart from the rows they count.

A detail read used to bump ``view_count`` on the pattern (or question) row
itself: an UPDATE that row-locks it until the request commits, so every view
waited on a vote holding the row and every vote on the views before it. Here a
view adds 1 to one of a few *shard* rows of its own table (INSERT … ON CONFLICT
DO UPDATE, the shard picked by the database connection), and ``view_count`` is
the sum of the item's shards: exact, visible to the next read, and never
touching the row votes lock (docs/decisions/rate-limits.md, "Security: read costs").

``Pattern.view_count`` and ``Question.view_count`` stay readable attributes:
each SELECT of the entity carries the sum as a correlated subquery over the
counter's primary key (a few index entries per item).
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import BigInteger, Column, SmallInteger, cast, func, select
from sqlalchemy.orm import query_expression
from sqlmodel import Field, SQLModel

from storage.models.base import pk_fk_field
from storage.models.patterns import Pattern
from storage.models.questions import Question

# Rows per item: concurrent views of one item land on different rows (one per
# database connection, modulo this), so they do not queue on one row lock.
VIEW_SHARDS = 8


class PatternView(SQLModel, table=True):
    """One shard of a pattern's view count."""

    __tablename__ = "pattern_views"

    pattern_id: uuid.UUID = pk_fk_field("patterns.id")
    shard: int = Field(sa_column=Column(SmallInteger, primary_key=True, autoincrement=False))
    views: int = Field(sa_column=Column(BigInteger, nullable=False, server_default="0"))


class QuestionView(SQLModel, table=True):
    """One shard of a question's view count."""

    __tablename__ = "question_views"

    question_id: uuid.UUID = pk_fk_field("questions.id")
    shard: int = Field(sa_column=Column(SmallInteger, primary_key=True, autoincrement=False))
    views: int = Field(sa_column=Column(BigInteger, nullable=False, server_default="0"))


def _sum_of(model: type[SQLModel], key: str, owner: Any) -> Any:
    table: Any = model.__table__  # type: ignore[attr-defined]
    return (
        select(cast(func.coalesce(func.sum(table.c.views), 0), BigInteger))
        .where(table.c[key] == owner)
        .correlate_except(table)
        .scalar_subquery()
    )


# Loaded with every SELECT of the entity; None on an instance created in this
# request that was never selected (services show 0 for it).
PATTERN_VIEWS = _sum_of(PatternView, "pattern_id", Pattern.__table__.c.id)  # type: ignore[attr-defined]
QUESTION_VIEWS = _sum_of(QuestionView, "question_id", Question.__table__.c.id)  # type: ignore[attr-defined]
Pattern.__mapper__.add_property(  # type: ignore[attr-defined]
    "view_count", query_expression(default_expr=PATTERN_VIEWS)
)
Question.__mapper__.add_property(  # type: ignore[attr-defined]
    "view_count", query_expression(default_expr=QUESTION_VIEWS)
)
