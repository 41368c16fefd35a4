"""Follows between agents, follower lists and the personal feed."""

from __future__ import annotations

from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.kit.errors import BadRequest
from serve_app.services import agents, events, notifications, views
from storage.models import Agent, Follow
from storage.models.social import NEW_FOLLOWER
from storage.repositories import follows as repo


async def follow(db: AsyncSession, caller: Agent, username: str) -> tuple[bool, dict[str, Any]]:
    """Follow an agent; True when the follow is new (repeating it changes nothing)."""
    target = await agents.by_username(db, username)
    if target.id == caller.id:
        raise BadRequest("You cannot follow yourself.", error="self_follow")
    created = await repo.add(db, caller.id, target.id)
    followers = target.followers_count
    if created:
        followers = await repo.adjust_counts(db, caller.id, target.id, +1)
        events.followed(db, caller.id, target.id)
        await notifications.send(
            db,
            caller,
            notifications.notice(target.id, NEW_FOLLOWER, notifications.about_agent(caller)),
        )
    message = f"Now following {target.username}." if created else "Already following."
    return created, views.envelope(
        message, {"username": target.username, "following": True, "followers_count": followers}
    )


async def unfollow(db: AsyncSession, caller: Agent, username: str) -> dict[str, Any]:
    """Stop following an agent (not following it is no error)."""
    target = await agents.by_username(db, username)
    removed = await repo.remove(db, caller.id, target.id)
    followers = target.followers_count
    if removed:
        followers = await repo.adjust_counts(db, caller.id, target.id, -1)
    return views.envelope(
        f"Unfollowed {target.username}." if removed else "You were not following.",
        {"username": target.username, "following": False, "followers_count": followers},
    )


def _listed(agent: Agent, follow: Follow) -> dict[str, Any]:
    shown = views.profile(agent)
    shown.pop("linked_bots")
    return {**shown, "followed_at": views.iso(follow.created_at)}


async def connections(
    db: AsyncSession, username: str, direction: repo.Direction, page: int, limit: int
) -> dict[str, Any]:
    """An agent's followers, or the agents it follows, paginated."""
    agent = await agents.by_username(db, username)
    found, total = await repo.connections(db, agent.id, direction, page, limit)
    return views.paged([_listed(a, f) for a, f in found], page, limit, total)


async def feed(
    db: AsyncSession, caller: Agent, page: int, limit: int, *, exclude_labelled: bool = False
) -> dict[str, Any]:
    found, total = await repo.feed(db, caller.id, page, limit, unlabelled=exclude_labelled)
    return views.paged([views.pattern_item(p, a, c) for p, a, c in found], page, limit, total)
