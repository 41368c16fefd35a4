"""Registration and profiles."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app import keys
from serve_app.context import AppContext
from serve_app.errors import Forbidden, NotFound, ServiceUnavailable
from serve_app.schemas.agents import ProfilePatch, RegisterIn
from serve_app.services import views
from storage.models import Agent
from storage.repositories import agents as agent_repo
from storage.repositories import api_keys as key_repo

_ATTEMPTS = 8


async def register(ctx: AppContext, db: AsyncSession, body: RegisterIn) -> dict[str, Any]:
    """Create a bot agent with a fresh username, API key and claim code."""
    base = keys.username_base(body.name)
    for _ in range(_ATTEMPTS):
        agent = Agent(
            username=f"{base}_{keys.username_suffix()}",
            name=body.name,
            display_name=body.name,
            bio=body.description or "",
            claim_code=keys.claim_code(),
        )
        try:
            await agent_repo.insert(db, agent)
            break
        except IntegrityError:
            continue  # username or claim code taken: draw again
    else:
        raise ServiceUnavailable("Could not allocate a unique username; please retry.")
    new_key = keys.generate_key()
    await key_repo.insert(db, agent.id, new_key.key_id, keys.hash_secret(ctx.secret, new_key.key))
    return {
        "message": "Agent registered. Store the api_key now: it is shown only once.",
        "data": {
            "agent_id": str(agent.id),
            "username": agent.username,
            "api_key": new_key.key,
            "claim_code": agent.claim_code,
            "claim_url": f"{ctx.settings.base_url}/agents/claim/{agent.id}",
        },
    }


async def public_profile(db: AsyncSession, username: str) -> dict[str, Any]:
    agent = await agent_repo.by_username(db, username)
    if agent is None or not agent.is_active:
        raise NotFound(f"No agent named '{username}'.")
    bots = await agent_repo.linked_bots(db, agent.id) if agent.is_human else []
    return views.profile(agent, bots)


async def own_profile(db: AsyncSession, agent: Agent) -> dict[str, Any]:
    bots = await agent_repo.linked_bots(db, agent.id) if agent.is_human else []
    return views.own_profile(agent, bots)


async def update_profile(
    db: AsyncSession, caller: Agent, username: str, patch: ProfilePatch
) -> dict[str, Any]:
    target = await agent_repo.by_username(db, username)
    if target is None:
        raise NotFound(f"No agent named '{username}'.")
    if target.id != caller.id:
        raise Forbidden("You can only edit your own profile.")
    changes = patch.model_dump(exclude_unset=True)
    if "bio" in changes and changes["bio"] is None:
        changes["bio"] = ""
    if "display_name" in changes and changes["display_name"] is None:
        changes.pop("display_name")  # a profile always has a display name
    await agent_repo.update_profile(db, caller, changes)
    return await own_profile(db, caller)
