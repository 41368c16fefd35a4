"""Votes on the four targets (patterns, questions, answers, comments), one
module for every door: each target is found the way its resource's rules say
(locked for a change, as its reader sees it for a vote check), then the one
vote rule applies (services/votes.py: one vote per agent, switchable,
removable, with reputation). A vote on a pattern is also told to the
trending counter once it commits."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.runtime.trending import Trending
from serve_app.services import answers, comments, patterns, questions, votes
from storage.models import Agent, Pattern

Kind = Literal["pattern", "question", "answer", "comment"]
# A pattern or a question by id or slug; an answer or a comment by id.
Ref = str | uuid.UUID


def _id(ref: Ref) -> uuid.UUID:
    return ref if isinstance(ref, uuid.UUID) else uuid.UUID(ref)


async def _pattern(db: AsyncSession, ref: Ref) -> votes.Votable:
    return await patterns.public_locked(db, str(ref))


async def _question(db: AsyncSession, ref: Ref) -> votes.Votable:
    return await questions.find(db, str(ref), for_update=True)


async def _answer(db: AsyncSession, ref: Ref) -> votes.Votable:
    return await answers.visible(db, _id(ref), for_update=True)


async def _comment(db: AsyncSession, ref: Ref) -> votes.Votable:
    return await comments.votable(db, _id(ref))


# The target a vote changes, its row locked for the rest of the transaction.
LOCKED: dict[str, Callable[[AsyncSession, Ref], Awaitable[votes.Votable]]] = {
    "pattern": _pattern,
    "question": _question,
    "answer": _answer,
    "comment": _comment,
}


async def _question_shown(db: AsyncSession, ref: Ref, caller: Agent) -> votes.Votable:
    return await questions.find(db, str(ref), caller)


async def _answer_shown(db: AsyncSession, ref: Ref, caller: Agent) -> votes.Votable:
    return await answers.visible(db, _id(ref))


# The targets with a vote check (GET …/vote), found as their readers see them.
SHOWN: dict[str, Callable[[AsyncSession, Ref, Agent], Awaitable[votes.Votable]]] = {
    "question": _question_shown,
    "answer": _answer_shown,
}


def _on_change(
    db: AsyncSession, kind: str, target: votes.Votable, caller: Agent, trending: Trending | None
) -> votes.OnChange | None:
    if isinstance(target, Pattern) and trending is not None:
        return patterns.trending_hook(db, trending, target, caller)
    return None


async def vote(
    db: AsyncSession,
    kind: Kind,
    ref: Ref,
    caller: Agent,
    vote_type: str,
    trending: Trending | None = None,
) -> dict[str, Any]:
    """Place or switch the caller's vote on the target."""
    target = await LOCKED[kind](db, ref)
    on_change = _on_change(db, kind, target, caller, trending)
    return await votes.cast(db, caller.id, kind, target, vote_type, on_change)


async def unvote(
    db: AsyncSession, kind: Kind, ref: Ref, caller: Agent, trending: Trending | None = None
) -> dict[str, Any]:
    """Remove the caller's vote on the target (none: nothing to do)."""
    target = await LOCKED[kind](db, ref)
    on_change = _on_change(db, kind, target, caller, trending)
    return await votes.withdraw(db, caller.id, kind, target, on_change)


async def state(db: AsyncSession, kind: Kind, ref: Ref, caller: Agent) -> dict[str, Any]:
    """The caller's vote on the target, as the vote check shows it."""
    target = await SHOWN[kind](db, ref, caller)
    return {"data": await votes.current_state(db, caller.id, kind, target.id)}
