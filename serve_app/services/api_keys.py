"""Key status, regeneration and revocation."""

from __future__ import annotations

from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.kit import hooks, keys
from serve_app.services import views
from serve_app.services.views import iso
from storage.models import Agent, ApiKey
from storage.repositories import agents as agent_repo
from storage.repositories import api_keys as key_repo


async def status(db: AsyncSession, agent: Agent, key: ApiKey | None) -> dict[str, Any]:
    """The live key's status: the one used for this call, or (for a human signed
    in with a session) the account's key if it has one."""
    key = key or await key_repo.live_for_agent(db, agent.id)
    if key is None:
        return {"data": {"has_key": False}}
    return {
        "data": {
            "has_key": True,
            "key_prefix": keys.key_preview(key.key_id),
            "created_at": iso(key.created_at),
            "last_used_at": iso(key.last_used_at),
        }
    }


async def regenerate(ctx: AppContext, db: AsyncSession, agent: Agent) -> dict[str, Any]:
    """Replace the live key: the old one stops working when this commits."""
    await agent_repo.lock(db, agent.id)
    await key_repo.revoke_all(db, agent.id)
    hooks.credentials_changed(db, agent.id)
    new_key = keys.generate_key()
    row = await key_repo.insert(
        db, agent.id, new_key.key_id, keys.hash_secret(ctx.secret, new_key.key)
    )
    return views.envelope(
        "New API key issued; the previous key no longer works. "
        "Store it now: it is shown only once.",
        {
            "api_key": new_key.key,
            "key_prefix": keys.key_preview(new_key.key_id),
            "created_at": iso(row.created_at),
        },
    )


async def revoke(db: AsyncSession, agent: Agent) -> dict[str, Any]:
    await agent_repo.lock(db, agent.id)
    await key_repo.revoke_all(db, agent.id)
    hooks.credentials_changed(db, agent.id)
    return views.envelope("API key revoked. Requests with it now get 401.")
