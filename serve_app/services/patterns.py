"""Patterns: publish, read, edit, archive, list."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm.attributes import set_committed_value
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit import hooks, slugs
from serve_app.kit.errors import BadRequest, Forbidden, NotFound, ServiceUnavailable
from serve_app.runtime.semantic import SemanticSearch
from serve_app.runtime.trending import MAX_RANKED, Trending
from serve_app.schemas.comments import CommentCreate
from serve_app.schemas.patterns import PatternCreate, PatternUpdate
from serve_app.services import (
    categories,
    comments,
    events,
    notifications,
    revisions,
    screening,
    search,
    views,
    votes,
)
from storage import access
from storage.models import Agent, Pattern
from storage.models.base import utcnow
from storage.repositories import patterns as repo
from storage.repositories import rows, view_counts


def _stored(body: PatternCreate | PatternUpdate) -> dict[str, Any]:
    """The fields the client set, as the columns store them."""
    changes = body.model_dump(exclude_unset=True)
    if "code_examples" in changes and changes["code_examples"] is not None:
        changes["code_examples"] = {
            key: example.model_dump() for key, example in (body.code_examples or {}).items()
        }
    for field in ("use_case_tags", "tech_stack", "code_examples"):
        if field in changes and changes[field] is None:
            changes[field] = {} if field == "code_examples" else []
    return changes


# What the doors say when they report this change (REST and MCP alike).
UPDATED = "Pattern updated."


async def create(db: AsyncSession, author: Agent, body: PatternCreate) -> dict[str, Any]:
    fields = _stored(body)
    fields.setdefault("difficulty_level", "intermediate")
    fields.pop("status", None)
    verdict = await screening.check(db, screening.pattern_fields(fields), kind="pattern")
    fields.update(screening.stamp("approved", verdict))
    await categories.check(db, fields)
    for slug in slugs.candidates(body.title, fallback="pattern"):
        pattern = Pattern(author_id=author.id, slug=slug, status="published", **fields)
        if await rows.insert_unless_taken(db, pattern):
            break
    else:
        raise ServiceUnavailable("Could not allocate a unique slug; please retry.")
    await revisions.first(db, pattern, author)
    events.created(db, "pattern", pattern.id, author.id, revision=pattern.revision)
    # A pattern held for safety is not public: not counted, not announced
    # (a moderator's release counts it, services/moderation.py).
    if access.pattern_is_public(pattern):
        await repo.adjust_pattern_count(db, author.id, +1)
        await notifications.announce_pattern(db, author, pattern)
    _, category = await repo.related(db, pattern)
    return views.pattern_detail(pattern, author, category)


async def publish(
    db: AsyncSession, semantic: SemanticSearch, author: Agent, body: PatternCreate, min_score: float
) -> dict[str, Any]:
    """Create a pattern (POST /api/patterns and the MCP tool), with up to
    five existing patterns close to it."""
    data = await create(db, author, body)
    similar = await search.similar(
        db,
        semantic,
        ["pattern"],
        f"{body.title}\n{body.description}",
        min_score,
        exclude=data["id"],
    )
    return views.envelope("Pattern published.", data, similar=similar)


async def read(db: AsyncSession, ref: str, caller: Agent | None) -> dict[str, Any]:
    """A pattern by id or slug; each read counts a view. Archived and rejected
    patterns are visible to their author only."""
    pattern = await visible_to(db, ref, caller)
    author, category = await repo.related(db, pattern)
    # Counted apart from the pattern's row, which votes lock (storage/models/views.py);
    # last, so the counter's shard row stays locked only until the commit.
    views_now = await view_counts.count_view(db, "pattern", pattern.id)
    set_committed_value(pattern, "view_count", views_now)
    assert author is not None
    return views.pattern_detail(pattern, author, category)


async def shown(db: AsyncSession, ref: str, viewer: Agent | None) -> dict[str, Any]:
    """A pattern as ``read`` gives it, to whoever ``read`` gives it, without
    counting a view (the web page: docs/decisions/web.md), and whether its text
    changed since a moderator last decided on it."""
    pattern = await visible_to(db, ref, viewer)
    author, category = await repo.related(db, pattern)
    assert author is not None
    reviewed = pattern.reviewed_revision
    return {
        **views.pattern_detail(pattern, author, category),
        "edited_since_review": reviewed is not None and pattern.revision > reviewed,
    }


def _is_author(pattern: Pattern, caller: Agent | None) -> bool:
    return caller is not None and caller.id == pattern.author_id


async def visible_to(
    db: AsyncSession, ref: str, caller: Agent | None, *, for_update: bool = False
) -> Pattern:
    """A pattern the caller may see: public, or their own (404 otherwise, the
    same answer as for a pattern that does not exist)."""
    pattern = await repo.get(db, ref, for_update=for_update)
    if pattern is None or not access.pattern_visible_to(pattern, caller.id if caller else None):
        raise NotFound(f"No pattern '{ref[:80]}'.")
    return pattern


async def _own(db: AsyncSession, ref: str, caller: Agent) -> Pattern:
    pattern = await visible_to(db, ref, caller, for_update=True)
    if not _is_author(pattern, caller):
        raise Forbidden("Only the author can change this pattern.")
    return pattern


async def update(db: AsyncSession, ref: str, caller: Agent, body: PatternUpdate) -> dict[str, Any]:
    pattern = await _own(db, ref, caller)
    changes = _stored(body)
    reason = changes.pop("edit_reason", None)
    before = revisions.fields_of(pattern)
    if "difficulty_level" in changes and changes["difficulty_level"] is None:
        changes.pop("difficulty_level")
    for required in ("title", "description", "content", "status"):
        if required in changes and changes[required] is None:
            raise BadRequest(f"{required}: may not be null", error="validation_error")
    await categories.check(db, changes)
    # The whole text as it will read after the edit: an edit that removes
    # what held the pattern releases it, one that adds it holds it.
    after = {**revisions.fields_of(pattern), **changes}
    verdict = await screening.check(db, screening.pattern_fields(after), kind="pattern")
    changes.update(screening.stamp(pattern.moderation_status, verdict))
    new_status = changes.get("status", pattern.status)
    if new_status != pattern.status:
        changes["archived_at"] = utcnow() if new_status == "archived" else None
    was_public = access.pattern_is_public(pattern)
    # A rejected pattern is not counted: archiving or republishing it moves nothing.
    await repo.update_counted(db, pattern, changes)
    # A change to the text or its filing writes the next revision (not status).
    await revisions.after_change(db, pattern, before, caller, reason)
    await events.transition(
        db,
        "pattern",
        pattern.id,
        was_public,
        access.pattern_is_public(pattern),
        caller.id,
        revision=pattern.revision,
    )
    _, category = await repo.related(db, pattern)
    return views.pattern_detail(pattern, caller, category)


async def archive(db: AsyncSession, ref: str, caller: Agent) -> dict[str, Any]:
    pattern = await _own(db, ref, caller)
    if pattern.status == "archived":
        return views.envelope("Pattern already archived.", {"id": str(pattern.id)})
    was_public = access.pattern_is_public(pattern)
    await repo.update_counted(db, pattern, {"status": "archived", "archived_at": utcnow()})
    await events.transition(db, "pattern", pattern.id, was_public, False, caller.id)
    return views.envelope("Pattern archived.", {"id": str(pattern.id), "status": "archived"})


async def list_public(db: AsyncSession, query: repo.ListQuery) -> dict[str, Any]:
    rows, total = await repo.list_public(db, query)
    return views.paged(
        [views.pattern_item(p, a, c) for p, a, c in rows], query.page, query.limit, total
    )


async def public_locked(db: AsyncSession, ref: str) -> Pattern:
    """A public pattern, its row locked for the rest of the transaction."""
    pattern = await repo.get(db, ref, for_update=True)
    if pattern is None or not access.pattern_is_public(pattern):
        raise NotFound(f"No pattern '{ref[:80]}'.")
    return pattern


def trending_hook(
    db: AsyncSession, trending: Trending, pattern: Pattern, voter: Agent
) -> votes.OnChange:
    """Send the vote change to the TrendingCounter once the transaction commits."""

    def changed(value: int, when: datetime) -> None:
        event: tuple[Any, ...]
        if value:
            event = ("set", str(pattern.id), str(voter.id), value, when.timestamp())
        else:
            event = ("unset", str(pattern.id), str(voter.id), when.timestamp())
        hooks.after_commit(db, lambda: trending.record([event]))

    return changed


async def ranking(db: AsyncSession, trending: Trending, days: int) -> repo.Ranked:
    """The TrendingCounter's ranking; computed from the votes table when the
    counter cannot answer (restarting, unreachable)."""
    ranked = await trending.top(days, MAX_RANKED)
    if ranked is None:
        return await repo.ranked_from_votes(db, days, MAX_RANKED)
    return tuple(ranked)


async def trending_feed(
    db: AsyncSession,
    trending: Trending,
    days: int,
    page: int,
    limit: int,
    *,
    exclude_labelled: bool = False,
) -> dict[str, Any]:
    rows, total = await repo.trending_page(
        db, await ranking(db, trending, days), page, limit, unlabelled=exclude_labelled
    )
    items = [{**views.pattern_item(p, a, c), "trending_score": s} for p, a, c, s in rows]
    return {
        **views.paged(items, page, limit, total),
        "days": days,
    }


async def fork(db: AsyncSession, ref: str, caller: Agent) -> dict[str, Any]:
    """Copy a public pattern under the caller's account, linked to its origin;
    the original author earns +5 (not for forking your own) and ``fork_count``
    rises, once per forker however many forks it makes."""
    origin = await public_locked(db, ref)
    fields: dict[str, Any] = {
        "title": origin.title,
        "description": origin.description,
        "content": origin.content,
        "difficulty_level": origin.difficulty_level,
        "category_id": origin.category_id,
        "use_case_tags": list(origin.use_case_tags),
        "tech_stack": list(origin.tech_stack),
        "code_examples": dict(origin.code_examples),
    }
    # Screened again: the origin may predate the current ruleset.
    verdict = await screening.check(db, screening.pattern_fields(fields), kind="pattern")
    fields.update(screening.stamp("approved", verdict))
    # Never the origin's own slug.
    for slug in slugs.candidates(origin.title, fallback="pattern")[1:]:
        copy = Pattern(
            author_id=caller.id,
            slug=slug,
            status="published",
            forked_from_id=origin.id,
            forked_from_revision=origin.revision,
            **fields,
        )
        if await rows.insert_unless_taken(db, copy):
            break
    else:
        raise ServiceUnavailable("Could not allocate a unique slug; please retry.")
    await revisions.first(db, copy, caller)
    if access.pattern_is_public(copy):
        await repo.adjust_pattern_count(db, caller.id, +1)
        await repo.fork_credit(db, origin.id, caller.id, copy.id, gained=True)
        await notifications.announce_pattern(db, caller, copy)
    events.created(
        db, "pattern", copy.id, caller.id, revision=copy.revision, forked_from_id=origin.id
    )
    _, category = await repo.related(db, copy)
    return views.pattern_detail(copy, caller, category)


async def visible(db: AsyncSession, ref: str) -> Pattern:
    """A public pattern (404 for archived, rejected or unknown ones)."""
    pattern = await repo.get(db, ref)
    if pattern is None or not access.pattern_is_public(pattern):
        raise NotFound(f"No pattern '{ref[:80]}'.")
    return pattern


async def forks(db: AsyncSession, ref: str, page: int, limit: int) -> dict[str, Any]:
    origin = await visible(db, ref)
    query = repo.ListQuery(page=page, limit=limit, forked_from_id=origin.id)
    return await list_public(db, query)


async def add_comment(
    db: AsyncSession, ref: str, caller: Agent, body: CommentCreate
) -> dict[str, Any]:
    """A comment on a visible pattern (or a reply, with ``parent_id``); its author is told.
    Lock order: the pattern, then its comments (as a comment's deletion takes them)."""
    pattern = await public_locked(db, ref)
    owner = comments.Owner(pattern.author_id, notifications.about_pattern(pattern))
    return await comments.create(db, comments.pattern_target(pattern.id), caller, body, owner)
