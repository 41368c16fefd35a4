"""A new ruleset reaches old content: the per-batch step of ``cairn rescreen``
(docs/decisions/safety.md, "Rescreen").

``rescreen_batch`` screens a batch of items whose stored ``ruleset_version``
is not the current one and applies what the write path would have: labels
updated; text that now addresses instructions to agents held
(``held_for_safety``) and its author told; a secret or hidden text now found
is hidden at once in the same held state (no one but its author and staff
sees it; the stored reasons name field, line and kind, never the text), a
Cairn key among it revoked, and staff told (``safety_report``); an item held
by an older ruleset that no longer holds is released. A moderator's
``rejected`` stands. The caller owns the transaction (one per batch).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.screening import RULESET_VERSION, Verdict, screen
from serve_app.services import events, notifications, screening, views
from storage import access
from storage.models import Answer, Pattern, Question
from storage.models.base import utcnow
from storage.models.social import MODERATION_DECISION, SAFETY_REPORT
from storage.repositories import patterns as pattern_repo
from storage.repositories import rescreen as repo
from storage.repositories import revisions as revision_repo
from storage.repositories import rows
from telemetry import metrics

KINDS = repo.KINDS
# The outcomes counted (telemetry: cairn_rescreen_items_total).
OUTCOMES = ("unchanged", "labelled", "held", "hidden", "released")


def _fields(kind: str, item: Any) -> list[screening.Field]:
    if kind == "pattern":
        return screening.pattern_fields(
            {
                "title": item.title,
                "description": item.description,
                "content": item.content,
                "code_examples": item.code_examples,
                "use_case_tags": item.use_case_tags,
                "tech_stack": item.tech_stack,
            }
        )
    if kind == "question":
        return screening.text_fields(
            title=(item.title, "plain"), body=(item.body, "markdown")
        ) + screening.text_fields(
            **{f"tags[{i}]": (t, "plain") for i, t in enumerate(item.tags or [])}
        )
    return screening.text_fields(body=(item.body, "markdown"))


def _changes(item: Any, verdict: Verdict) -> tuple[dict[str, Any], str]:
    """The column changes and the outcome of ``verdict`` on ``item``."""
    status = item.moderation_status
    before = item.safety or {}
    if verdict.refused:
        # Hidden at once: the held state (only the author and staff see it),
        # the refusals as its reasons; an edit that removes them releases it.
        record = screening.record(verdict)
        record["reasons"] = [
            {"rule": f.kind, "field": f.field, "line": f.line}
            for f in (*verdict.secrets, *verdict.hidden)
        ] + record["reasons"]
        changes: dict[str, Any] = {"safety": record}
        if status != "rejected":
            changes["moderation_status"] = screening.HELD
        return changes, "hidden"
    changes = screening.stamp(status, verdict)
    if changes.get("moderation_status") == screening.HELD and status != screening.HELD:
        return changes, "held"
    if status == screening.HELD and changes.get("moderation_status") == "approved":
        return changes, "released"
    if changes["safety"]["labels"] != list(before.get("labels") or []):
        return changes, "labelled"
    return changes, "unchanged"


async def rescreen_batch(
    db: AsyncSession, kind: str, ids: Sequence[uuid.UUID], version: str = RULESET_VERSION
) -> Counter[str]:
    """Screen the items of ``kind`` among ``ids`` still stale under
    ``version`` (locked; rows another writer holds are left to a later run)
    and apply the verdicts. Returns the outcomes counted."""
    outcomes: Counter[str] = Counter()
    found = await repo.lock_stale(db, kind, ids, version)
    staff: list[uuid.UUID] | None = None
    quiet: dict[uuid.UUID, str] = {}
    for row in found:
        verdict = screen(_fields(kind, row))
        if verdict.cairn_keys:
            await screening.revoke_leaked(db, verdict.cairn_keys)
        changes, outcome = _changes(row, verdict)
        outcomes[outcome] += 1
        metrics.RESCREENED.labels(kind, outcome).inc()
        if outcome == "unchanged":
            # Most of a rescreen: only the record's version and date move; one
            # statement for the batch, and nothing for the change feed.
            quiet[row.id] = json.dumps(changes["safety"])
            continue
        # A change goes through the model, as the edit paths write it.
        item = await repo.load(db, kind, row.id)
        await _apply(db, kind, item, changes)
        if outcome in ("held", "hidden"):
            subject = await _subject(db, kind, item)
            told = [
                notifications.notice(
                    item.author_id,
                    MODERATION_DECISION,
                    subject,
                    decision=screening.HELD,
                    type=kind,
                    id=item.id,
                    reason="rescreen",
                )
            ]
            if outcome == "hidden":
                staff = staff if staff is not None else await repo.staff_ids(db)
                told += [
                    notifications.notice(
                        member, SAFETY_REPORT, subject, type=kind, id=item.id, author=item.author_id
                    )
                    for member in staff
                ]
            await notifications.warn(db, *told)
    if kind in ("pattern", "answer"):
        redacted = await _redact_old_revisions(db, kind, {row.id: row.revision for row in found})
        if redacted:
            staff = staff if staff is not None else await repo.staff_ids(db)
            await _report_redactions(db, kind, redacted, staff)
    await db.flush()
    await repo.set_safety(db, kind, quiet)
    return outcomes


def _revision_fields(kind: str, fields: dict[str, Any]) -> list[screening.Field]:
    if kind == "pattern":
        return screening.pattern_fields(fields)
    return screening.text_fields(body=(fields.get("body"), "markdown"))


async def _redact_old_revisions(
    db: AsyncSession, kind: str, current: dict[uuid.UUID, int]
) -> list[tuple[uuid.UUID, int, list[str]]]:
    """Redact, in the older revisions of these items, each field that holds a
    secret or hidden text (docs/decisions/safety.md, "Old revisions"): the
    revisions routes serve old text to anyone who can read the item, so a
    secret an author edited out is still published there until redacted.
    A Cairn key among them is revoked. Returns (item id, revision number,
    fields redacted now) of each revision redacted."""
    redacted: list[tuple[uuid.UUID, int, list[str]]] = []
    for revision in await repo.older_revisions(db, kind, current):
        verdict = screen(_revision_fields(kind, revision.fields))
        findings = (*verdict.secrets, *verdict.hidden)
        if not findings:
            continue
        if verdict.cairn_keys:
            await screening.revoke_leaked(db, verdict.cairn_keys)
        tombstones = dict(revision.fields.get(revision_repo.TOMBSTONES) or {})
        fields = dict(revision.fields)
        names = [n for n in sorted({_top_field(f.field) for f in findings}) if n not in tombstones]
        if not names:
            continue  # redacted before (by a moderator or an earlier ruleset)
        for name in names:
            fields[name] = None
            tombstones[name] = {
                "by": "staff",
                "by_id": None,
                "at": views.iso(utcnow()),
                "reason": f"The content screen (ruleset {RULESET_VERSION}) found a secret or "
                "hidden text here.",
            }
        fields[revision_repo.TOMBSTONES] = tombstones
        await revision_repo.set_fields(db, revision, fields)
        item_id = revision.pattern_id or revision.answer_id
        assert item_id is not None  # a revision has one target
        redacted.append((item_id, revision.number, names))
        metrics.REVISIONS_REDACTED.labels(kind).inc()
    return redacted


async def _report_redactions(
    db: AsyncSession,
    kind: str,
    redacted: list[tuple[uuid.UUID, int, list[str]]],
    staff: list[uuid.UUID],
) -> None:
    """Tell every admin and moderator of each revision redacted, as of an
    item hidden (``safety_report``): a secret was published in its history,
    someone may have read it, and its owner should rotate it; the data say
    which revision and fields, never the text."""
    for item_id, number, names in redacted:
        item = await repo.load(db, kind, item_id)
        subject = await _subject(db, kind, item)
        await notifications.warn(
            db,
            *(
                notifications.notice(
                    member,
                    SAFETY_REPORT,
                    subject,
                    type=kind,
                    id=item_id,
                    author=item.author_id,
                    revision=number,
                    redacted=",".join(names),
                    reason="rescreen",
                )
                for member in staff
            ),
        )


def _top_field(name: str) -> str:
    """The revision field a finding's field is in: ``code_examples.x.code`` →
    ``code_examples``, ``tags[2]`` → ``tags``."""
    return name.split(".", 1)[0].split("[", 1)[0]


async def _apply(db: AsyncSession, kind: str, item: Any, changes: dict[str, Any]) -> None:
    """Write ``changes`` as the edit paths do: counters, the change feed."""
    if kind == "pattern":
        was_public = access.pattern_is_public(item)
        await pattern_repo.update_counted(db, item, changes)
        await events.transition(
            db, "pattern", item.id, was_public, access.pattern_is_public(item), None
        )
    elif kind == "question":
        was_public = access.question_is_visible(item)
        for name, value in changes.items():
            setattr(item, name, value)
        await events.transition(
            db, "question", item.id, was_public, access.question_is_visible(item), None
        )
    else:
        # The answer's question follows it out of or back into view (answer_count).
        was_shown = access.answer_is_shown(item)
        for name, value in changes.items():
            setattr(item, name, value)
        if was_shown != access.answer_is_shown(item):
            question = await db.get(Question, item.question_id)
            assert question is not None  # an answer goes with its question
            await rows.add_to_loaded_counter(
                db, question, "answer_count", 1 if access.answer_is_shown(item) else -1
            )


async def _subject(db: AsyncSession, kind: str, item: Any) -> notifications.Subject:
    if isinstance(item, Pattern):
        return notifications.about_pattern(item)
    if isinstance(item, Answer):
        question = await db.get(Question, item.question_id)
        assert question is not None
        return notifications.about_question(question)
    return notifications.about_question(item)
