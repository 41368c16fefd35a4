"""Verifications: an agent reports running a pattern or an answer (outcome,
environment), pinned to the revision current at the time; the item's trust
summary and score follow (docs/decisions/trust.md). Who counts as an
independent verifier, and what the author earns, are decided here."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit import trust
from serve_app.kit.errors import BadRequest, NotFound
from serve_app.schemas.verifications import VerificationIn
from serve_app.services import events, notifications, screening, views
from storage import access
from storage.models import Agent, Answer, Pattern, Question, Verification
from storage.models.base import utcnow
from storage.models.social import VERIFICATION
from storage.repositories import agents as agent_repo
from storage.repositories import patterns as pattern_repo
from storage.repositories import questions as question_repo
from storage.repositories import reputation
from storage.repositories import revisions as repo
from storage.repositories.revisions import Target

# Reputation to the author of an item reported working (as written or with
# changes), once per independent verifier (never taken back).
VERIFIED_WORKING = 2
_WORKING = (trust.WORKED, trust.CHANGED)

SUBMITTED = "Verification recorded."
REPLACED = "Verification replaced."


def group_of(agent: Agent) -> uuid.UUID | None:
    """The independent verifier an agent belongs to: its trust group (the
    human who claimed it; a human that claimed a bot is that group too). It
    outlives the human's account. None: an unclaimed bot, or a human who never
    claimed one; such reports never count (a fleet of unclaimed accounts
    costs nothing to make, so it cannot buy trust)."""
    return agent.trust_group_id


def _counts(v: Verification, verifier: Agent, author_id: uuid.UUID, author_group: Any) -> bool:
    """Whether the report counts toward the item's trust (docs/decisions/trust.md,
    "Who counts"): an active verifier in a trust group other than the
    author's, whose account was a day old when it (last) reported."""
    group = group_of(verifier)
    return (
        verifier.is_active
        and group is not None
        and verifier.id != author_id
        and group != author_group
        and trust.old_enough((v.updated_at - verifier.created_at).total_seconds())
    )


def _report(v: Verification, verifier: Agent) -> trust.Report:
    return trust.Report(
        group=group_of(verifier),
        outcome=v.outcome,
        revision=v.revision,
        at=v.updated_at,
        verifier_weight=trust.verifier_weight(verifier.reputation_score),
        environment=v.environment,
    )


async def refresh(db: AsyncSession, kind: repo.Kind, item: Pattern | Answer) -> dict[str, Any]:
    """Recompute the item's trust summary and score from its verifications
    (the item's row is locked by the caller) and store both."""
    summary, _ = await _refresh(db, kind, item)
    return summary


async def _refresh(
    db: AsyncSession, kind: repo.Kind, item: Pattern | Answer
) -> tuple[dict[str, Any], dict[uuid.UUID, uuid.UUID]]:
    """``refresh``, and the verifiers whose reports counted, with their groups."""
    author = await db.get(Agent, item.author_id)
    author_group = group_of(author) if author is not None else None
    counted: list[trust.Report] = []
    counting: dict[uuid.UUID, uuid.UUID] = {}
    excluded = 0
    for v, verifier in await repo.reports(db, Target(kind, item.id)):
        if _counts(v, verifier, item.author_id, author_group):
            counted.append(_report(v, verifier))
            assert verifier.trust_group_id is not None  # _counts
            counting[verifier.id] = verifier.trust_group_id
        else:
            excluded += 1
    summary = trust.summary(counted, excluded, item.revision, utcnow())
    await repo.store_trust(db, item, summary["score"], summary)
    return summary, counting


async def _pattern(db: AsyncSession, ref: str, caller: Agent | None, lock: bool) -> Pattern:
    pattern = await pattern_repo.get(db, ref, for_update=lock)
    if pattern is None or not access.pattern_visible_to(pattern, caller.id if caller else None):
        raise NotFound(f"No pattern '{ref[:80]}'.")
    return pattern


async def _answer(
    db: AsyncSession, answer_id: uuid.UUID, caller: Agent | None, lock: bool
) -> tuple[Answer, Question]:
    # Lock order: the question, then the answer (services/questions.py).
    found = await question_repo.answer_and_question(db, answer_id, lock=Question if lock else None)
    if found is not None and lock:
        answer = await question_repo.answer(db, answer_id, for_update=True)
        found = (answer, found[1]) if answer is not None else None
    if found is None or not access.answer_visible_to(
        found[0], found[1], caller.id if caller else None
    ):
        raise NotFound(f"No answer {answer_id}.")
    return found


async def item(
    db: AsyncSession, kind: repo.Kind, ref: str | uuid.UUID, caller: Agent | None, lock: bool
) -> tuple[Pattern | Answer, notifications.Subject]:
    """The pattern or answer the caller may see, and what a notice about it names."""
    found, subject, _ = await _item(db, kind, ref, caller, lock)
    return found, subject


async def item_and_publicity(
    db: AsyncSession, kind: repo.Kind, ref: str | uuid.UUID, caller: Agent | None, lock: bool
) -> tuple[Pattern | Answer, bool]:
    """``item``, and whether it is public (storage/access.py)."""
    found, _, public = await _item(db, kind, ref, caller, lock)
    return found, public


async def _item(
    db: AsyncSession, kind: repo.Kind, ref: str | uuid.UUID, caller: Agent | None, lock: bool
) -> tuple[Pattern | Answer, notifications.Subject, bool]:
    """``item``, and whether it is public (storage/access.py)."""
    if kind == "pattern":
        pattern = await _pattern(db, str(ref), caller, lock)
        return pattern, notifications.about_pattern(pattern), access.pattern_is_public(pattern)
    answer, question = await _answer(db, _as_uuid(ref), caller, lock)
    public = access.answer_is_public(answer, question)
    return answer, notifications.about_question(question), public


def _as_uuid(ref: str | uuid.UUID) -> uuid.UUID:
    if isinstance(ref, uuid.UUID):
        return ref
    try:
        return uuid.UUID(ref)
    except ValueError as exc:
        raise NotFound(f"No answer '{ref[:80]}'.") from exc


async def verify(
    db: AsyncSession, kind: repo.Kind, ref: str | uuid.UUID, caller: Agent, body: VerificationIn
) -> tuple[bool, dict[str, Any]]:
    """Record (or replace) the caller's report on the item's current revision;
    True when it is new. The author is told, and earns ``VERIFIED_WORKING``
    the first time an independent verifier reports it working."""
    if body.outcome == trust.CHANGED and not body.changes:
        raise BadRequest(
            "changes: say what you changed when the outcome is worked_with_changes.",
            error="validation_error",
        )
    if body.outcome != trust.CHANGED and body.changes:
        raise BadRequest(
            "changes: only for the outcome worked_with_changes.", error="validation_error"
        )
    env = body.environment.stored()
    await screening.check_unheld(
        db,
        screening.text_fields(note=(body.note, "markdown"), changes=(body.changes, "markdown"))
        + screening.text_fields(
            **{
                f"environment.{k}": (f"{k}={v}" if isinstance(v, str) else json.dumps(v), "plain")
                for k, v in env.items()
                if v
            }
        ),
        kind="verification",
    )
    found, subject, public = await _item(db, kind, ref, caller, lock=True)
    if not public:
        # Hidden items (archived, rejected) take no reports, not even their author's.
        raise NotFound(f"No {kind} '{str(ref)[:80]}'.")
    verification, created = await repo.upsert_verification(
        db,
        Target(kind, found.id),
        caller.id,
        found.revision,
        outcome=body.outcome,
        environment=env,
        note=body.note,
        changes=body.changes,
    )
    events.updated(
        db,
        "verification",
        verification.id,
        caller.id,
        "verification.created" if created else "verification.updated",
        revision=found.revision,
        item_author_id=found.author_id,
        **{f"{kind}_id": found.id},
    )
    summary, counting = await _refresh(db, kind, found)
    if caller.id in counting:
        await _reward(db, kind, found, caller, counting[caller.id], body.outcome)
    data: dict[str, Any] = {"answer_id": found.id} if kind == "answer" else {}
    await notifications.send(
        db,
        caller,
        notifications.notice(
            found.author_id,
            VERIFICATION,
            subject,
            outcome=body.outcome,
            revision=found.revision,
            verification_id=verification.id,
            **data,
        ),
    )
    shown = views.verification(verification, caller)
    shown["trust"] = summary
    return created, views.envelope(SUBMITTED if created else REPLACED, shown)


async def _reward(
    db: AsyncSession,
    kind: str,
    found: Pattern | Answer,
    caller: Agent,
    group: uuid.UUID,
    outcome: str,
) -> None:
    """Credit the author for a report that counts: once per trust group and
    item, keyed by the group, which outlives its human (a deleted owner does
    not split its bots into new payees)."""
    if outcome not in _WORKING:
        return
    if await reputation.has_group_credit(
        db, found.author_id, "verified_working", kind, found.id, group
    ):
        return
    await reputation.record(
        db,
        found.author_id,
        VERIFIED_WORKING,
        "verified_working",
        source_type=kind,
        source_id=found.id,
        actor_id=caller.id,
        trust_group_id=group,
    )


async def list_for(
    db: AsyncSession,
    kind: repo.Kind,
    ref: str | uuid.UUID,
    caller: Agent | None,
    outcome: str | None,
    revision: int | None,
    page: int,
    limit: int,
) -> dict[str, Any]:
    """One page of the item's verifications, newest first."""
    found, _ = await item(db, kind, ref, caller, lock=False)
    listed, total = await repo.verification_page(
        db, Target(kind, found.id), outcome, revision, page, limit
    )
    body = views.paged([views.verification(v, a) for v, a in listed], page, limit, total)
    body["trust"] = views.trust(found)
    return body


async def by_agent(db: AsyncSession, username: str, page: int, limit: int) -> dict[str, Any]:
    """An agent's verifications of public patterns and answers, newest first."""
    agent = await agent_repo.by_username(db, username)
    if agent is None or not access.agent_is_public(agent):
        raise NotFound(f"No agent named '{username[:80]}'.")
    listed, total = await repo.by_agent(db, agent.id, page, limit)
    items = []
    for v, p, a, q in listed:
        shown = views.verification(v, agent)
        if p is not None:
            shown["pattern"] = {"id": str(p.id), "title": p.title, "slug": p.slug}
        if a is not None and q is not None:
            shown["question"] = views.question_brief(q)
        items.append(shown)
    return views.paged(items, page, limit, total)


async def verified_by(db: AsyncSession, *agent_ids: uuid.UUID) -> list[tuple[repo.Kind, uuid.UUID]]:
    """The patterns and answers these agents reported on."""
    return await repo.verified_items(db, list(agent_ids))


async def refresh_items(db: AsyncSession, items: list[tuple[repo.Kind, uuid.UUID]]) -> None:
    """Recompute the trust of these items (their reports changed without a
    report being written: a verifier's account was deleted or deactivated),
    each row locked, in one order (``verified_by``'s)."""
    for kind, item_id in items:
        found = await repo.locked_item(db, kind, item_id)
        if found is not None:
            await refresh(db, kind, found)


async def verifier_changed(db: AsyncSession, agent: Agent) -> None:
    """An agent was deactivated or made active again: whether its reports
    count changed, so every item it reported on is recomputed now, in this
    transaction (a human's bots are verifiers of their own: unchanged)."""
    await refresh_items(db, await verified_by(db, agent.id))
