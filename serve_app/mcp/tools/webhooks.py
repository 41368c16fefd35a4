"""The webhook tools: your subscriptions, as REST's /api/webhooks (the
`webhooks` key scope, as the routes declare)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from serve_app.mcp.door import Call
from serve_app.mcp.tools.agents import DELETE, NoArgs
from serve_app.mcp.tools.shared import READ, WRITE, Args, Runner, make_tool
from serve_app.schemas.webhooks import WebhookIn, WebhookPatchIn
from serve_app.services import webhooks as service

_UUID = r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"


class CreateWebhookArgs(Args, WebhookIn):
    pass


class WebhookIdArgs(Args):
    webhook_id: str = Field(pattern=_UUID, description="The subscription's id.")


class UpdateWebhookArgs(WebhookIdArgs, WebhookPatchIn):
    pass


def tools(r: Runner) -> list[Tool]:
    """``list_webhooks``, ``create_webhook``, ``update_webhook``,
    ``delete_webhook``, ``ping_webhook``."""

    async def list_webhooks(c: Call, a: NoArgs) -> Any:
        return await service.listed(c.ctx, c.db, c.agent)

    async def create_webhook(c: Call, a: CreateWebhookArgs) -> Any:
        body = WebhookIn.model_validate(a.model_dump(exclude_unset=True))
        return await service.create(c.ctx, c.db, c.agent, body)

    async def update_webhook(c: Call, a: UpdateWebhookArgs) -> Any:
        changes = a.model_dump(exclude_unset=True)
        hook_id = changes.pop("webhook_id")
        body = WebhookPatchIn.model_validate(changes)
        return await service.update(c.ctx, c.db, c.agent, hook_id, body)

    async def delete_webhook(c: Call, a: WebhookIdArgs) -> Any:
        return await service.delete(c.db, c.agent, a.webhook_id)

    async def ping_webhook(c: Call, a: WebhookIdArgs) -> Any:
        return await service.ping(c.db, c.agent, a.webhook_id)

    return [
        make_tool(
            "list_webhooks",
            NoArgs,
            r.output("webhooks_list_webhooks"),
            "Your webhook subscriptions (never a secret). Needs an API key with the "
            "webhooks scope.",
            READ,
            r.run("webhooks_list_webhooks", list_webhooks),
        ),
        make_tool(
            "create_webhook",
            CreateWebhookArgs,
            r.output("webhooks_create_webhook"),
            "Subscribe an https URL to events (content events such as `answer.created`, and "
            "`notification.<kind>` for your notifications), with optional filters. Deliveries "
            "are signed in the Standard Webhooks format; the signing secret is in the answer "
            "this once: store it. Needs the webhooks scope.",
            WRITE,
            r.run("webhooks_create_webhook", create_webhook),
        ),
        make_tool(
            "update_webhook",
            UpdateWebhookArgs,
            r.output("webhooks_update_webhook"),
            "Change a subscription's URL, events, filters or description, or pause or resume "
            "it (`active`). Needs the webhooks scope.",
            WRITE,
            r.run("webhooks_update_webhook", update_webhook),
        ),
        make_tool(
            "delete_webhook",
            WebhookIdArgs,
            r.output("webhooks_delete_webhook"),
            "Delete a subscription and its delivery log. Needs the webhooks scope.",
            DELETE,
            r.run("webhooks_delete_webhook", delete_webhook),
        ),
        make_tool(
            "ping_webhook",
            WebhookIdArgs,
            r.output("webhooks_ping_webhook"),
            "Send a signed `webhook.ping` event to the subscription's URL now. Needs the "
            "webhooks scope.",
            WRITE,
            r.run("webhooks_ping_webhook", ping_webhook),
        ),
    ]
