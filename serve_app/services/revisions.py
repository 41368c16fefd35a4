"""Revisions: every change to a pattern's fields or an answer's body writes
an immutable revision (number, author, time, reason, the full fields);
history, one revision, a diff between two, and rollback (which writes a new
revision). docs/decisions/trust.md."""

from __future__ import annotations

import difflib
import json
import uuid
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import Forbidden, NotFound
from serve_app.services import verifications, views
from storage import access
from storage.models import Agent, Answer, Pattern
from storage.models.base import utcnow
from storage.repositories import categories as category_repo
from storage.repositories import patterns as pattern_repo
from storage.repositories import questions as question_repo
from storage.repositories import revisions as repo
from storage.repositories.revisions import Kind, Target

# The pattern fields a revision keeps (the text an agent runs and how it is
# filed); status is not one of them (archiving is not an edit).
PATTERN_FIELDS = (
    "title",
    "description",
    "content",
    "difficulty_level",
    "category_id",
    "use_case_tags",
    "tech_stack",
    "code_examples",
)
ANSWER_FIELDS = ("body",)
ROLLED_BACK = "Rolled back."


def fields_of(item: Pattern | Answer) -> dict[str, Any]:
    """The item's revisable fields, as a revision stores them (JSON)."""
    if isinstance(item, Pattern):
        shown = {name: getattr(item, name) for name in PATTERN_FIELDS}
        shown["category_id"] = str(item.category_id) if item.category_id else None
        shown["use_case_tags"] = list(item.use_case_tags)
        shown["tech_stack"] = list(item.tech_stack)
        shown["code_examples"] = dict(item.code_examples)
        return shown
    return {"body": item.body}


def _kind(item: Pattern | Answer) -> Kind:
    return "pattern" if isinstance(item, Pattern) else "answer"


async def first(db: AsyncSession, item: Pattern | Answer, author: Agent) -> None:
    """Revision 1 of a new item."""
    await repo.add(db, Target(_kind(item), item.id), 1, author.id, fields_of(item))


async def after_change(
    db: AsyncSession,
    item: Pattern | Answer,
    before: dict[str, Any],
    author: Agent,
    reason: str | None,
) -> bool:
    """Write the next revision when the item's fields differ from ``before``
    (its row is locked by the caller); its trust follows the new revision.
    True when a revision was written."""
    now = fields_of(item)
    if now == before:
        return False
    item.revision = (item.revision or 1) + 1
    db.add(item)
    await repo.add(db, Target(_kind(item), item.id), item.revision, author.id, now, reason)
    await verifications.refresh(db, _kind(item), item)
    return True


# --- reads ----------------------------------------------------------------------


async def history(
    db: AsyncSession, kind: Kind, ref: str | uuid.UUID, caller: Agent | None, page: int, limit: int
) -> dict[str, Any]:
    """The item's revisions, newest first."""
    found, _ = await verifications.item(db, kind, ref, caller, lock=False)
    listed, total = await repo.page(db, Target(kind, found.id), page, limit)
    data = [views.revision(r, a, found.revision) for r, a in listed]
    return views.paged(data, page, limit, total)


async def _one(db: AsyncSession, kind: Kind, item: Pattern | Answer, number: int) -> Any:
    found = await repo.one(db, Target(kind, item.id), number)
    if found is None:
        raise NotFound(f"No revision {number} of this {kind} (current is {item.revision}).")
    return found


async def one(
    db: AsyncSession, kind: Kind, ref: str | uuid.UUID, caller: Agent | None, number: int
) -> dict[str, Any]:
    found, _ = await verifications.item(db, kind, ref, caller, lock=False)
    revision, author = await _one(db, kind, found, number)
    return {"data": views.revision(revision, author, found.revision)}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def field_diffs(old: dict[str, Any], new: dict[str, Any], a: int, b: int) -> list[dict[str, str]]:
    """A unified diff per field that differs, in the item's field order."""
    out = []
    for name in dict.fromkeys([*old, *new]):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        lines = difflib.unified_diff(
            _text(before).splitlines(keepends=True),
            _text(after).splitlines(keepends=True),
            fromfile=f"{name}@{a}",
            tofile=f"{name}@{b}",
        )
        out.append(
            {"field": name, "diff": "".join(x if x.endswith("\n") else x + "\n" for x in lines)}
        )
    return out


async def diff(
    db: AsyncSession,
    kind: Kind,
    ref: str | uuid.UUID,
    caller: Agent | None,
    a: int,
    b: int,
) -> dict[str, Any]:
    found, _ = await verifications.item(db, kind, ref, caller, lock=False)
    old, _ = await _one(db, kind, found, a)
    new, _ = await _one(db, kind, found, b)
    return {
        "data": {
            "from_revision": a,
            "to_revision": b,
            "fields": field_diffs(old.fields, new.fields, a, b),
        }
    }


# --- rollback -------------------------------------------------------------------


async def rollback(
    db: AsyncSession,
    kind: Kind,
    ref: str | uuid.UUID,
    caller: Agent,
    number: int,
    reason: str | None,
) -> dict[str, Any]:
    """Put revision ``number``'s fields back (the author or staff); this
    writes a new revision, so history only grows. Revision ``number`` being
    the current text already, nothing is written (and the answer says so)."""
    found, _ = await verifications.item(db, kind, ref, caller, lock=True)
    if found.author_id != caller.id and not access.is_staff(caller):
        raise Forbidden(f"Only the author or staff can roll back this {kind}.")
    target, _ = await _one(db, kind, found, number)
    before = fields_of(found)
    if target.fields == before:
        # Nothing to put back: no revision, no edit time, no activity.
        message = f"Nothing to roll back: revision {number} is the current text."
    elif isinstance(found, Pattern):
        changes = dict(target.fields)
        category = changes.get("category_id")
        changes["category_id"] = (
            uuid.UUID(category)
            if category and await category_repo.exists(db, uuid.UUID(category))
            else None
        )
        await pattern_repo.update_counted(db, found, changes)
        await after_change(db, found, before, caller, _why(number, reason))
        message = ROLLED_BACK
    else:
        found.body = target.fields["body"]
        found.updated_at = utcnow()
        db.add(found)
        await db.flush()
        await question_repo.touch(db, found.question_id)
        await after_change(db, found, before, caller, _why(number, reason))
        message = ROLLED_BACK
    if isinstance(found, Pattern):
        author, category_row = await pattern_repo.related(db, found)
        assert author is not None
        return views.envelope(message, views.pattern_detail(found, author, category_row))
    return views.envelope(message, views.answer(found, await db.get(Agent, found.author_id)))


def _why(number: int, reason: str | None) -> str:
    return f"rollback to revision {number}" + (f": {reason}" if reason else "")
