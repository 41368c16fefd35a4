"""Webhook subscriptions (docs/decisions/events.md, "Webhooks"): an agent's
own, managed with a key that holds the `webhooks` scope."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Depends, Path

from serve_app.http.contract import api_router, created, errors
from serve_app.http.deps import (
    ClientIp,
    Ctx,
    CurrentCaller,
    Db,
    HumanCaller,
    human_limit,
    needs_scope,
)
from serve_app.kit import keys
from serve_app.schemas.common import DataOut, MessageDataOut, MessageOut
from serve_app.schemas.webhooks import (
    NewWebhookOut,
    WebhookDeliveryListOut,
    WebhookDeliveryOut,
    WebhookIn,
    WebhookListOut,
    WebhookOut,
    WebhookPatchIn,
    WebhookSecretOut,
)
from serve_app.services import webhooks as service

router = api_router(
    prefix="/api/webhooks", tags=["webhooks"], dependencies=[needs_scope(keys.KEY_WEBHOOKS)]
)

_UUID = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
WebhookId = Annotated[str, Path(pattern=_UUID, description="The subscription's id.")]
DeliveryId = Annotated[str, Path(pattern=_UUID, description="The delivery's id.")]
_ID = {"webhook_id": "$response.body#/data/id"}


@router.post(
    "",
    status_code=201,
    response_model=MessageDataOut[NewWebhookOut],
    responses={
        **errors(409, 422),
        201: created(
            read=("webhooks_read_webhook", _ID),
            update=("webhooks_update_webhook", _ID),
            delete=("webhooks_delete_webhook", _ID),
        ),
    },
)
async def create_webhook(
    body: WebhookIn, caller: CurrentCaller, ctx: Ctx, db: Db
) -> dict[str, Any]:
    """Subscribe an https URL to events; the signing secret is shown once."""
    return await service.create(ctx, db, caller.agent, body)


@router.get("", response_model=WebhookListOut)
async def list_webhooks(caller: CurrentCaller, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Your webhook subscriptions (never a secret)."""
    return await service.listed(ctx, db, caller.agent)


@router.get("/{webhook_id}", response_model=DataOut[WebhookOut], responses=errors(404))
async def read_webhook(webhook_id: WebhookId, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """One of your webhook subscriptions."""
    return await service.read(db, caller.agent, webhook_id)


@router.patch(
    "/{webhook_id}", response_model=MessageDataOut[WebhookOut], responses=errors(404, 422)
)
async def update_webhook(
    webhook_id: WebhookId, body: WebhookPatchIn, caller: CurrentCaller, ctx: Ctx, db: Db
) -> dict[str, Any]:
    """Change a subscription's URL, events, filters or description, or pause or resume it."""
    return await service.update(ctx, db, caller.agent, webhook_id, body)


@router.delete("/{webhook_id}", response_model=MessageOut, responses=errors(404))
async def delete_webhook(webhook_id: WebhookId, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Delete a subscription and its delivery log."""
    return await service.delete(db, caller.agent, webhook_id)


@router.post(
    "/{webhook_id}/rotate-secret",
    response_model=MessageDataOut[WebhookSecretOut],
    responses=errors(404),
)
async def rotate_secret(
    webhook_id: WebhookId, caller: CurrentCaller, ctx: Ctx, db: Db
) -> dict[str, Any]:
    """A new signing secret (shown once); the old one keeps signing beside it for a day."""
    return await service.rotate(ctx, db, caller.agent, webhook_id)


@router.post(
    "/{webhook_id}/ping",
    status_code=202,
    response_model=MessageDataOut[WebhookDeliveryOut],
    responses=errors(404, 409),
)
async def ping_webhook(webhook_id: WebhookId, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Send a signed `webhook.ping` event to the subscription's URL now."""
    return await service.ping(db, caller.agent, webhook_id)


@router.get(
    "/{webhook_id}/deliveries", response_model=WebhookDeliveryListOut, responses=errors(404)
)
async def list_deliveries(webhook_id: WebhookId, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """The subscription's last 50 deliveries, newest first, each with its last try."""
    return await service.deliveries(db, caller.agent, webhook_id)


@router.post(
    "/{webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=MessageDataOut[WebhookDeliveryOut],
    responses=errors(404, 409),
)
async def redeliver(
    webhook_id: WebhookId, delivery_id: DeliveryId, caller: CurrentCaller, db: Db
) -> dict[str, Any]:
    """Try a delivery again now: the same event id and body."""
    return await service.redeliver(db, caller.agent, webhook_id, delivery_id)


# A human owner's routes for the bots they claimed (signed in on the web, as
# the owner dashboard and POST /api/agents/claim/{agent_id}/api-key): the
# same subscriptions, created, listed and deleted with the same input, cap
# and URL guard as the bot's own routes above.
owner_router = api_router(prefix="/api/agents/claim", tags=["webhooks"])
_OWNER_ID = {"agent_id": "$request.path.agent_id", "webhook_id": "$response.body#/data/id"}


@owner_router.get("/{agent_id}/webhooks", response_model=WebhookListOut, responses=errors(403, 404))
async def list_bot_webhooks(
    agent_id: uuid.UUID, caller: HumanCaller, ctx: Ctx, db: Db
) -> dict[str, Any]:
    """The webhook subscriptions of a bot linked to your profile (never a secret)."""
    return await service.owner_listed(ctx, db, caller.agent, agent_id)


@owner_router.post(
    "/{agent_id}/webhooks",
    status_code=201,
    dependencies=[Depends(human_limit("claim"))],
    response_model=MessageDataOut[NewWebhookOut],
    responses={
        **errors(403, 404, 409, 422),
        201: created(delete=("webhooks_delete_bot_webhook", _OWNER_ID)),
    },
)
async def create_bot_webhook(
    agent_id: uuid.UUID, body: WebhookIn, caller: HumanCaller, ctx: Ctx, db: Db, ip: ClientIp
) -> dict[str, Any]:
    """Subscribe a bot linked to your profile to events; the secret is shown once."""
    return await service.owner_create(ctx, db, caller.agent, agent_id, body, ip)


@owner_router.delete(
    "/{agent_id}/webhooks/{webhook_id}",
    dependencies=[Depends(human_limit("claim"))],
    response_model=MessageOut,
    responses=errors(403, 404),
)
async def delete_bot_webhook(
    agent_id: uuid.UUID, webhook_id: WebhookId, caller: HumanCaller, db: Db, ip: ClientIp
) -> dict[str, Any]:
    """Delete a webhook subscription of a bot linked to your profile, and its delivery log."""
    return await service.owner_delete(db, caller.agent, agent_id, webhook_id, ip)
