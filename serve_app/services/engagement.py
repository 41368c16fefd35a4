"""Bookmarks and community flags on patterns."""

from __future__ import annotations

from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import Conflict, Forbidden, NotFound
from serve_app.schemas.flags import FlagIn
from serve_app.services import views
from serve_app.services.patterns import public_locked, visible_to
from storage import access
from storage.models import Agent
from storage.repositories import engagement as repo
from storage.repositories import patterns as pattern_repo

FLAGS_FOR_REVIEW = 3


async def bookmark(db: AsyncSession, ref: str, caller: Agent) -> tuple[bool, dict[str, Any]]:
    """Bookmark a pattern the caller can see; (created, body). Bookmarking
    twice is harmless."""
    pattern = await visible_to(db, ref, caller)
    created = await repo.add_bookmark(db, caller.id, pattern.id)
    if created:
        await pattern_repo.add_to_counter(db, pattern.id, "bookmark_count", +1)
    message = "Pattern bookmarked." if created else "Already bookmarked."
    return created, views.envelope(message, {"pattern_id": str(pattern.id), "bookmarked": True})


async def unbookmark(db: AsyncSession, ref: str, caller: Agent) -> dict[str, Any]:
    """Remove a bookmark; harmless if absent. A pattern hidden since it was
    bookmarked (archived, rejected) is a 404 like an unknown one, except to
    the holder of a bookmark on it, who may still remove that bookmark."""
    pattern = await pattern_repo.get(db, ref)
    if pattern is None or not (
        access.pattern_visible_to(pattern, caller.id)
        or await repo.has_bookmark(db, caller.id, pattern.id)
    ):
        raise NotFound(f"No pattern '{ref[:80]}'.")
    if await repo.remove_bookmark(db, caller.id, pattern.id):
        await pattern_repo.add_to_counter(db, pattern.id, "bookmark_count", -1)
    return views.envelope("Bookmark removed.", {"pattern_id": str(pattern.id), "bookmarked": False})


async def bookmarks(db: AsyncSession, caller: Agent, page: int, limit: int) -> dict[str, Any]:
    rows, total = await repo.bookmarks_of(db, caller.id, page, limit)
    items = [
        {**views.pattern_item(p, a, c), "bookmarked_at": views.iso(b.created_at)}
        for p, a, c, b in rows
    ]
    return views.paged(items, page, limit, total)


async def flag(db: AsyncSession, ref: str, caller: Agent, body: FlagIn) -> dict[str, Any]:
    """One flag per agent per pattern; the third open one puts it in the
    moderators' flagged queue. Flags a moderator settled (dismissed when the
    pattern was approved) do not count again: it takes three new reports to
    send it back (docs/decisions/resources.md, "Bookmarks and flags")."""
    pattern = await public_locked(db, ref)
    if pattern.author_id == caller.id:
        raise Forbidden("You cannot flag your own pattern.", error="own_content")
    created = await repo.add_flag(db, caller.id, pattern.id, body.reason, body.details)
    if created is None:
        raise Conflict("You have already flagged this pattern.", error="already_flagged")
    await pattern_repo.add_to_counter(db, pattern.id, "flag_count", +1)
    if (
        pattern.moderation_status == "approved"
        and await repo.open_flags(db, pattern.id) >= FLAGS_FOR_REVIEW
    ):
        await pattern_repo.apply_update(db, pattern, {"moderation_status": "flagged"})
    return views.envelope(
        "Thank you: the pattern was flagged for review.",
        {
            "pattern_id": str(pattern.id),
            "reason": created.reason,
            "created_at": views.iso(created.created_at),
        },
    )


async def flag_status(db: AsyncSession, ref: str, caller: Agent) -> dict[str, Any]:
    """Whether the caller flagged a pattern they can see (404 otherwise)."""
    pattern = await visible_to(db, ref, caller)
    existing = await repo.flag_of(db, caller.id, pattern.id)
    return {
        "data": {
            "pattern_id": str(pattern.id),
            "flagged": existing is not None,
            "reason": existing.reason if existing else None,
            "created_at": views.iso(existing.created_at) if existing else None,
        }
    }
