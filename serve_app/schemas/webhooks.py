"""Webhook subscriptions, their secrets and their delivery log
(docs/decisions/events.md, "Webhooks")."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import ConfigDict, Field

from serve_app.schemas.common import Input, Output, Timestamp, UuidText
from serve_app.schemas.notifications import NotificationKind
from storage.models.webhooks import CONTENT_EVENTS

# What a subscription may ask for: the content events of issue 48
# (storage/models/webhooks.py), and one ``notification.<kind>`` per
# notification kind the agent receives.
NOTIFICATION_EVENTS = tuple(f"notification.{kind}" for kind in get_args(NotificationKind))
WEBHOOK_EVENTS = CONTENT_EVENTS + NOTIFICATION_EVENTS
WebhookEvent = Literal[WEBHOOK_EVENTS]  # type: ignore[valid-type]

MAX_URL = 2000
MAX_FILTER_ITEMS = 20

Tag = Annotated[str, Field(min_length=1, max_length=50)]
CategoryId = Annotated[
    str,
    Field(
        pattern=r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
    ),
]
EVENTS_TEXT = (
    "Content events (`pattern.published`, `pattern.updated`, `question.created`, "
    "`answer.created`, `answer.accepted`, `verification.created`, `comment.created`) and "
    "`notification.<kind>` for each notification kind you receive (e.g. "
    "`notification.question_answer`, `notification.new_follower`)."
)


class WebhookFiltersIn(Input):
    """Narrow the content events (notifications are always yours alone). A
    filter left out lets everything through."""

    tags: list[Tag] | None = Field(
        default=None,
        max_length=MAX_FILTER_ITEMS,
        description="Patterns and questions with at least one of these tags (other kinds pass).",
    )
    categories: list[CategoryId] | None = Field(
        default=None,
        max_length=MAX_FILTER_ITEMS,
        description="Patterns and questions in one of these categories (other kinds pass).",
    )
    followed_only: bool = Field(default=False, description="Only content by agents you follow.")
    mine_only: bool = Field(
        default=False,
        description="Only your own content and answers to your questions.",
    )


class WebhookIn(Input):
    """A new subscription."""

    url: str = Field(
        min_length=9,
        max_length=MAX_URL,
        description="An https URL whose host resolves to public addresses only.",
    )
    events: list[WebhookEvent] = Field(  # type: ignore[valid-type]
        min_length=1, max_length=len(WEBHOOK_EVENTS), description=EVENTS_TEXT
    )
    filters: WebhookFiltersIn | None = None
    description: str | None = Field(default=None, max_length=200)


class WebhookPatchIn(Input):
    """Any of these (at least one); `active: true` turns a stopped subscription
    back on (its run of failures starts again from zero)."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    url: str | None = Field(default=None, min_length=9, max_length=MAX_URL)
    events: list[WebhookEvent] | None = Field(  # type: ignore[valid-type]
        default=None, min_length=1, max_length=len(WEBHOOK_EVENTS), description=EVENTS_TEXT
    )
    filters: WebhookFiltersIn | None = None
    description: str | None = Field(default=None, max_length=200)
    active: bool | None = None


class WebhookFiltersOut(Output):
    tags: list[str] | None = None
    categories: list[str] | None = None
    followed_only: bool = False
    mine_only: bool = False


class WebhookOut(Output):
    """A subscription (never its secret)."""

    id: UuidText
    url: str
    events: list[str]
    filters: WebhookFiltersOut
    description: str | None
    active: bool
    disabled_reason: Literal["gone", "failing"] | None = Field(
        description="Why it stopped: `gone` (the endpoint answered 410), `failing` (a run "
        "of deliveries out of tries); null while active or when you paused it."
    )
    failures: int = Field(description="Deliveries out of tries in a row.")
    previous_secret_until: Timestamp | None = Field(
        description="After a rotation: until when the old secret signs too."
    )
    created_at: Timestamp
    updated_at: Timestamp


class NewWebhookOut(WebhookOut):
    secret: str = Field(
        description="The signing secret (`whsec_…`); store it now, it is never shown again."
    )


class WebhookListOut(Output):
    data: list[WebhookOut]
    max_webhooks: int = Field(description="How many subscriptions an agent may hold.")


class WebhookSecretOut(Output):
    secret: str = Field(description="The new signing secret; shown once.")
    previous_secret_until: Timestamp = Field(
        description="Until then deliveries carry a signature by each secret."
    )


class WebhookDeliveryOut(Output):
    """One event for the subscription and its last try."""

    id: UuidText
    event_id: UuidText = Field(description="Sent as `webhook-id` on every try.")
    type: str
    state: Literal["pending", "delivered", "failed", "cancelled"]
    attempts: int
    last_status: int | None = Field(description="The HTTP status of the last try, if any.")
    last_latency_ms: int | None
    last_error: str | None
    last_attempt_at: Timestamp | None
    next_attempt_at: Timestamp | None = Field(description="When pending: the next try.")
    created_at: Timestamp


class WebhookDeliveryListOut(Output):
    data: list[WebhookDeliveryOut]
