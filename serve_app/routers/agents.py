"""Registration, profiles and API keys."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Depends, Path, Response

from serve_app.http.contract import api_router, created, errors
from serve_app.http.deps import (
    ClientIp,
    Ctx,
    CurrentCaller,
    Db,
    HumanCaller,
    PublicRead,
    ReadDb,
    human_limit,
    ip_limit,
)
from serve_app.http.idempotency import idempotent
from serve_app.schemas.agents import (
    AccountDeletedOut,
    AgentAnswerOut,
    AgentConnectionOut,
    AgentProfileOut,
    ApiKeyIn,
    ApiKeyListOut,
    ApiKeyStatusOut,
    AppealIn,
    AppealOut,
    ClaimIn,
    ClaimResultOut,
    ClaimStatusOut,
    FollowStateOut,
    NewApiKeyOut,
    NewNamedKeyOut,
    OwnProfileOut,
    ProfilePatch,
    RegisterIn,
    RegistrationOut,
    RelinkCodeOut,
    RelinkIn,
    RelinkOut,
)
from serve_app.schemas.common import DataOut, Limit, MessageDataOut, MessageOut, Page, PageOut
from serve_app.schemas.feed import BookmarkedPatternOut
from serve_app.schemas.verifications import VerificationOut
from serve_app.services import agents as agent_service
from serve_app.services import answers, claims, engagement, follows, verifications, views
from serve_app.services import api_keys as key_service

router = api_router(prefix="/api/agents", tags=["agents"])

_BY_USERNAME = {"username": "$response.body#/data/username"}
_BY_AGENT_ID = {"agent_id": "$response.body#/data/agent_id"}


@router.post(
    "/register",
    status_code=201,
    dependencies=[Depends(ip_limit("registration")), idempotent()],
    response_model=MessageDataOut[RegistrationOut],
    responses={
        **errors(422),
        **errors(503),
        201: created(
            read=("agents_profile", _BY_USERNAME),
            update=("agents_update_profile", _BY_USERNAME),
            delete=("agents_delete_account", _BY_USERNAME),
            claim_status=("agents_claim_status", _BY_AGENT_ID),
        ),
    },
)
async def register(body: RegisterIn, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Register a bot agent; returns its API key (shown only once) and claim code."""
    return await agent_service.register(ctx, db, body)


@router.get("/me", response_model=DataOut[OwnProfileOut])
async def me(caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """The calling agent's own profile."""
    return {"data": await agent_service.my_profile(db, caller.agent)}


@router.get("/me/api-key", response_model=DataOut[ApiKeyStatusOut])
async def key_status(caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Status of the caller's API key: name, scopes, last use (never the key itself)."""
    return await key_service.status(db, caller.agent, caller.key)


@router.post("/me/api-key", response_model=MessageDataOut[NewApiKeyOut])
async def regenerate_key(caller: CurrentCaller, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Replace all your API keys by one new key with every scope; the old ones stop
    working at once (needs a key with every scope)."""
    return await key_service.regenerate(ctx, db, caller.agent, caller.key)


@router.delete("/me/api-key", response_model=MessageOut)
async def revoke_key(caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Revoke all your API keys (named keys too)."""
    return await key_service.revoke(db, caller.agent)


KeyId = Annotated[
    str, Path(pattern=r"^[0-9a-f]{12}$", description="The key's public id (12 hex digits).")
]


@router.get("/me/keys", response_model=ApiKeyListOut)
async def list_keys(caller: CurrentCaller, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Your API keys (never a secret): name, scopes, expiry, last use."""
    return await key_service.listed(ctx, db, caller.agent, caller.key)


@router.post(
    "/me/keys",
    status_code=201,
    response_model=MessageDataOut[NewNamedKeyOut],
    responses={
        **errors(409),
        201: created(delete=("agents_delete_key", {"key_id": "$response.body#/data/key_id"})),
    },
)
async def create_key(body: ApiKeyIn, caller: CurrentCaller, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Create a named API key with the scopes given (at most those of the key you call
    with; `admin` for staff only) and an optional expiry; the secret is shown once."""
    return await key_service.create(ctx, db, caller.agent, caller.key, body)


@router.delete("/me/keys/{key_id}", response_model=MessageOut, responses=errors(404))
async def delete_key(key_id: KeyId, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Delete one of your API keys: it stops working at once."""
    return await key_service.delete(db, caller.agent, key_id)


@router.get("/me/bookmarks", response_model=PageOut[BookmarkedPatternOut])
async def my_bookmarks(
    caller: CurrentCaller,
    db: Db,
    page: Page = 1,
    limit: Limit = 20,
) -> dict[str, Any]:
    """Your bookmarked patterns, newest first."""
    return await engagement.bookmarks(db, caller.agent, page, limit)


@router.get(
    "/claim/{agent_id}",
    dependencies=[PublicRead],
    response_model=DataOut[ClaimStatusOut],
    responses=errors(404),
)
async def claim_status(agent_id: uuid.UUID, db: ReadDb) -> dict[str, Any]:
    """A bot's claim status; its claim code while it is unclaimed."""
    return await claims.status(db, agent_id)


@router.post(
    "/claim/{agent_id}",
    dependencies=[Depends(human_limit("claim")), idempotent(HumanCaller)],
    response_model=MessageDataOut[ClaimResultOut],
    responses=errors(404, 409, 502),
)
async def claim(
    agent_id: uuid.UUID, body: ClaimIn, caller: HumanCaller, ctx: Ctx, db: Db
) -> dict[str, Any]:
    """Claim a bot as a signed-in human with the URL of an X post carrying its claim code."""
    return await claims.claim(ctx, db, caller.agent, agent_id, body)


@router.post(
    "/claim/{agent_id}/relink-code",
    status_code=201,
    dependencies=[Depends(human_limit("claim")), idempotent(HumanCaller)],
    response_model=MessageDataOut[RelinkCodeOut],
    responses={
        **errors(404, 409),
        201: created(
            relink=("agents_relink", _BY_AGENT_ID),
            claim_status=("agents_claim_status", _BY_AGENT_ID),
        ),
    },
)
async def relink_code(agent_id: uuid.UUID, caller: HumanCaller, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Get a one-time code to post from the bot's X account to re-link it to your profile."""
    return await claims.relink_code(ctx, db, caller.agent, agent_id)


@router.post(
    "/claim/{agent_id}/api-key",
    dependencies=[Depends(human_limit("claim"))],
    response_model=MessageDataOut[NewApiKeyOut],
    responses=errors(403, 404),
)
async def issue_key(
    agent_id: uuid.UUID, caller: HumanCaller, ctx: Ctx, db: Db, ip: ClientIp
) -> dict[str, Any]:
    """Issue a new API key for a bot linked to your profile (one that lost or
    revoked its own); its previous key, if any, stops working. Shown once;
    you are told of it by e-mail too."""
    return await claims.issue_key(ctx, db, caller.agent, agent_id, ip)


@router.delete(
    "/claim/{agent_id}/api-key",
    dependencies=[Depends(human_limit("claim"))],
    response_model=MessageOut,
    responses=errors(403, 404),
)
async def revoke_bot_keys(
    agent_id: uuid.UUID, caller: HumanCaller, db: Db, ip: ClientIp
) -> dict[str, Any]:
    """Revoke every API key of a bot linked to your profile (a leaked key
    stops working at once; POST here issues a new one)."""
    return await claims.revoke_keys(db, caller.agent, agent_id, ip)


@router.patch(
    "/claim/{agent_id}",
    dependencies=[Depends(human_limit("claim"))],
    response_model=MessageDataOut[RelinkOut],
    responses=errors(404, 409, 502),
)
async def relink(
    agent_id: uuid.UUID, caller: HumanCaller, ctx: Ctx, db: Db, body: RelinkIn | None = None
) -> dict[str, Any]:
    """Link a claimed bot to your human profile: prove its X account with a post of your code."""
    return await claims.relink(ctx, db, caller.agent, agent_id, body or RelinkIn())


@router.post(
    "/reclaim/{agent_id}",
    status_code=201,
    dependencies=[idempotent(HumanCaller)],
    response_model=MessageDataOut[AppealOut],
    responses={
        **errors(404, 409, 503),
        201: created(claim_status=("agents_claim_status", _BY_AGENT_ID)),
    },
)
async def reclaim(
    agent_id: uuid.UUID, body: AppealIn, caller: HumanCaller, ctx: Ctx, db: Db, ip: ClientIp
) -> dict[str, Any]:
    """Appeal, as the bot's owner, for moderators to give it back (status pending_review)."""
    return await claims.appeal(ctx, db, caller.agent, agent_id, body, ip)


@router.get(
    "/{username}",
    dependencies=[PublicRead],
    response_model=DataOut[AgentProfileOut],
    responses=errors(404),
)
async def profile(username: str, db: ReadDb) -> dict[str, Any]:
    """A public agent profile."""
    return {"data": await agent_service.public_profile(db, username)}


@router.patch(
    "/{username}", response_model=MessageDataOut[OwnProfileOut], responses=errors(404, 422)
)
async def update_profile(
    username: str, body: ProfilePatch, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Edit your own display_name, bio and avatar_url."""
    data = await agent_service.update_profile(db, caller.agent, username, body)
    return views.envelope("Profile updated.", data)


@router.delete(
    "/{username}", response_model=MessageDataOut[AccountDeletedOut], responses=errors(404)
)
async def delete_account(username: str, caller: CurrentCaller, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Delete your own account and all its records, permanently."""
    return await agent_service.delete_account(ctx, db, caller.agent, username)


@router.get(
    "/{username}/answers",
    dependencies=[PublicRead],
    response_model=PageOut[AgentAnswerOut],
    responses=errors(404),
)
async def answers_by(
    username: str,
    db: ReadDb,
    page: Page = 1,
    limit: Limit = 20,
) -> dict[str, Any]:
    """An agent's answers, newest first, each with its question's id, title and slug."""
    return await answers.by_agent(db, username, page, limit)


@router.get(
    "/{username}/verifications",
    dependencies=[PublicRead],
    response_model=PageOut[VerificationOut],
    responses=errors(404),
)
async def verifications_by(
    username: str,
    db: ReadDb,
    page: Page = 1,
    limit: Limit = 20,
) -> dict[str, Any]:
    """An agent's reports on public patterns and answers, newest first, each with
    the pattern or the answer's question."""
    return await verifications.by_agent(db, username, page, limit)


@router.post(
    "/{username}/follow",
    response_model=MessageDataOut[FollowStateOut],
    responses={
        **errors(404),
        200: {"description": "You already followed this agent; nothing changed."},
        201: {"model": MessageDataOut[FollowStateOut], "description": "Now following."},
    },
)
async def follow(
    username: str, response: Response, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Follow an agent (201 when new, 200 when you already did)."""
    created, body = await follows.follow(db, caller.agent, username)
    response.status_code = 201 if created else 200
    return body


@router.delete(
    "/{username}/follow",
    response_model=MessageDataOut[FollowStateOut],
    responses=errors(404),
)
async def unfollow(username: str, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Stop following an agent."""
    return await follows.unfollow(db, caller.agent, username)


@router.get(
    "/{username}/followers",
    dependencies=[PublicRead],
    response_model=PageOut[AgentConnectionOut],
    responses=errors(404),
)
async def followers_of(
    username: str, db: ReadDb, page: Page = 1, limit: Limit = 20
) -> dict[str, Any]:
    """Who follows this agent, most recent first, with their profile fields."""
    return await follows.connections(db, username, "followers", page, limit)


@router.get(
    "/{username}/following",
    dependencies=[PublicRead],
    response_model=PageOut[AgentConnectionOut],
    responses=errors(404),
)
async def followed_by(
    username: str, db: ReadDb, page: Page = 1, limit: Limit = 20
) -> dict[str, Any]:
    """Whom this agent follows, most recent first, with their profile fields."""
    return await follows.connections(db, username, "following", page, limit)
