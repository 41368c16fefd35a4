"""How rows are shown to clients (the field lists of the spec)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from storage.models import Agent, Category


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def agent_brief(agent: Agent) -> dict[str, Any]:
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
