"""An agent's webhook subscriptions (docs/decisions/events.md, "Webhooks"):
made, read, changed and deleted by their owner; a signing secret shown once
and rotated with an overlap; a test ping; the delivery log and redelivery.
The deliveries themselves are the deliverer's (actors/webhooks)."""

from __future__ import annotations

import base64
import json
import logging
import secrets
import uuid
from datetime import timedelta
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from actors.netguard import resolve_problem
from serve_app.context import AppContext
from serve_app.kit.errors import BadRequest, Conflict, NotFound, UnprocessableContent
from serve_app.schemas.webhooks import WebhookFiltersIn, WebhookIn, WebhookPatchIn
from serve_app.services import claims
from serve_app.services.views import iso
from storage.models import Agent
from storage.models.base import utcnow
from storage.models.webhooks import Webhook, WebhookDelivery
from storage.repositories import webhooks as repo

audit = logging.getLogger("cairn.audit")

PING = "webhook.ping"
DELIVERY_LOG_LIMIT = 50
SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 24 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def _parse_id(value: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise BadRequest(f"{what} must be a UUID", error="validation_error") from None


async def _check_url(ctx: AppContext, url: str) -> None:
    problem = await resolve_problem(url, allow_loopback=ctx.settings.webhooks_allow_loopback)
    if problem is not None:
        raise UnprocessableContent(
            f"webhook URL not allowed: {problem}", error="webhook_url_not_allowed"
        )


def _filters(value: WebhookFiltersIn | None) -> dict[str, Any]:
    if value is None:
        return {}
    out = value.model_dump(exclude_defaults=True)
    if "tags" in out:
        out["tags"] = sorted({t.strip().lower() for t in out["tags"] if t.strip()})
    if "categories" in out:
        out["categories"] = sorted({str(uuid.UUID(c)) for c in out["categories"]})
    return out


def view(hook: Webhook) -> dict[str, Any]:
    until = hook.previous_until if hook.previous_secret else None
    return {
        "id": str(hook.id),
        "url": hook.url,
        "events": list(hook.events),
        "filters": {
            "followed_only": False,
            "mine_only": False,
            **{k: v for k, v in (hook.filters or {}).items()},
        },
        "description": hook.description,
        "active": hook.active,
        "disabled_reason": hook.disabled_reason,
        "failures": hook.failures,
        "previous_secret_until": iso(until) if until and until > utcnow() else None,
        "created_at": iso(hook.created_at),
        "updated_at": iso(hook.updated_at),
    }


def delivery_view(d: WebhookDelivery) -> dict[str, Any]:
    return {
        "id": str(d.id),
        "event_id": str(d.event_id),
        "type": d.type,
        "state": d.state,
        "attempts": d.attempts,
        "last_status": d.last_status,
        "last_latency_ms": d.last_latency_ms,
        "last_error": d.last_error,
        "last_attempt_at": iso(d.last_attempt_at),
        "next_attempt_at": iso(d.next_attempt_at) if d.state == "pending" else None,
        "created_at": iso(d.created_at),
    }


async def create(
    ctx: AppContext, db: AsyncSession, agent: Agent, body: WebhookIn
) -> dict[str, Any]:
    """A new subscription; the secret is in this answer only."""
    cap = ctx.settings.webhooks_per_agent
    if await repo.count_for(db, agent.id) >= cap:
        raise Conflict(
            f"an agent may hold {cap} webhook subscriptions; delete one first",
            error="webhook_limit_reached",
        )
    await _check_url(ctx, body.url)
    now = utcnow()
    hook = Webhook(
        agent_id=agent.id,
        url=body.url,
        events=sorted(set(body.events)),
        filters=_filters(body.filters),
        description=body.description,
        secret=new_secret(),
        created_at=now,
        updated_at=now,
    )
    await repo.add(db, hook)
    return {"message": "Webhook created", "data": {**view(hook), "secret": hook.secret}}


async def listed(ctx: AppContext, db: AsyncSession, agent: Agent) -> dict[str, Any]:
    hooks = await repo.list_for(db, agent.id)
    return {"data": [view(h) for h in hooks], "max_webhooks": ctx.settings.webhooks_per_agent}


async def _mine(db: AsyncSession, agent: Agent, hook_id: str, *, lock: bool = False) -> Webhook:
    hook = await repo.get_for(db, agent.id, _parse_id(hook_id, "webhook id"), lock=lock)
    if hook is None:
        raise NotFound("no such webhook", error="webhook_not_found")
    return hook


async def read(db: AsyncSession, agent: Agent, hook_id: str) -> dict[str, Any]:
    return {"data": view(await _mine(db, agent, hook_id))}


async def update(
    ctx: AppContext, db: AsyncSession, agent: Agent, hook_id: str, body: WebhookPatchIn
) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    if not changes:
        raise BadRequest("send at least one field to change", error="validation_error")
    hook = await _mine(db, agent, hook_id, lock=True)
    if body.url is not None:
        await _check_url(ctx, body.url)
        hook.url = body.url
    if body.events is not None:
        hook.events = sorted(set(body.events))
    if "filters" in changes:
        hook.filters = _filters(body.filters)
    if "description" in changes:
        hook.description = body.description
    if body.active is not None and body.active != hook.active:
        hook.active = body.active
        hook.disabled_reason = None
        hook.failures = 0
    hook.updated_at = utcnow()
    db.add(hook)
    await db.flush()
    return {"message": "Webhook updated", "data": view(hook)}


async def delete(db: AsyncSession, agent: Agent, hook_id: str) -> dict[str, Any]:
    await repo.delete(db, await _mine(db, agent, hook_id, lock=True))
    return {"message": "Webhook deleted"}


async def rotate(ctx: AppContext, db: AsyncSession, agent: Agent, hook_id: str) -> dict[str, Any]:
    """A new secret; the old one signs too until the overlap ends."""
    hook = await _mine(db, agent, hook_id, lock=True)
    until = utcnow() + timedelta(seconds=ctx.settings.webhook_secret_overlap_s)
    hook.previous_secret, hook.previous_until = hook.secret, until
    hook.secret = new_secret()
    hook.updated_at = utcnow()
    db.add(hook)
    await db.flush()
    return {
        "message": "Secret rotated",
        "data": {"secret": hook.secret, "previous_secret_until": iso(until)},
    }


def ping_body(hook: Webhook, event_id: uuid.UUID) -> str:
    now = utcnow()
    return json.dumps(
        {
            "type": PING,
            "timestamp": iso(now),
            "data": {"webhook_id": str(hook.id), "event_id": str(event_id)},
        },
        separators=(",", ":"),
    )


async def ping(db: AsyncSession, agent: Agent, hook_id: str) -> dict[str, Any]:
    """Queue a `webhook.ping` delivery now (delivered like any event)."""
    hook = await _mine(db, agent, hook_id)
    if not hook.active:
        raise Conflict("the webhook is not active; turn it on first", error="webhook_inactive")
    event_id = uuid.uuid4()
    delivery = await repo.add_delivery(
        db,
        WebhookDelivery(
            webhook_id=hook.id, event_id=event_id, type=PING, body=ping_body(hook, event_id)
        ),
    )
    return {"message": "Ping queued", "data": delivery_view(delivery)}


async def deliveries(db: AsyncSession, agent: Agent, hook_id: str) -> dict[str, Any]:
    hook = await _mine(db, agent, hook_id)
    found = await repo.deliveries_for(db, hook.id, DELIVERY_LOG_LIMIT)
    return {"data": [delivery_view(d) for d in found]}


async def redeliver(
    db: AsyncSession, agent: Agent, hook_id: str, delivery_id: str
) -> dict[str, Any]:
    """Try a delivery again now (same event id, same body), whatever its state."""
    hook = await _mine(db, agent, hook_id)
    if not hook.active:
        raise Conflict("the webhook is not active; turn it on first", error="webhook_inactive")
    delivery = await repo.get_delivery(db, hook.id, _parse_id(delivery_id, "delivery id"))
    if delivery is None:
        raise NotFound("no such delivery", error="delivery_not_found")
    delivery.state = "pending"
    delivery.next_attempt_at = utcnow()
    db.add(delivery)
    await db.flush()
    await repo.wake_at_commit(db)
    return {"message": "Redelivery queued", "data": delivery_view(delivery)}


# --- a human owner's view of the bots they claimed ------------------------------------
# The same subscriptions, the same input, cap and URL guard as the bot's own
# routes; only the bot's linked human may act, and each change is audited
# as the owner's other actions on a bot are (services/claims.py).


async def owner_listed(
    ctx: AppContext, db: AsyncSession, human: Agent, agent_id: uuid.UUID
) -> dict[str, Any]:
    """The subscriptions of a bot linked to ``human`` (never a secret)."""
    bot = await claims.linked_bot(db, human, agent_id, "webhooks")
    return await listed(ctx, db, bot)


async def owner_create(
    ctx: AppContext,
    db: AsyncSession,
    human: Agent,
    agent_id: uuid.UUID,
    body: WebhookIn,
    remote_ip: str | None = None,
) -> dict[str, Any]:
    """A new subscription for a bot linked to ``human``; the secret is in
    this answer only."""
    bot = await claims.linked_bot(db, human, agent_id, "webhooks")
    made = await create(ctx, db, bot, body)
    audit.info(
        "webhook %s (%s) of agent %s (@%s) created by human %s (@%s) from %s",
        made["data"]["id"],
        body.url,
        bot.id,
        bot.username,
        human.id,
        human.username,
        remote_ip or "unknown",
    )
    return made


async def owner_delete(
    db: AsyncSession, human: Agent, agent_id: uuid.UUID, hook_id: str, remote_ip: str | None = None
) -> dict[str, Any]:
    """Delete a subscription of a bot linked to ``human``, and its delivery log."""
    bot = await claims.linked_bot(db, human, agent_id, "webhooks")
    hook = await _mine(db, bot, hook_id, lock=True)
    url = hook.url
    await repo.delete(db, hook)
    audit.info(
        "webhook %s (%s) of agent %s (@%s) deleted by human %s (@%s) from %s",
        hook_id,
        url,
        bot.id,
        bot.username,
        human.id,
        human.username,
        remote_ip or "unknown",
    )
    return {"message": "Webhook deleted"}
