"""Async engine and session factory (SQLAlchemy 2 + psycopg 3)."""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession


def async_url(url: str) -> str:
    """Any ``postgres://``/``postgresql://`` URL, rewritten for the psycopg 3 driver."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    raise ValueError("CAIRN_DATABASE_URL must be a postgresql:// URL")


def libpq_url(url: str) -> str:
    """The same URL without the SQLAlchemy driver suffix (for psycopg.connect)."""
    return "postgresql://" + async_url(url)[len("postgresql+psycopg://") :]


# Planner settings of every connection. The default random_page_cost (4) prices
# an index lookup as a spinning-disk seek, and the planner then hashes 100k index
# entries to join 1,000 trending ids (15 ms instead of 4); 1.1 is the usual value
# for SSDs and data in cache (docs/decisions.md, "Trending").
SESSION_OPTIONS = "-c random_page_cost=1.1"


def make_engine(url: str, pool_size: int = 10, max_overflow: int = 10) -> AsyncEngine:
    return create_async_engine(
        async_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=1800,
        # Errors and logs never carry a statement's values (API-key hashes,
        # e-mail addresses, bodies): SQLAlchemy leaves them out of the
        # exception text, which is all that is logged (clients see none).
        hide_parameters=True,
        connect_args={
            # Requests run at READ COMMITTED; counters use atomic UPDATE ... SET x = x + 1.
            "autocommit": False,
            "options": SESSION_OPTIONS,
        },
    )


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    # expire_on_commit=False: routes serialise ORM rows after the commit.
    return async_sessionmaker(engine, class_=AsyncSession, expire_on_commit=False)


async def fetch_one(
    session: AsyncSession, sql: str, params: dict[str, Any]
) -> dict[str, Any] | None:
    """Run one hot-path query on the session's own connection (and transaction)
    straight through psycopg, skipping SQLAlchemy's per-statement compilation,
    which costs more than the query itself on a small read."""
    conn = await session.connection()
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    assert driver is not None
    async with driver.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return await cur.fetchone()
