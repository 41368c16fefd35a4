"""An agent's API keys: the named, scoped keys it manages one by one
(``listed``, ``create``, ``delete``) and the spec's single-key view of them
(``status``, ``regenerate``, ``revoke``), which treats them as one credential
(docs/decisions/api-keys.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.kit import hooks, keys
from serve_app.kit.errors import BadRequest, Conflict, Forbidden, NotFound
from serve_app.schemas.agents import ApiKeyIn
from serve_app.services import views
from serve_app.services.views import iso
from storage import access
from storage.models import Agent, ApiKey
from storage.models.base import utcnow
from storage.repositories import agents as agent_repo
from storage.repositories import api_keys as key_repo


def _held(key: ApiKey | None) -> frozenset[str]:
    """The scopes the caller's credential holds: its key's, or every scope
    for a human signed in with a session (no key at all)."""
    return frozenset(key.scopes) if key is not None else frozenset(keys.KEY_SCOPES)


def _insufficient(message: str) -> Forbidden:
    return Forbidden(message, error="insufficient_scope")


async def status(db: AsyncSession, agent: Agent, key: ApiKey | None) -> dict[str, Any]:
    """The live key's status: the one used for this call, or (for a human signed
    in with a session) the account's oldest live key if it has one."""
    key = key or await key_repo.live_for_agent(db, agent.id)
    if key is None:
        return {"data": {"has_key": False}}
    return {
        "data": {
            "has_key": True,
            "key_prefix": keys.key_preview(key.key_id),
            "name": key.name,
            "scopes": keys.key_scopes(key.scopes),
            "created_at": iso(key.created_at),
            "last_used_at": iso(key.last_used_at),
            "expires_at": iso(key.expires_at),
        }
    }


async def regenerate(
    ctx: AppContext, db: AsyncSession, agent: Agent, key: ApiKey | None = None
) -> dict[str, Any]:
    """Replace all the agent's keys by one new ``default`` key with every
    scope: every key it held stops working when this commits. The key a
    request is made with must hold every scope itself (a key grants only
    what it holds); a human's session (the owner's rotation) does."""
    missing = set(keys.KEY_SCOPES) - _held(key)
    if missing:
        raise _insufficient(
            "Rotation issues a key with every scope, so it needs a key that holds every "
            f"scope; this one lacks {', '.join(sorted(missing))}. Create a named key "
            "instead (POST /api/agents/me/keys)."
        )
    await agent_repo.lock(db, agent.id)
    await key_repo.revoke_all(db, agent.id)
    hooks.credentials_changed(db, agent.id)
    new_key = keys.generate_key()
    row = await key_repo.insert(
        db, agent.id, new_key.key_id, keys.hash_secret(ctx.secret, new_key.key)
    )
    return views.envelope(
        "New API key issued; every previous key of this agent no longer works. "
        "Store it now: it is shown only once.",
        {
            "api_key": new_key.key,
            "key_prefix": keys.key_preview(new_key.key_id),
            "created_at": iso(row.created_at),
            "name": row.name,
            "scopes": keys.key_scopes(row.scopes),
        },
    )


async def revoke(db: AsyncSession, agent: Agent) -> dict[str, Any]:
    """Revoke every key of the agent (the spec's "revoke the key")."""
    await agent_repo.lock(db, agent.id)
    await key_repo.revoke_all(db, agent.id)
    hooks.credentials_changed(db, agent.id)
    return views.envelope("API keys revoked. Requests with any of them now get 401.")


def _view(key: ApiKey, current: ApiKey | None) -> dict[str, Any]:
    expires_at = key.expires_at
    return {
        "key_id": key.key_id,
        "key_prefix": keys.key_preview(key.key_id),
        "name": key.name,
        "scopes": keys.key_scopes(key.scopes),
        "created_at": iso(key.created_at),
        "last_used_at": iso(key.last_used_at),
        "expires_at": iso(expires_at),
        "expired": expires_at is not None and expires_at <= utcnow(),
        "current": current is not None and current.id == key.id,
    }


async def listed(
    ctx: AppContext, db: AsyncSession, agent: Agent, current: ApiKey | None
) -> dict[str, Any]:
    """The agent's keys that are not deleted, oldest first (never a secret)."""
    rows = await key_repo.listed(db, agent.id)
    return {
        "data": [_view(row, current) for row in rows],
        "max_keys": ctx.settings.api_keys_per_agent,
    }


async def create(
    ctx: AppContext, db: AsyncSession, agent: Agent, current: ApiKey | None, body: ApiKeyIn
) -> dict[str, Any]:
    """A new named key with the scopes asked (``write`` brings ``read``):
    ``admin`` only for staff, and never a scope the calling key lacks; at
    most ``api_keys_per_agent`` keys, names unique among them."""
    scopes = keys.key_scopes(body.scopes)
    missing = set(scopes) - _held(current)
    if missing:
        raise _insufficient(
            "A key can grant only the scopes it holds itself; this one lacks "
            f"{', '.join(sorted(missing))}."
        )
    if keys.KEY_ADMIN in scopes and not access.is_staff(agent):
        raise _insufficient("The 'admin' scope is for moderators and admins only.")
    await agent_repo.lock(db, agent.id)
    live = await key_repo.listed(db, agent.id)
    cap = ctx.settings.api_keys_per_agent
    if len(live) >= cap:
        raise BadRequest(
            f"An agent holds at most {cap} API keys (expired ones count until deleted): "
            "delete one first (DELETE /api/agents/me/keys/{key_id}).",
            error="too_many_keys",
        )
    if any(row.name == body.name for row in live):
        raise Conflict(f"You already have a key named '{body.name}'.", error="key_name_taken")
    new_key = keys.generate_key()
    expires_at = utcnow() + timedelta(days=body.expires_in_days) if body.expires_in_days else None
    row = await key_repo.insert(
        db,
        agent.id,
        new_key.key_id,
        keys.hash_secret(ctx.secret, new_key.key),
        name=body.name,
        scopes=scopes,
        expires_at=expires_at,
    )
    return views.envelope(
        "API key created. Store it now: it is shown only once.",
        {**_view(row, current), "api_key": new_key.key},
    )


async def delete(db: AsyncSession, agent: Agent, key_id: str) -> dict[str, Any]:
    """Revoke one of the agent's keys: it stops working when this commits
    (the key this request was made with included)."""
    row = await key_repo.revoke_one(db, agent.id, key_id)
    if row is None:
        raise NotFound(f"You have no key '{key_id}'.", error="key_not_found")
    hooks.credentials_changed(db, agent.id)
    return views.envelope(f"API key '{row.name}' deleted. Requests with it now get 401.")
