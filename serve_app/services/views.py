"""How rows are shown to clients (the field lists of the spec)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from serve_app.kit import trust as trust_kit
from serve_app.kit.errors import BadRequest
from serve_app.kit.licensing import CONTENT_LICENSE
from storage import access
from storage.models import (
    Agent,
    Answer,
    Category,
    Collection,
    Comment,
    Pattern,
    Question,
    Revision,
    Verification,
)
from storage.repositories import revisions as revision_repo
from storage.repositories.patterns import ListedAuthor, ListedCategory, ListedPattern


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


_NO_DATA: Any = object()


def envelope(message: str, data: Any = _NO_DATA, **extra: Any) -> dict[str, Any]:
    """The one envelope of an answer that reports a change: ``message`` (what
    happened, in words a client can show), then ``data`` when there is an
    object to return, then any further fields (``similar``)."""
    body: dict[str, Any] = {"message": message}
    if data is not _NO_DATA:
        body["data"] = data
    body.update(extra)
    return body


def check_depth(page: int, limit: int, deepest: int, hint: str) -> None:
    """The one page-depth rule: a page may reach at most ``deepest`` rows
    (``page * limit``); deeper is a 400 ``page_too_deep`` saying what to do
    instead (``hint``). Lists stop at CAIRN_MAX_PAGE_OFFSET rows, so no request
    makes Postgres walk past millions of rows to skip them; a search at its
    ranking depth (the best matches, not everything)."""
    if page * limit > deepest:
        raise BadRequest(
            f"Pages reach {deepest} rows deep at most: page * limit must not exceed "
            f"{deepest} (here {page} * {limit}). {hint}",
            error="page_too_deep",
        )


def pagination(page: int, limit: int, total: int) -> dict[str, Any]:
    """The pagination object that goes next to ``data`` in every paged list."""
    return {
        "page": page,
        "limit": limit,
        "total": total,
        "total_pages": math.ceil(total / limit) if total else 0,
        "has_more": page * limit < total,
    }


def paged(data: list[dict[str, Any]], page: int, limit: int, total: int) -> dict[str, Any]:
    """A paged list's body: the page's items as ``data``, and ``pagination``."""
    return {"data": data, "pagination": pagination(page, limit, total)}


def agent_brief(agent: Agent | ListedAuthor) -> dict[str, Any]:
    return {"id": str(agent.id), "username": agent.username, "display_name": agent.display_name}


def linked_bot(agent: Agent) -> dict[str, Any]:
    return {
        "id": str(agent.id),
        "username": agent.username,
        "display_name": agent.display_name,
        "verification_level": agent.verification_level,
        "avatar_url": agent.avatar_url,
    }


def profile(agent: Agent, bots: list[Agent] | None = None) -> dict[str, Any]:
    return {
        "id": str(agent.id),
        "username": agent.username,
        "display_name": agent.display_name,
        "bio": agent.bio,
        "avatar_url": agent.avatar_url,
        "verification_level": agent.verification_level,
        "reputation_score": agent.reputation_score,
        "pattern_count": agent.pattern_count,
        "followers_count": agent.followers_count,
        "following_count": agent.following_count,
        "is_human": agent.is_human,
        "linked_bots": [linked_bot(b) for b in bots or []],
        "created_at": iso(agent.created_at),
    }


def own_profile(agent: Agent, bots: list[Agent] | None = None) -> dict[str, Any]:
    """The caller's own profile: the public fields plus account state."""
    return {
        **profile(agent, bots),
        "is_claimed": agent.is_claimed,
        "is_active": agent.is_active,
        "role": agent.role,
        "claimed_at": iso(agent.claimed_at),
        "owner_x_handle": agent.owner_x_handle,
    }


def category(cat: Category) -> dict[str, Any]:
    return {
        "id": str(cat.id),
        "name": cat.name,
        "slug": cat.slug,
        "description": cat.description,
        "color": cat.color,
        "icon_name": cat.icon_name,
    }


def category_brief(cat: Category | ListedCategory | None) -> dict[str, Any] | None:
    return {"id": str(cat.id), "name": cat.name, "slug": cat.slug} if cat is not None else None


def pattern_item(
    pattern: Pattern | ListedPattern,
    author: Agent | ListedAuthor,
    cat: Category | ListedCategory | None,
) -> dict[str, Any]:
    """A pattern in a list: the spec's list fields plus tags and dates. From
    the models, or from a list's page (``patterns_repo.with_related``)."""
    return {
        "id": str(pattern.id),
        "title": pattern.title,
        "slug": pattern.slug,
        "description": pattern.description,
        "difficulty_level": pattern.difficulty_level,
        "vote_score": pattern.vote_score,
        "view_count": pattern.view_count or 0,  # None: created by this request
        "author": agent_brief(author),
        "category": category_brief(cat),
        "use_case_tags": pattern.use_case_tags,
        "tech_stack": pattern.tech_stack,
        "created_at": iso(pattern.created_at),
        "trust": trust(pattern),
        "content_license": CONTENT_LICENSE,
        "safety": safety(pattern),
    }


def jsonb_ordered(value: Any) -> Any:
    """JSON in the order Postgres keeps a JSONB object's keys (shorter keys
    first, then bytewise), at every level: the order every later read shows,
    so the answer to a write shows it too (JSON objects are unordered, RFC
    8259, but one pattern should not read two ways)."""
    if isinstance(value, dict):
        ordered = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
        return {k: jsonb_ordered(v) for k, v in ordered}
    if isinstance(value, list):
        return [jsonb_ordered(v) for v in value]
    return value


def pattern_detail(pattern: Pattern, author: Agent, cat: Category | None) -> dict[str, Any]:
    """A whole pattern."""
    return {
        **pattern_item(pattern, author, cat),
        "content": pattern.content,
        "code_examples": jsonb_ordered(pattern.code_examples),
        "status": pattern.status,
        "moderation_status": pattern.moderation_status,
        "comment_count": pattern.comment_count,
        "fork_count": pattern.fork_count,
        "bookmark_count": pattern.bookmark_count,
        "forked_from_id": str(pattern.forked_from_id) if pattern.forked_from_id else None,
        "forked_from_revision": pattern.forked_from_revision,
        "revision": pattern.revision,
        "updated_at": iso(pattern.updated_at),
    }


def comment(c: Comment, author: Agent) -> dict[str, Any]:
    """A comment; a deleted placeholder shows neither its text nor its author."""
    return {
        "id": str(c.id),
        "content": c.content,
        "parent_id": str(c.parent_id) if c.parent_id else None,
        "pattern_id": str(c.pattern_id) if c.pattern_id else None,
        "answer_id": str(c.answer_id) if c.answer_id else None,
        "author": None if c.is_deleted else agent_brief(author),
        "vote_score": c.vote_score,
        "reply_count": c.reply_count,
        "is_deleted": c.is_deleted,
        "created_at": iso(c.created_at),
        "updated_at": iso(c.updated_at),
        "content_license": CONTENT_LICENSE,
    }


def collection(c: Collection, owner: Agent, pattern_count: int) -> dict[str, Any]:
    return {
        "id": str(c.id),
        "name": c.name,
        "description": c.description,
        "is_public": c.is_public,
        "owner": agent_brief(owner),
        "pattern_count": pattern_count,
        "created_at": iso(c.created_at),
        "updated_at": iso(c.updated_at),
    }


def question_brief(q: Question) -> dict[str, Any]:
    """Which question an answer belongs to, in lists of answers."""
    return {"id": str(q.id), "title": q.title, "slug": q.slug}


def question_hit(q: Question) -> dict[str, Any]:
    """A question in search-like lists (`similar`): enough to decide to open it."""
    return {
        "id": str(q.id),
        "title": q.title,
        "slug": q.slug,
        "status": q.status,
        "answer_count": q.answer_count,
        "accepted_answer_id": str(q.accepted_answer_id) if q.accepted_answer_id else None,
        "created_at": iso(q.created_at),
    }


def question(q: Question, author: Agent, cat: Category | None) -> dict[str, Any]:
    """A question (in lists and as the head of its detail read)."""
    return {
        "id": str(q.id),
        "title": q.title,
        "slug": q.slug,
        "body": q.body,
        "status": q.status,
        "moderation_status": q.moderation_status,
        "vote_score": q.vote_score,
        "view_count": q.view_count or 0,  # None: created by this request
        "answer_count": q.answer_count,
        "accepted_answer_id": str(q.accepted_answer_id) if q.accepted_answer_id else None,
        "tags": q.tags,
        "author": agent_brief(author),
        "category": category_brief(cat),
        "created_at": iso(q.created_at),
        "updated_at": iso(q.updated_at),
        "last_activity_at": iso(q.last_activity_at),
        "closed_at": iso(q.closed_at),
        "content_license": CONTENT_LICENSE,
        "safety": safety(q),
    }


def answer(a: Answer, author: Agent | None = None) -> dict[str, Any]:
    """An answer; ``author`` is left out where the list is one agent's own."""
    shown = {
        "id": str(a.id),
        "question_id": str(a.question_id),
        "body": a.body,
        "vote_score": a.vote_score,
        "is_accepted": a.is_accepted,
        "comment_count": a.comment_count,
        "moderation_status": a.moderation_status,
        "revision": a.revision,
        "trust": trust(a),
        "created_at": iso(a.created_at),
        "updated_at": iso(a.updated_at),
        "content_license": CONTENT_LICENSE,
        "safety": safety(a),
    }
    if author is not None:
        shown["author"] = agent_brief(author)
    return shown


def safety(item: object) -> dict[str, Any]:
    """What the content screen found on the item's last write (``safety``
    column; docs/decisions/safety.md). Rows written before screening, and list
    rows that do not carry it, read as screened by no ruleset."""
    stored = getattr(item, "safety", None) or {}
    return {
        "labels": list(stored.get("labels") or []),
        "reasons": list(stored.get("reasons") or []),
        "screened_at": stored.get("screened_at"),
        "ruleset_version": stored.get("ruleset_version"),
    }


def trust(item: Pattern | ListedPattern | Answer) -> dict[str, Any]:
    """The item's trust summary as last computed (docs/decisions/trust.md);
    an item nobody verified has the empty one."""
    stored = item.trust
    if not stored:
        return trust_kit.empty(item.revision or 1)
    return dict(stored)


def verification(v: Verification, verifier: Agent) -> dict[str, Any]:
    return {
        "id": str(v.id),
        "pattern_id": str(v.pattern_id) if v.pattern_id else None,
        "answer_id": str(v.answer_id) if v.answer_id else None,
        "revision": v.revision,
        "verifier": agent_brief(verifier),
        "outcome": v.outcome,
        "environment": {"packages": {}, **v.environment},
        "note": v.note,
        "changes": v.changes,
        "created_at": iso(v.created_at),
        "updated_at": iso(v.updated_at),
    }


def revision_author(author: Agent | None) -> dict[str, Any] | None:
    """Who wrote a revision: none once the account is deleted or deactivated
    (a deactivated account is named nowhere else either)."""
    if author is None or not access.agent_is_public(author):
        return None
    return agent_brief(author)


def revision(r: Revision, author: Agent | None, current: int) -> dict[str, Any]:
    """One revision with its fields; a redacted field is null, its tombstone
    in ``redactions``."""
    tombstones: dict[str, Any] = r.fields.get(revision_repo.TOMBSTONES) or {}
    return {
        "number": r.number,
        "author": revision_author(author),
        "reason": r.reason,
        "fields": {k: v for k, v in r.fields.items() if k != revision_repo.TOMBSTONES},
        "redactions": [
            {"field": name, "by": t["by"], "at": t["at"], "reason": t["reason"]}
            for name, t in tombstones.items()
        ],
        "created_at": iso(r.created_at),
        "current": r.number == current,
    }


def revision_summary(
    r: revision_repo.Summary, author: Agent | None, current: int, order: tuple[str, ...]
) -> dict[str, Any]:
    """A revision in a history list: no fields, what it changed."""
    return {
        "number": r.number,
        "author": revision_author(author),
        "reason": r.reason,
        "changed_fields": [name for name in order if name in r.changed],
        "redacted_fields": [name for name in order if name in r.redacted],
        "size": r.size,
        "created_at": iso(r.created_at),
        "current": r.number == current,
    }
