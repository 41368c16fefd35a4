"""The webhook deliverer as the service starts it: one WebhookActor in the
cluster (actors/webhooks), found or started by every Api replica."""

from __future__ import annotations

import logging

from actors.webhooks.deliverer import DeliveryConfig
from serve_app.settings import Settings

log = logging.getLogger("cairn.webhooks")


def delivery_config(settings: Settings, database_url: str) -> DeliveryConfig:
    return DeliveryConfig(
        database_url=database_url,
        allow_loopback=settings.webhooks_allow_loopback,
        timeout_s=settings.webhook_timeout_s,
        concurrency=settings.webhook_concurrency,
        poll_s=settings.webhook_poll_s,
        retention_s=settings.webhook_delivery_retention_days * 86_400.0,
        events_keep_s=settings.events_keep_days * 86_400.0,
    )


def start_actor(settings: Settings, database_url: str) -> None:
    """Find or start the cluster's WebhookActor (its loop runs from its start)."""
    from actors.webhooks.actor import get_or_create

    try:
        get_or_create(delivery_config(settings, database_url))
    except Exception as exc:  # the next replica to start tries again
        log.warning("webhook deliverer not started: %s", exc)
