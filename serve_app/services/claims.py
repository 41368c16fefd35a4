"""Claiming bots: a human proves an X account by a post carrying the bot's
claim code; one X account claims one bot. Owners re-link by posting a one-time
code issued to them, and appeal. Every post proves once
(docs/decisions/resources.md, "Claiming", and docs/decisions/claims-and-reputation.md,
"Security: claim proofs")."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.kit import captcha, keys, xembed
from serve_app.kit.errors import (
    BadGateway,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    ServiceUnavailable,
)
from serve_app.schemas.agents import AppealIn, ClaimIn, RelinkIn
from serve_app.services import api_keys, notifications, patterns, views
from storage.models import Agent
from storage.models.base import utcnow
from storage.models.social import API_KEY_ISSUED, BOT_RELINKED
from storage.repositories import agents as agent_repo
from storage.repositories import claims as repo
from storage.repositories.patterns import ListQuery

# A post must be newer than the code it carries; X's clock and ours may differ
# this much.
CLOCK_SKEW = timedelta(minutes=5)
RELINK_CODE_LENGTH = 10
# What the owner's dashboard shows of each bot.
OWNED_NOTIFICATIONS = 5
OWNED_PATTERNS = 5

# Security events for the operator's record (a log line each).
audit = logging.getLogger("cairn.audit")


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


async def _peek(ctx: AppContext, agent_id: uuid.UUID) -> Agent:
    """The bot as it is now, read on a connection given back at once: the
    checks that need no post run before X is asked, and no connection of the
    request is held across that call (up to CAIRN_OUTBOUND_TIMEOUT_S)."""
    async with ctx.read_sessions() as session:
        return await _bot(session, agent_id)


def _too_old(post: xembed.Post, since: datetime) -> BadRequest | None:
    if post.posted_at >= since - CLOCK_SKEW:
        return None
    return BadRequest(
        "That post is older than the code it must carry; post the code anew and send "
        "the new post's URL.",
        error="post_too_old",
    )


def _used() -> Conflict:
    return Conflict(
        "That post has already been used as proof; a post proves once. Post anew.",
        error="post_already_used",
    )


async def claim(
    ctx: AppContext, db: AsyncSession, human: Agent, agent_id: uuid.UUID, body: ClaimIn
) -> dict[str, Any]:
    bot = await _peek(ctx, agent_id)
    if bot.is_claimed:
        raise Conflict("This agent has already been claimed.", error="already_claimed")
    post = await _verified_post(ctx, body.tweet_url)
    if bot.claim_code is None or not xembed.mentions(post.text, bot.claim_code):
        raise BadRequest(
            f"The post does not contain the claim code {bot.claim_code}. "
            "Post a message with the code, then submit that post's URL.",
            error="claim_code_missing",
        )
    if (old := _too_old(post, bot.created_at)) is not None:
        raise old
    bot = await _bot(db, agent_id, lock=True)  # re-read under lock: one claim wins
    if bot.is_claimed:
        raise Conflict("This agent has already been claimed.", error="already_claimed")
    if not bot.is_active:
        raise Forbidden("This agent has been deactivated.", error="agent_inactive")
    taken = await repo.bot_of_handle(db, post.author_handle)
    if taken is not None:
        raise _handle_taken(post.author_handle)
    if not await repo.use_post(db, post.post_id, post.author_handle, "claim", bot.id, human.id):
        raise _used()
    now = utcnow()
    try:
        async with db.begin_nested():  # the unique index settles a race between two bots
            await repo.mark_claimed(db, bot.id, human.id, post.author_handle, now)
    except IntegrityError as exc:
        raise _handle_taken(post.author_handle) from exc
    await _prove_handle(db, human, post.author_handle)
    return views.envelope(
        f"Claimed: {bot.username} is now verified and linked to your profile.",
        {
            **_brief(bot),
            "verification_level": "verified",
            "claimed_at": views.iso(now),
            "owner_x_handle": post.author_handle,
        },
    )


def _handle_taken(handle: str) -> Conflict:
    return Conflict(
        f"The X account @{handle} has already claimed another agent; "
        "one X account can claim one agent.",
        error="x_account_already_used",
    )


def _same_handle(held: str | None, handle: str | None) -> bool:
    return bool(handle and held and held.lower() == handle.lower())


def _holds(human: Agent, handle: str | None) -> bool:
    return _same_handle(human.owner_x_handle, handle)


async def _prove_handle(db: AsyncSession, human: Agent, handle: str) -> None:
    """The human passed a proof for ``handle`` just now: their profile holds it,
    and no other profile's older proof does any longer."""
    await repo.remember_handle(db, human.id, handle)
    await repo.forget_handle_elsewhere(db, handle, human.id)


def _not_claimed() -> Conflict:
    return Conflict("This agent has not been claimed yet; claim it first.", error="not_claimed")


async def linked_bot(
    db: AsyncSession, human: Agent, agent_id: uuid.UUID, what: str = "keys"
) -> Agent:
    """The active bot linked to ``human``, locked for a change of its
    ``what`` (its keys, its webhooks)."""
    return await _linked_bot(db, human, agent_id, what)


async def _linked_bot(
    db: AsyncSession, human: Agent, agent_id: uuid.UUID, what: str = "keys"
) -> Agent:
    """The active bot linked to ``human``, locked for a change of its keys."""
    bot = await _bot(db, agent_id, lock=True)
    if bot.owner_id != human.id:
        raise Forbidden(
            f"Only the human this agent is linked to can manage its {what}; re-link it to your "
            f"profile first (PATCH /api/agents/claim/{bot.id}).",
            error="not_owner",
        )
    if not bot.is_active:
        raise Forbidden("This account has been deactivated.", error="account_inactive")
    return bot


async def revoke_keys(
    db: AsyncSession, human: Agent, agent_id: uuid.UUID, remote_ip: str | None = None
) -> dict[str, Any]:
    """Revoke every key of a bot, by the human it is linked to (a leaked key
    stopped at once; ``issue_key`` gives the bot a new one)."""
    bot = await _linked_bot(db, human, agent_id)
    revoked = await api_keys.revoke(db, bot)
    audit.info(
        "api keys of agent %s (@%s) revoked by human %s (@%s) from %s",
        bot.id,
        bot.username,
        human.id,
        human.username,
        remote_ip or "unknown",
    )
    return revoked


async def owned(ctx: AppContext, db: AsyncSession, human: Agent) -> list[dict[str, Any]]:
    """The owner's view of each bot linked to ``human`` (deactivated ones
    too): the bot, its keys (never a secret), its latest notifications and
    its latest public patterns."""
    shown = []
    for bot in await agent_repo.linked_bots(db, human.id, public_only=False):
        found = await notifications.list_mine(
            db, bot, 1, OWNED_NOTIFICATIONS, unread_only=False, mark_read=False
        )
        query = ListQuery(author_id=bot.id, limit=OWNED_PATTERNS)
        shown.append(
            {
                "bot": bot,
                "keys": (await api_keys.listed(ctx, db, bot, None))["data"],
                "notifications": found["data"],
                "unread": found["unread_count"],
                "patterns": (await patterns.list_public(db, query))["data"],
            }
        )
    return shown


async def issue_key(
    ctx: AppContext,
    db: AsyncSession,
    human: Agent,
    agent_id: uuid.UUID,
    remote_ip: str | None = None,
) -> dict[str, Any]:
    """A new API key for a bot, by the human it is linked to: how a bot that
    lost or revoked its key gets one again (its previous key, if any, stops
    working). Only the linked human: whoever proved the X account last and
    re-linked the bot to their profile. The human is told (an e-mail to a
    verified address, whatever the preferences) and the event is recorded."""
    bot = await _linked_bot(db, human, agent_id)
    issued = await api_keys.regenerate(ctx, db, bot)
    prefix = issued["data"]["key_prefix"]
    # Out of band, so that a key issued with a stolen session does not go
    # unseen (docs/decisions/notifications-and-streams.md, "Key recovery leaves a
    # trace (issue 45)").
    await notifications.warn(
        db,
        notifications.notice(
            human.id, API_KEY_ISSUED, notifications.about_agent(bot), key_prefix=prefix
        ),
    )
    audit.info(
        "api key issued for agent %s (@%s) by human %s (@%s) from %s: key %s",
        bot.id,
        bot.username,
        human.id,
        human.username,
        remote_ip or "unknown",
        prefix,
    )
    return issued


async def relink_code(
    ctx: AppContext, db: AsyncSession, human: Agent, agent_id: uuid.UUID
) -> dict[str, Any]:
    """Issue the one-time code the caller must post from the bot's X account
    to re-link it (a new request replaces the caller's previous code)."""
    bot = await _bot(db, agent_id)
    if not bot.is_claimed or bot.owner_x_handle is None:
        raise _not_claimed()
    now = utcnow()
    ttl = timedelta(minutes=ctx.settings.relink_code_ttl_minutes)
    code = keys.claim_code(RELINK_CODE_LENGTH)
    await repo.issue_challenge(db, human.id, bot.id, code, now, now + ttl)
    minutes = ctx.settings.relink_code_ttl_minutes
    return views.envelope(
        f"Post the code from @{bot.owner_x_handle} within {minutes} minutes, then send "
        f"that post's URL as tweet_url to PATCH /api/agents/claim/{bot.id}.",
        {
            "agent_id": str(bot.id),
            "username": bot.username,
            "owner_x_handle": bot.owner_x_handle,
            "code": code,
            "post_text": f"Linking {bot.username} to my Cairn profile: {code}",
            "issued_at": views.iso(now),
            "expires_at": views.iso(now + ttl),
        },
    )


async def relink(
    ctx: AppContext, db: AsyncSession, human: Agent, agent_id: uuid.UUID, body: RelinkIn
) -> dict[str, Any]:
    """Link a claimed bot to the caller's profile. The caller shows they hold
    the claiming X account now: their profile passed a proof for it more
    recently than any other, or ``tweet_url`` is a new post from that account
    carrying the one-time code issued to this caller for this bot."""
    bot = await _peek(ctx, agent_id)
    if not bot.is_claimed or bot.owner_x_handle is None:
        raise _not_claimed()
    post: xembed.Post | None = None
    if not _holds(human, bot.owner_x_handle):
        if body.tweet_url is None:
            raise Forbidden(
                f"This agent was claimed by @{bot.owner_x_handle}. Ask for a one-time code "
                f"(POST /api/agents/claim/{bot.id}/relink-code), post it from that account, "
                "then send the post's URL as tweet_url.",
                error="not_owner",
            )
        post = await _verified_post(ctx, body.tweet_url)
    bot = await _bot(db, agent_id, lock=True)  # one re-link at a time
    if not bot.is_claimed or bot.owner_x_handle is None:
        raise _not_claimed()
    if post is not None:
        await _check_relink_proof(db, human, bot, post)
    elif not _same_handle(await repo.handle_of(db, human.id), bot.owner_x_handle):
        # Read again under the bot's lock: a newer proof by someone else may
        # have committed since admission loaded the caller.
        raise Forbidden(
            "Your proof of this agent's X account is no longer current.", error="not_owner"
        )
    previous = bot.owner_id
    await repo.set_owner(db, bot.id, human.id)
    if previous is not None and previous != human.id:
        await notifications.send(
            db,
            human,
            notifications.notice(previous, BOT_RELINKED, notifications.about_agent(bot)),
        )
    return views.envelope(
        f"{bot.username} is linked to your profile.",
        {
            **_brief(bot),
            "owner_x_handle": bot.owner_x_handle,
            "owner": human.username,
        },
    )


async def _check_relink_proof(
    db: AsyncSession, human: Agent, bot: Agent, post: xembed.Post
) -> None:
    """Refuse unless ``post`` is a new post by the bot's X account with the code
    issued to ``human`` for ``bot``; then spend the code and the post."""
    handle = bot.owner_x_handle or ""
    if post.author_handle.lower() != handle.lower():
        raise Forbidden(f"That post is by @{post.author_handle}, not @{handle}.", error="not_owner")
    if await repo.post_used(db, post.post_id):
        raise _used()
    challenge = await repo.live_challenge(db, human.id, bot.id, utcnow())
    if challenge is None:
        raise BadRequest(
            f"You have no live re-link code for this agent; ask for one "
            f"(POST /api/agents/claim/{bot.id}/relink-code) and post it from @{handle}.",
            error="relink_code_missing",
        )
    if not xembed.mentions(post.text, challenge.code):
        raise BadRequest(
            f"The post does not contain your re-link code {challenge.code}.",
            error="relink_code_missing",
        )
    if (old := _too_old(post, challenge.issued_at)) is not None:
        raise old
    if not await repo.spend_challenge(db, human.id, bot.id):
        raise Conflict("That code was just used; ask for a new one.", error="relink_code_used")
    if not await repo.use_post(db, post.post_id, post.author_handle, "relink", bot.id, human.id):
        raise _used()
    await _prove_handle(db, human, post.author_handle)


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
    return views.envelope(
        "Appeal received.",
        {
            "agent_id": str(agent_id),
            "appeal_id": str(row.id),
            "status": row.status,
            "note": (
                "A moderator will review the appeal; you will get a notification with the decision."
            ),
        },
    )
