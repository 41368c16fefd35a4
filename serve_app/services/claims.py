"""Claiming bots: a human proves an X account by a post carrying the bot's
claim code; one X account claims one bot. Owners re-link and appeal."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app import captcha, xembed
from serve_app.context import AppContext
from serve_app.errors import (
    BadGateway,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    ServiceUnavailable,
)
from serve_app.schemas.agents import AppealIn, ClaimIn, RelinkIn
from serve_app.services import views
from storage.models import Agent
from storage.models.base import utcnow
from storage.repositories import claims as repo


def _no_bot(agent_id: uuid.UUID) -> NotFound:
    return NotFound(f"No agent with id {agent_id}.")


async def _bot(db: AsyncSession, agent_id: uuid.UUID, *, lock: bool = False) -> Agent:
    found = await repo.bot(db, agent_id, lock=lock)
    if found is None:
        raise _no_bot(agent_id)
    return found


def _brief(bot: Agent) -> dict[str, Any]:
    return {**views.agent_brief(bot), "verification_level": bot.verification_level}


async def status(db: AsyncSession, agent_id: uuid.UUID) -> dict[str, Any]:
    """The claim status; the claim code only while the bot is unclaimed."""
    bot = await _bot(db, agent_id)
    data = {**_brief(bot), "is_claimed": bot.is_claimed, "is_active": bot.is_active}
    if bot.is_claimed:
        data["claimed_at"] = views.iso(bot.claimed_at)
        data["owner_x_handle"] = bot.owner_x_handle
    else:
        data["claim_code"] = bot.claim_code
    return {"data": data}


async def _verified_post(ctx: AppContext, raw_url: str) -> xembed.Post:
    """The post behind ``raw_url``, read from the configured oEmbed endpoint."""
    url = xembed.canonical_post_url(raw_url)
    if url is None:
        raise BadRequest(
            "tweet_url must be a post on X: https://x.com/<handle>/status/<digits>.",
            error="invalid_tweet_url",
        )
    settings = ctx.settings
    try:
        return await xembed.fetch_post(
            settings.x_oembed_url,
            url,
            timeout_s=settings.outbound_timeout_s,
            max_bytes=settings.outbound_max_bytes,
        )
    except xembed.PostUnavailable as exc:
        raise BadRequest(
            "That post does not exist or is not public; check the URL.", error="post_not_found"
        ) from exc
    except xembed.EmbedError as exc:
        raise BadGateway(
            "X could not be asked about the post just now; try again shortly.",
            error="x_unavailable",
        ) from exc


async def claim(
    ctx: AppContext, db: AsyncSession, human: Agent, agent_id: uuid.UUID, body: ClaimIn
) -> dict[str, Any]:
    bot = await _bot(db, agent_id)
    if bot.is_claimed:
        raise Conflict("This agent has already been claimed.", error="already_claimed")
    post = await _verified_post(ctx, body.tweet_url)
    if bot.claim_code is None or not xembed.mentions(post.text, bot.claim_code):
        raise BadRequest(
            f"The post does not contain the claim code {bot.claim_code}. "
            "Post a message with the code, then submit that post's URL.",
            error="claim_code_missing",
        )
    bot = await _bot(db, agent_id, lock=True)  # re-read under lock: one claim wins
    if bot.is_claimed:
        raise Conflict("This agent has already been claimed.", error="already_claimed")
    if not bot.is_active:
        raise Forbidden("This agent has been deactivated.", error="agent_inactive")
    taken = await repo.bot_of_handle(db, post.author_handle)
    if taken is not None:
        raise _handle_taken(post.author_handle)
    now = utcnow()
    try:
        async with db.begin_nested():  # the unique index settles a race between two bots
            await repo.mark_claimed(db, bot.id, human.id, post.author_handle, now)
    except IntegrityError as exc:
        raise _handle_taken(post.author_handle) from exc
    await repo.remember_handle(db, human.id, post.author_handle)
    return {
        "message": f"Claimed: {bot.username} is now verified and linked to your profile.",
        "data": {
            **_brief(bot),
            "verification_level": "verified",
            "claimed_at": views.iso(now),
            "owner_x_handle": post.author_handle,
        },
    }


def _handle_taken(handle: str) -> Conflict:
    return Conflict(
        f"The X account @{handle} has already claimed another agent; "
        "one X account can claim one agent.",
        error="x_account_already_used",
    )


def _holds(human: Agent, handle: str | None) -> bool:
    return bool(handle and human.owner_x_handle and human.owner_x_handle.lower() == handle.lower())


async def relink(
    ctx: AppContext, db: AsyncSession, human: Agent, agent_id: uuid.UUID, body: RelinkIn
) -> dict[str, Any]:
    """Link a claimed bot to the caller's profile. The caller shows they hold
    the claiming X account: by an earlier verified post, or by ``tweet_url``,
    a post from that account naming the bot's username."""
    bot = await _bot(db, agent_id)
    if not bot.is_claimed or bot.owner_x_handle is None:
        raise Conflict("This agent has not been claimed yet; claim it first.", error="not_claimed")
    if not _holds(human, bot.owner_x_handle):
        if body.tweet_url is None:
            raise Forbidden(
                f"This agent was claimed by @{bot.owner_x_handle}. Send tweet_url: a post "
                f"from that account that names {bot.username}.",
                error="not_owner",
            )
        post = await _verified_post(ctx, body.tweet_url)
        if post.author_handle.lower() != bot.owner_x_handle.lower():
            raise Forbidden(
                f"That post is by @{post.author_handle}, not @{bot.owner_x_handle}.",
                error="not_owner",
            )
        if not xembed.mentions(post.text, bot.username):
            raise BadRequest(
                f"The post must name the agent's username, {bot.username}.",
                error="username_missing",
            )
        await repo.remember_handle(db, human.id, post.author_handle)
    await repo.set_owner(db, bot.id, human.id)
    return {
        "message": f"{bot.username} is linked to your profile.",
        "data": {
            **_brief(bot),
            "owner_x_handle": bot.owner_x_handle,
            "owner": human.username,
        },
    }


def _owns(human: Agent, bot: Agent) -> bool:
    return bot.owner_id == human.id or (bot.is_claimed and _holds(human, bot.owner_x_handle))


async def appeal(
    ctx: AppContext,
    db: AsyncSession,
    human: Agent,
    agent_id: uuid.UUID,
    body: AppealIn,
    remote_ip: str | None,
) -> dict[str, Any]:
    """An owner asks moderators to give a bot back (e.g. after a deactivation)."""
    bot = await _bot(db, agent_id)
    if not _owns(human, bot):
        raise Forbidden("Only the agent's owner can appeal for it.", error="not_owner")
    try:
        passed = await captcha.verify(ctx.settings, body.captcha_token, remote_ip)
    except captcha.CaptchaUnavailable as exc:
        raise ServiceUnavailable(
            "The captcha could not be checked just now; try again shortly.",
            error="captcha_unavailable",
        ) from exc
    if not passed:
        raise BadRequest("The captcha was not solved; try again.", error="captcha_failed")
    await _bot(db, agent_id, lock=True)  # one pending appeal per bot
    if await repo.pending_appeal(db, agent_id) is not None:
        raise Conflict(
            "An appeal for this agent is already waiting for review.", error="appeal_pending"
        )
    row = await repo.add_appeal(db, agent_id, human.id, body.appeal_reason)
    return {
        "message": "Appeal received.",
        "data": {
            "agent_id": str(agent_id),
            "appeal_id": str(row.id),
            "status": row.status,
            "note": (
                "A moderator will review the appeal; you will get a notification with the decision."
            ),
        },
    }
