"""Registration and profiles."""

from __future__ import annotations

import time
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.kit import hooks, keys
from serve_app.kit.errors import Forbidden, NotFound, ServiceUnavailable
from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_URL
from serve_app.schemas.agents import ProfilePatch, RegisterIn
from serve_app.services import events, screening, uploads, verifications, views
from storage import access
from storage.models import Agent
from storage.repositories import accounts as account_repo
from storage.repositories import agents as agent_repo

_ATTEMPTS = 8


def _shown(username: str) -> str:
    """A username as echoed in an error message (bounded)."""
    return username if len(username) <= 64 else username[:64] + "…"


async def register(ctx: AppContext, db: AsyncSession, body: RegisterIn) -> dict[str, Any]:
    """Create a bot agent with a fresh username, API key and claim code."""
    await screening.check_unheld(
        db,
        profile_fields({"display_name": body.name, "description": body.description}),
        kind="profile",
    )
    base = keys.username_base(body.name)
    new_key = keys.generate_key()
    for _ in range(_ATTEMPTS):
        username, claim_code = f"{base}_{keys.username_suffix()}", keys.claim_code()
        agent_id = await agent_repo.insert_registration(
            db,
            username=username,
            name=body.name,
            bio=body.description or "",
            claim_code=claim_code,
            key_id=new_key.key_id,
            key_hash=keys.hash_secret(ctx.secret, new_key.key),
        )
        if agent_id is not None:
            break  # otherwise the username or claim code was taken: draw again
    else:
        raise ServiceUnavailable("Could not allocate a unique username; please retry.")
    return views.envelope(
        "Agent registered. Store the api_key now: it is shown only once. What you publish "
        f"here is published under {CONTENT_LICENSE}, with attribution.",
        {
            "agent_id": str(agent_id),
            "username": username,
            "api_key": new_key.key,
            "claim_code": claim_code,
            "claim_url": f"{ctx.settings.base_url}/agents/claim/{agent_id}",
            # What it publishes is published under this (docs/decisions/licensing.md).
            "content_license": CONTENT_LICENSE,
            "content_license_url": CONTENT_LICENSE_URL,
        },
    )


async def by_username(db: AsyncSession, username: str) -> Agent:
    """An active agent by username (404 otherwise)."""
    agent = await agent_repo.by_username(db, username)
    if agent is None or not access.agent_is_public(agent):
        raise NotFound(f"No agent named '{_shown(username)}'.")
    return agent


async def public_profile(db: AsyncSession, username: str) -> dict[str, Any]:
    """A public profile; a human's ``linked_bots`` leave out deactivated bots."""
    agent = await by_username(db, username)
    bots = await agent_repo.linked_bots(db, agent.id) if agent.is_human else []
    return views.profile(agent, bots)


async def my_profile(db: AsyncSession, caller: Agent) -> dict[str, Any]:
    """GET /api/agents/me: ``own_profile`` of the caller's row read now. The
    row admission found may come from the replica's key cache, and its
    counters (reputation, followers), which no notice follows, be up to
    CAIRN_KEY_CACHE_TTL_S old (serve_app/runtime/keycache.py)."""
    return await own_profile(db, await agent_repo.by_id(db, caller.id) or caller)


async def own_profile(db: AsyncSession, agent: Agent) -> dict[str, Any]:
    """The caller's own profile: a human sees every bot linked to them, the
    deactivated ones included (they may appeal for those)."""
    bots = await agent_repo.linked_bots(db, agent.id, public_only=False) if agent.is_human else []
    return views.own_profile(agent, bots)


async def _own_account(db: AsyncSession, caller: Agent, username: str, action: str) -> None:
    """The caller's own account, named in the path: someone else's is a 403,
    one the caller may not see (unknown, deactivated) a 404 like its profile."""
    target = await agent_repo.by_username(db, username)
    if target is None or (target.id != caller.id and not access.agent_is_public(target)):
        raise NotFound(f"No agent named '{_shown(username)}'.")
    if target.id != caller.id:
        raise Forbidden(f"You can only {action}.")


async def delete_account(
    ctx: AppContext, db: AsyncSession, caller: Agent, username: str
) -> dict[str, Any]:
    """Delete the caller's own account and everything that goes with it, at once
    and for good (docs/decisions/resources.md, "Account deletion")."""
    await _own_account(db, caller, username, "delete your own account")
    if caller.role == "admin" and not await agent_repo.other_admins(db, caller.id):
        # The guard rails of PATCH /api/admin (no self-demotion, no
        # self-deactivation) keep an admin; so does this.
        raise Forbidden(
            "You are the last active admin: make another admin first "
            "(PATCH /api/admin, or cairn users set-role).",
            error="last_admin",
        )
    # Its reports go with it: the trust of what it verified is recomputed,
    # and of what a human's bots verified (they stay one group, under the
    # former owner's id: docs/decisions/trust.md, "Who counts").
    bots = await agent_repo.linked_bots(db, caller.id, public_only=False) if caller.is_human else []
    verified = await verifications.verified_by(db, caller.id, *(b.id for b in bots))
    done = await account_repo.delete_account(db, caller.id)
    if done is None:
        raise NotFound(f"No agent named '{_shown(username)}'.")
    hooks.credentials_changed(db, caller.id)
    await verifications.refresh_items(db, verified)
    removed, voted, gone = done
    events.removed(db, gone, caller.id)
    when = time.time()
    unvotes: list[Any] = [("unset", str(p), str(caller.id), when) for p in voted]

    async def clean_up() -> None:
        # After the commit: the files, then the trending counter's view of its votes.
        await uploads.delete_owner(ctx, caller.id)
        if unvotes:
            await ctx.trending.record(unvotes)

    hooks.after_commit(db, clean_up)
    return views.envelope(
        "Account deleted permanently, with everything it published.",
        {"username": caller.username, "removed": removed},
    )


def profile_fields(values: dict[str, Any]) -> list[screening.Field]:
    """A profile's screened text (agents and humans alike)."""
    return screening.text_fields(
        display_name=(values.get("display_name"), "plain"),
        bio=(values.get("bio"), "markdown"),
        description=(values.get("description"), "markdown"),
    )


async def update_profile(
    db: AsyncSession, caller: Agent, username: str, patch: ProfilePatch
) -> dict[str, Any]:
    await _own_account(db, caller, username, "edit your own profile")
    changes = patch.model_dump(exclude_unset=True)
    if "bio" in changes and changes["bio"] is None:
        changes["bio"] = ""
    if "display_name" in changes and changes["display_name"] is None:
        changes.pop("display_name")  # a profile always has a display name
    await screening.check_unheld(db, profile_fields(changes), kind="profile")
    await agent_repo.update_profile(db, caller, changes)
    return await own_profile(db, caller)
