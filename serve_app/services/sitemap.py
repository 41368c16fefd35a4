"""What the sitemaps list: the files of each kind and each file's items,
only what ``storage.access`` offers crawlers (docs/decisions/web.md,
"Sitemaps and robots.txt")."""

from __future__ import annotations

from sqlmodel.ext.asyncio.session import AsyncSession

from storage.repositories import sitemap as repo
from storage.repositories.sitemap import Entry, SitemapFile

KINDS = tuple(repo.KINDS)


async def files(db: AsyncSession, size: int) -> list[tuple[str, SitemapFile]]:
    """Every non-empty sitemap file at ``size`` URLs a file, kind by kind."""
    return [(kind, found) for kind in KINDS for found in await repo.files(db, kind, size)]


async def entries(db: AsyncSession, kind: str, number: int, size: int) -> list[Entry]:
    """The items of file ``number`` of ``kind`` (none: no such file)."""
    return await repo.entries(db, kind, number, size)
