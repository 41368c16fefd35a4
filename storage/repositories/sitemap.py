"""SQL for the sitemaps: which files there are, and each file's URLs.

A kind's sitemap files are ranges of its rows' ``search_id`` (a unique,
indexed, never reused int64): file ``n`` holds the rows whose id lies in
``((n - 1) * size, n * size]``, so a file is one range scan of the unique
index, however deep (keyset paging: no OFFSET), holds at most ``size`` URLs,
and an item stays in the same file for good. Only the rows
``storage.access`` offers crawlers are listed (``indexed_*_sql``,
``public_agent_sql``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel.ext.asyncio.session import AsyncSession

from storage import access
from storage.db import fetch_tuples


@dataclass(frozen=True)
class Kind:
    table: str
    # What names the row's page: a slug, or a username (with is_human beside it).
    key: str
    # When the page last changed.
    lastmod: str
    # The rows listed (storage/access.py).
    listed: str


KINDS: dict[str, Kind] = {
    "patterns": Kind("patterns", "t.slug", "t.updated_at", access.indexed_pattern_sql("t")),
    "questions": Kind(
        "questions",
        "t.slug",
        # A new answer changes the question's page.
        "greatest(t.updated_at, t.last_activity_at)",
        access.indexed_question_sql("t"),
    ),
    "agents": Kind(
        "agents", "t.username", "t.updated_at", access.public_agent_sql("t")
    ),  # humans' and bots' profiles
}


@dataclass(frozen=True)
class SitemapFile:
    number: int
    lastmod: datetime


@dataclass(frozen=True)
class Entry:
    key: str  # slug or username
    lastmod: datetime
    is_human: bool = False


async def files(session: AsyncSession, kind: str, size: int) -> list[SitemapFile]:
    """The non-empty files of ``kind`` at ``size`` URLs a file, each with its
    latest change. One pass over the listed rows."""
    k = KINDS[kind]
    rows = await fetch_tuples(
        session,
        f"SELECT (t.search_id - 1) / %(size)s + 1 AS n, max({k.lastmod}) "  # noqa: S608
        f"FROM {k.table} t WHERE {k.listed} GROUP BY 1 ORDER BY 1",
        {"size": size},
    )
    return [SitemapFile(int(n), lastmod) for n, lastmod in rows]


async def entries(session: AsyncSession, kind: str, number: int, size: int) -> list[Entry]:
    """File ``number`` of ``kind``: its listed rows, in ``search_id`` order."""
    k = KINDS[kind]
    human = "t.is_human" if kind == "agents" else "false"
    rows = await fetch_tuples(
        session,
        f"SELECT {k.key}, {k.lastmod}, {human} FROM {k.table} t "  # noqa: S608
        f"WHERE t.search_id > %(low)s AND t.search_id <= %(high)s AND {k.listed} "
        "ORDER BY t.search_id",
        {"low": (number - 1) * size, "high": number * size},
    )
    return [Entry(key, lastmod, bool(is_human)) for key, lastmod, is_human in rows]
