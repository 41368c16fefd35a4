"""Revisions: every change to a pattern's fields or an answer's body writes
an immutable revision (number, author, time, reason, the full fields);
history (summaries), one revision, a bounded diff between two, rollback
(which writes a new revision) and redaction of an old revision's fields
(which leaves a tombstone). docs/decisions/trust.md."""

from __future__ import annotations

import asyncio
import json
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit import linediff
from serve_app.kit.errors import BadRequest, Conflict, Forbidden, NotFound, ServiceUnavailable
from serve_app.services import events, screening, verifications, views
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
REDACTED = "Redacted."
# The key in a revision's stored fields that holds its tombstones (no item
# field has a name starting with "_"): {field: {by, by_id, at, reason}}.
TOMBSTONES = repo.TOMBSTONES
# How a redacted field's text reads in a diff.
REDACTED_TEXT = "[redacted]"


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
    """The item's revisions, newest first, as summaries (which fields each
    changed, its size; not the fields themselves: one revision has those)."""
    found, _ = await verifications.item(db, kind, ref, caller, lock=False)
    listed, total = await repo.summaries(db, Target(kind, found.id), page, limit)
    order = PATTERN_FIELDS if kind == "pattern" else ANSWER_FIELDS
    data = [views.revision_summary(r, a, found.revision, order) for r, a in listed]
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


def shown_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A revision's fields as a diff compares them: tombstones left out, a
    redacted field's text ``[redacted]``."""
    tombstones = fields.get(TOMBSTONES) or {}
    return {
        name: REDACTED_TEXT if name in tombstones else value
        for name, value in fields.items()
        if name != TOMBSTONES
    }


def field_diffs(old: dict[str, Any], new: dict[str, Any], a: int, b: int) -> list[dict[str, Any]]:
    """A unified diff per field that differs, in the item's field order; a
    field whose diff is past linediff's bounds comes with ``too_large`` and
    no diff (all fields of one request share one budget)."""
    out: list[dict[str, Any]] = []
    budget = linediff.Budget()
    for name in dict.fromkeys([*old, *new]):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        try:
            text: str | None = linediff.unified(
                _text(before).splitlines(keepends=True),
                _text(after).splitlines(keepends=True),
                f"{name}@{a}",
                f"{name}@{b}",
                budget,
            )
        except linediff.TooLarge:
            text = None
        out.append({"field": name, "diff": text, "too_large": text is None})
    return out


# Diffs run in worker threads, at most DIFF_SLOTS at once per process (per
# event loop); a request that finds them all busy for DIFF_WAIT_S gets a 503.
# Results are kept per (kind, item, a, b, what was redacted): revisions never
# change but by redaction, which is part of the key, so no replica serves a
# diff of text redacted since.
DIFF_SLOTS = 2
DIFF_WAIT_S = 2.0
DIFF_CACHE_SIZE = 256
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)
_diffs: OrderedDict[tuple[Any, ...], list[dict[str, Any]]] = OrderedDict()


async def _in_slot(work: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """``work`` in a worker thread once one of DIFF_SLOTS is free; the slot is
    held until the thread ends, even when the request is cancelled first."""
    loop = asyncio.get_running_loop()
    slots = _slots.get(loop)
    if slots is None:
        slots = _slots[loop] = asyncio.Semaphore(DIFF_SLOTS)
    try:
        await asyncio.wait_for(slots.acquire(), DIFF_WAIT_S)
    except TimeoutError:
        raise ServiceUnavailable(
            "Too many diffs are being worked out; try again shortly.",
            headers={"Retry-After": "1"},
            error="diff_busy",
        ) from None
    running = asyncio.ensure_future(asyncio.to_thread(work))
    running.add_done_callback(lambda _: slots.release())
    return await asyncio.shield(running)


def _redacted(fields: dict[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(fields.get(TOMBSTONES) or {}))


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
    key = (kind, found.id, a, b, _redacted(old.fields), _redacted(new.fields))
    fields = _diffs.get(key)
    if fields is None:
        before, after = shown_fields(old.fields), shown_fields(new.fields)
        # The reads are done: a diff that waits for a slot and then works
        # holds no pooled connection meanwhile (a flood of diffs would
        # otherwise keep every other request waiting for the pool).
        await db.rollback()
        fields = await _in_slot(lambda: field_diffs(before, after, a, b))
        _diffs[key] = fields
        while len(_diffs) > DIFF_CACHE_SIZE:
            _diffs.popitem(last=False)
    else:
        _diffs.move_to_end(key)
    return {"data": {"from_revision": a, "to_revision": b, "fields": fields}}


# --- redaction ------------------------------------------------------------------


async def redact(
    db: AsyncSession,
    kind: Kind,
    ref: str | uuid.UUID,
    caller: Agent,
    number: int,
    names: list[str],
    reason: str,
) -> dict[str, Any]:
    """Replace fields of an old revision by a tombstone (who, when, why): the
    author or staff, never the current revision (the author edits that).
    A field already redacted keeps its first tombstone."""
    found, _ = await verifications.item(db, kind, ref, caller, lock=True)
    is_author = found.author_id == caller.id
    if not is_author and not access.is_staff(caller):
        raise Forbidden(f"Only the author or staff can redact this {kind}'s revisions.")
    known = PATTERN_FIELDS if kind == "pattern" else ANSWER_FIELDS
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadRequest(
            f"No field {unknown[0][:40]!r} in a {kind}'s revision; one of: {', '.join(known)}.",
            error="unknown_field",
        )
    if number == found.revision:
        raise Conflict(
            f"Revision {number} is the current one: edit the {kind} instead.",
            error="current_revision",
        )
    revision, author = await _one(db, kind, found, number)
    tombstones = dict(revision.fields.get(TOMBSTONES) or {})
    fields = dict(revision.fields)
    for name in names:
        if name in tombstones:
            continue
        fields[name] = None
        tombstones[name] = {
            "by": "author" if is_author else "staff",
            "by_id": str(caller.id),
            "at": views.iso(utcnow()),
            "reason": reason,
        }
    fields[TOMBSTONES] = tombstones
    await repo.set_fields(db, revision, fields)
    return views.envelope(REDACTED, views.revision(revision, author, found.revision))


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
    found, public = await verifications.item_and_publicity(db, kind, ref, caller, lock=True)
    if found.author_id != caller.id and not access.is_staff(caller):
        raise Forbidden(f"Only the author or staff can roll back this {kind}.")
    target, _ = await _one(db, kind, found, number)
    if target.fields.get(TOMBSTONES):
        raise Conflict(
            f"Revision {number} has redacted fields and cannot be put back.",
            error="revision_redacted",
        )
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
        # Screened like an edit: the revision may predate the ruleset.
        verdict = await screening.check(
            db, screening.pattern_fields({**before, **changes}), kind="pattern"
        )
        changes.update(screening.stamp(found.moderation_status, verdict))
        await pattern_repo.update_counted(db, found, changes)
        await after_change(db, found, before, caller, _why(number, reason))
        message = ROLLED_BACK
    else:
        verdict = await screening.check(
            db, screening.text_fields(body=(target.fields["body"], "markdown")), kind="answer"
        )
        await screening.restamp_answer(db, found, verdict)
        found.body = target.fields["body"]
        found.updated_at = utcnow()
        db.add(found)
        await db.flush()
        await question_repo.touch(db, found.question_id)
        await after_change(db, found, before, caller, _why(number, reason))
        message = ROLLED_BACK
    if message == ROLLED_BACK and public:
        events.updated(db, kind, found.id, caller.id, revision=found.revision)
    if isinstance(found, Pattern):
        author, category_row = await pattern_repo.related(db, found)
        assert author is not None
        return views.envelope(message, views.pattern_detail(found, author, category_row))
    return views.envelope(message, views.answer(found, await db.get(Agent, found.author_id)))


def _why(number: int, reason: str | None) -> str:
    return f"rollback to revision {number}" + (f": {reason}" if reason else "")
