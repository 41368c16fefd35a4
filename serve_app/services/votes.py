"""Votes on any target: one per agent, switchable, removable, with reputation.

The caller locks the target row first (SELECT … FOR UPDATE), so every change
to one target's votes is serialised and the stored score stays exactly the
sum of its votes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import Forbidden
from serve_app.services import views
from storage.models import Answer, Comment, Pattern, Question
from storage.repositories import reputation, rows
from storage.repositories import votes as repo

VALUES = {"upvote": 1, "downvote": -1}
NAMES = {1: "upvote", -1: "downvote"}
# Reputation of the target's author per upvote and per downvote
# (spec for questions and answers; docs/decisions/resources.md for patterns and comments).
REPUTATION: dict[str, tuple[int, int]] = {
    "pattern": (10, -2),
    "comment": (0, 0),
    "question": (5, -2),
    "answer": (10, -2),
}

# A votable row (locked by the caller): it has id, author_id and vote_score.
Votable = Pattern | Comment | Question | Answer
# Told of every change that lands: (new value, or 0 when withdrawn; when).
OnChange = Callable[[int, datetime], None]


def state(value: int | None) -> dict[str, Any]:
    """The caller's vote on a target, as the vote-check read shows it."""
    return {"has_voted": bool(value), "vote_type": NAMES.get(value) if value else None}


async def current_state(
    db: AsyncSession, voter_id: uuid.UUID, target_type: str, target_id: uuid.UUID
) -> dict[str, Any]:
    vote = await repo.current(db, voter_id, target_type, target_id)
    return state(vote.value if vote else None)


async def _add_to_score(db: AsyncSession, target: Votable, delta: int) -> int:
    return await rows.add_to_counter(db, type(target), target.id, "vote_score", delta)


async def _reputation(
    db: AsyncSession,
    target_type: str,
    target_id: uuid.UUID,
    author_id: uuid.UUID,
    voter_id: uuid.UUID,
    value: int,
    sign: int,
) -> None:
    """Apply (sign=1) or reverse (sign=-1) the reputation effect of one vote."""
    up, down = REPUTATION[target_type]
    delta = (up if value > 0 else down) * sign
    kind = NAMES[value]
    reason = f"{target_type}_{kind}d" if sign > 0 else f"{target_type}_{kind}_undone"
    await reputation.record(
        db,
        author_id,
        delta,
        reason,
        source_type=target_type,
        source_id=target_id,
        actor_id=voter_id,
    )


async def cast(
    db: AsyncSession,
    voter_id: uuid.UUID,
    target_type: str,
    target: Votable,
    vote_type: str,
    on_change: OnChange | None = None,
) -> dict[str, Any]:
    """Place or switch the caller's vote; repeating the same vote changes nothing."""
    target_id, author_id = target.id, target.author_id
    if voter_id == author_id:
        raise Forbidden(f"You cannot vote on your own {target_type}.", error="own_content")
    value = VALUES[vote_type]
    existing = await repo.current(db, voter_id, target_type, target_id)
    old = existing.value if existing else 0
    score = target.vote_score
    if old != value:
        placed = await repo.put(db, existing, voter_id, target_type, target_id, value)
        score = await _add_to_score(db, target, value - old)
        if old:
            await _reputation(db, target_type, target_id, author_id, voter_id, old, -1)
        await _reputation(db, target_type, target_id, author_id, voter_id, value, +1)
        if on_change is not None:
            on_change(value, placed.updated_at)
    return views.envelope(
        f"{vote_type.capitalize()} recorded.", {"vote_type": vote_type, "vote_score": score}
    )


async def withdraw(
    db: AsyncSession,
    voter_id: uuid.UUID,
    target_type: str,
    target: Votable,
    on_change: OnChange | None = None,
) -> dict[str, Any]:
    """Remove the caller's vote, reversing its effect (no vote: nothing to do)."""
    existing = await repo.current(db, voter_id, target_type, target.id)
    if existing is None:
        return views.envelope(
            "No vote to remove.", {"vote_type": None, "vote_score": target.vote_score}
        )
    removed_at = await repo.remove(db, existing)
    score = await _add_to_score(db, target, -existing.value)
    await _reputation(db, target_type, target.id, target.author_id, voter_id, existing.value, -1)
    if on_change is not None:
        on_change(0, removed_at)
    return views.envelope("Vote removed.", {"vote_type": None, "vote_score": score})
