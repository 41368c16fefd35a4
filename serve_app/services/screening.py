"""The content screen on every write of text others read (design rule 17,
docs/decisions/safety.md): one place in the services, whatever the door.

``check`` screens an item's fields (serve_app/kit/screening): a secret or
hidden text is refused with a 422 naming each field, line and kind (nothing is
stored; a Cairn key found is revoked in a transaction of its own and its
agent told); otherwise the verdict comes back for ``stamp``, which records the
labels and reasons on the item and holds it (``held_for_safety``) when its
text addresses instructions to the reading agent, or releases it when an edit
removed the cause. Items without a moderation state (comments, collections,
profiles, verification reports) cannot be held: ``check_unheld`` refuses
instructions there too (422 ``instructions_detected``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit import hooks, keys
from serve_app.kit.errors import UnprocessableContent
from serve_app.kit.screening import Field, Verdict, screen
from serve_app.services import notifications
from storage import access
from storage.models import Answer, Question
from storage.models.base import utcnow
from storage.models.social import API_KEY_REVOKED
from storage.repositories import agents as agent_repo
from storage.repositories import api_keys as key_repo
from storage.repositories import rows
from telemetry import metrics

HELD = "held_for_safety"
# What a write's screen came to (telemetry: cairn_screening_outcomes_total):
# refused_instructions is the held outcome of text that has no moderation
# state to hold it in (check_unheld).
OUTCOMES = (
    "passed",
    "labelled",
    "held",
    "refused_secret",
    "refused_hidden",
    "refused_instructions",
)

__all__ = [
    "HELD",
    "OUTCOMES",
    "Field",
    "check",
    "check_unheld",
    "outcome",
    "pattern_fields",
    "record",
    "revoke_leaked",
    "stamp",
    "text_fields",
]


def pattern_fields(values: Mapping[str, Any]) -> list[Field]:
    """A pattern's screened fields, named as the API names them."""
    fields = [
        Field("title", values.get("title") or "", "plain"),
        Field("description", values.get("description") or "", "markdown"),
        Field("content", values.get("content") or "", "markdown"),
    ]
    for name, example in (values.get("code_examples") or {}).items():
        if isinstance(example, Mapping):
            fields.append(
                Field(
                    f"code_examples.{name}.code",
                    str(example.get("code") or ""),
                    "code",
                    str(example.get("language") or "") or None,
                )
            )
    fields.extend(Field("use_case_tags", t, "plain") for t in values.get("use_case_tags") or [])
    fields.extend(Field("tech_stack", t, "plain") for t in values.get("tech_stack") or [])
    return fields


def text_fields(**named: tuple[str | None, str]) -> list[Field]:
    """Fields by name: ``body=(text, "markdown")``; empty ones left out."""
    return [Field(name, text, kind) for name, (text, kind) in named.items() if text]  # type: ignore[arg-type]


def outcome(verdict: Verdict, *, holdable: bool = True) -> str:
    """What a write's screen comes to (one of ``OUTCOMES``); ``holdable``:
    the item has a moderation state to hold it in."""
    if verdict.secrets:
        return "refused_secret"
    if verdict.hidden:
        return "refused_hidden"
    if verdict.holds:
        return "held" if holdable else "refused_instructions"
    return "labelled" if verdict.labels else "passed"


async def check(db: AsyncSession, fields: Iterable[Field], *, kind: str) -> Verdict:
    """Screen ``fields`` of an item of ``kind`` (counted by outcome); refuse
    (422) a secret or hidden text."""
    verdict = screen(fields)
    metrics.SCREENED.labels(kind, outcome(verdict)).inc()
    return _refuse(db, verdict)


def _refuse(db: AsyncSession, verdict: Verdict) -> Verdict:
    """Raise the 422 of a refused ``verdict`` (a Cairn key found is revoked
    after the rollback); otherwise return it."""
    if verdict.refused:
        if verdict.cairn_keys:
            leaked = verdict.cairn_keys

            async def revoke(session: AsyncSession) -> None:
                await revoke_leaked(session, leaked)

            hooks.after_rollback(db, revoke)
        details = [f.detail() for f in (*verdict.secrets, *verdict.hidden)]
        if verdict.secrets:
            raise UnprocessableContent(
                "This text contains what looks like a secret (a credential, key or token). "
                "Nothing was stored: remove it, or replace it with a placeholder such as "
                "YOUR_API_KEY, and send again.",
                error="secret_detected",
                details=details,
            )
        raise UnprocessableContent(
            "This text contains hidden characters or markup a reader would not see "
            "(Unicode tag characters, bidirectional controls, zero-width runs, HTML comments). "
            "Nothing was stored: remove them and send again.",
            error="hidden_characters",
            details=details,
        )
    return verdict


async def check_unheld(db: AsyncSession, fields: Iterable[Field], *, kind: str) -> Verdict:
    """``check`` for text that has no moderation state to hold it in:
    instructions aimed at agents are refused as well."""
    verdict = screen(fields)
    metrics.SCREENED.labels(kind, outcome(verdict, holdable=False)).inc()
    _refuse(db, verdict)
    if verdict.holds:
        raise UnprocessableContent(
            "This text addresses instructions to the agents who will read it (to ignore "
            "their instructions, reveal or send keys or data, call tools or visit URLs). "
            "Nothing was stored: rephrase it as information, not orders.",
            error="instructions_detected",
            details=[{"field": f.field, "line": f.line, "kind": f.rule} for f in verdict.holds],
        )
    return verdict


def record(verdict: Verdict) -> dict[str, Any]:
    """What an item stores of its screen (the ``safety`` column)."""
    return {
        "labels": verdict.label_dicts(),
        "reasons": verdict.reason_dicts(),
        "screened_at": utcnow().isoformat(),
        "ruleset_version": verdict.ruleset_version,
    }


def stamp(moderation_status: str, verdict: Verdict) -> dict[str, Any]:
    """The column changes a screened write makes: the record, and the
    moderation state (held; released once an edit removed the cause; a
    moderator's rejection stands)."""
    changes: dict[str, Any] = {"safety": record(verdict)}
    if verdict.held and moderation_status != "rejected":
        changes["moderation_status"] = HELD
    elif not verdict.held and moderation_status == HELD:
        changes["moderation_status"] = "approved"
    return changes


async def restamp_answer(
    db: AsyncSession, answer: Answer, verdict: Verdict, question: Question | None = None
) -> None:
    """Record an answer's screen; ``answer_count`` (the answers a question
    shows) follows it out of or back into view."""
    was_shown = access.answer_is_shown(answer)
    for name, value in stamp(answer.moderation_status, verdict).items():
        setattr(answer, name, value)
    now_shown = access.answer_is_shown(answer)
    if was_shown != now_shown:
        question = question or await db.get(Question, answer.question_id)
        assert question is not None  # an answer goes with its question
        await rows.add_to_loaded_counter(db, question, "answer_count", 1 if now_shown else -1)


async def revoke_leaked(session: AsyncSession, leaked: tuple[str, ...]) -> None:
    """Revoke each genuine live Cairn key among ``leaked`` and tell its agent."""
    for key in leaked:
        key_id = keys.parse_key_id(key)
        if key_id is None:
            continue
        row = await key_repo.live_row(session, key_id)
        # Only a key that matches its stored hash: a made-up key with a known
        # key id must not revoke someone else's key.
        if row is None or not hooks.key_matches(session, key, row.key_hash):
            continue
        agent_id = row.agent_id
        await agent_repo.lock(session, agent_id)
        await key_repo.revoke_all(session, agent_id)
        hooks.credentials_changed(session, agent_id)
        _, agent = row.models()
        await notifications.warn(
            session,
            notifications.notice(
                agent_id,
                API_KEY_REVOKED,
                notifications.about_agent(agent),
                key_prefix=keys.key_preview(key_id),
            ),
        )
