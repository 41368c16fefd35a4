"""Row operations every table uses the same way: atomic counters, idempotent
link rows (bookmarks, collection entries, follows), inserts that may clash on a
unique slug, and pages that carry their own count."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, delete, func, literal_column, or_, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel import SQLModel, col, select
from sqlmodel.ext.asyncio.session import AsyncSession

# Every table with counters has an ``id`` primary key; getattr because the
# SQLModel base class does not declare it.
ID = "id"
SLUG = "slug"
Row = TypeVar("Row", bound=SQLModel)


def unlabelled(safety: Any) -> ColumnElement[bool]:
    """Rows whose ``safety`` record carries no labels (``exclude_labelled``,
    docs/decisions/safety.md); rows written before screening count as
    unlabelled."""
    return or_(col(safety).is_(None), func.jsonb_array_length(col(safety)["labels"]) == 0)


@cache
def columns(model: type[SQLModel]) -> tuple[str, ...]:
    """The table's column names (ours, never input: safe to put in SQL text);
    cached, as the key check reads them on every request."""
    return tuple(c.name for c in model.__table__.columns)  # type: ignore[attr-defined]


@cache
def loaded_columns(model: type[SQLModel]) -> tuple[str, ...]:
    """The columns an ORM load of the table reads: all but the deferred ones
    (the search tsvectors, ``models.base.unloaded``), which no Python code reads."""
    attrs = model.__mapper__.attrs  # type: ignore[attr-defined]
    return tuple(
        c for c in columns(model) if c not in attrs or not getattr(attrs[c], "deferred", False)
    )


def aliased_columns(alias: str, model: type[SQLModel]) -> str:
    """``a.id AS a_id, a.username AS a_username, …``: one table's loaded
    columns in a join, named so that ``from_aliased`` can take them back out
    of the row."""
    return ", ".join(f"{alias}.{c} AS {alias}_{c}" for c in loaded_columns(model))


def detached(model: type[Row], values: Mapping[str, Any]) -> Row:
    """A detached ``model`` instance holding ``values`` (column name → value),
    built the way the ORM builds a loaded row: the instance made without
    ``__init__``, its attributes put in place, no change history. Twenty
    times cheaper than ``model(**values)``, whose per-attribute events cost
    about 60 µs for an agent row (the key check builds two rows a request).
    ``values`` names every column."""
    obj: Row = model.__mapper__.class_manager.new_instance()  # type: ignore[attr-defined]
    obj.__dict__.update(values)
    object.__setattr__(obj, "__pydantic_fields_set__", set(values))
    return obj


def from_aliased(row: Mapping[str, Any], alias: str, model: type[Row]) -> Row:
    """The detached ``model`` instance whose columns a row carries as ``alias_*``
    (a deferred column, which the row leaves out, as None)."""
    return detached(model, {c: row.get(f"{alias}_{c}") for c in columns(model)})


async def by_id(
    session: AsyncSession, model: type[Row], row_id: uuid.UUID, *, for_update: bool = False
) -> Row | None:
    """A row by primary key; ``for_update`` locks it and refreshes the session's copy."""
    statement = select(model).where(col(getattr(model, ID)) == row_id)
    if for_update:
        statement = locking(statement)
    return (await session.exec(statement)).first()


def id_or_slug(model: type[SQLModel], ref: str) -> Any:
    """The condition for a row named by its id (a UUID) or its slug (any case)."""
    try:
        return col(getattr(model, ID)) == uuid.UUID(ref)
    except ValueError:
        return col(getattr(model, SLUG)) == ref.lower()


async def by_ref(
    session: AsyncSession, model: type[Row], ref: str, *, for_update: bool = False
) -> Row | None:
    """A row by id or slug; ``for_update`` locks it and refreshes the session's copy."""
    statement = select(model).where(id_or_slug(model, ref))
    if for_update:
        statement = locking(statement)
    return (await session.exec(statement)).first()


def locking(statement: Any) -> Any:
    """``statement`` as SELECT … FOR NO KEY UPDATE whose rows overwrite what the
    session already holds: a row read earlier without the lock may have changed
    since. No caller changes a key, so the weaker mode serialises the writers
    all the same while letting rows that merely reference the locked one be
    inserted meanwhile (a view counter's first shard of a pattern takes a key
    share lock on it: docs/decisions/rate-limits.md, "Security: read costs")."""
    return statement.with_for_update(key_share=True).execution_options(populate_existing=True)


async def add_to_counter(
    session: AsyncSession,
    model: type[SQLModel],
    row_id: uuid.UUID,
    column: str,
    delta: int,
    **also: Any,
) -> int:
    """Atomically add ``delta`` to one counter column of a row (setting the
    columns in ``also`` in the same UPDATE); returns the new value."""
    counter = getattr(model, column)
    result = await session.exec(
        update(model)
        .where(col(getattr(model, ID)) == row_id)
        .values({column: counter + delta, **also})
        .returning(counter)
    )
    return int(result.scalar_one())


async def add_to_loaded_counter(
    session: AsyncSession, row: SQLModel, column: str, delta: int, **also: Any
) -> int:
    """``add_to_counter`` on a row already loaded in the session, whose attributes
    then show the new values without being marked changed (no second UPDATE at
    commit)."""
    value = await add_to_counter(session, type(row), getattr(row, ID), column, delta, **also)
    for name, given in {column: value, **also}.items():
        set_committed_value(row, name, given)
    return value


async def insert_new(session: AsyncSession, model: type[SQLModel], **values: Any) -> bool:
    """Insert a row unless it exists (a unique key conflicts); True if it was new."""
    result = await session.exec(
        insert(model).values(**values).on_conflict_do_nothing().returning(literal_column("1"))
    )
    return result.first() is not None


async def exists_matching(session: AsyncSession, model: type[SQLModel], **values: Any) -> bool:
    """Whether a row whose columns equal ``values`` exists."""
    result: Any = await session.exec(
        select(literal_column("1"))
        .select_from(model)
        .where(*(col(getattr(model, name)) == value for name, value in values.items()))
        .limit(1)
    )
    return result.first() is not None


async def delete_matching(session: AsyncSession, model: type[SQLModel], **values: Any) -> bool:
    """Delete the rows whose columns equal ``values``; True if any was there."""
    result = await session.exec(
        delete(model)
        .where(*(col(getattr(model, name)) == value for name, value in values.items()))
        .returning(literal_column("1"))
    )
    return result.first() is not None


async def insert_unless_taken(session: AsyncSession, row: SQLModel) -> bool:
    """Insert inside a savepoint; False if a unique key (a slug) was taken, so
    the caller can retry with another value."""
    try:
        async with session.begin_nested():
            session.add(row)
            await session.flush()
    except IntegrityError:
        return False
    return True


async def counted_page(
    session: AsyncSession, page: Any, count: Any, offset: int, limit: int
) -> tuple[list[Any], int]:
    """Run ``page``, whose last column is ``count(*) OVER ()``, and return its rows
    and the total; past the last page no row carries the total, so ``count`` runs."""
    hits = list((await session.exec(page.offset(offset).limit(limit))).all())
    if hits:
        return hits, int(hits[-1][-1])
    return hits, int((await session.exec(count)).one()) if offset else 0
