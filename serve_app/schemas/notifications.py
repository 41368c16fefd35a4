"""Request bodies for notifications and e-mail preferences."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from serve_app.schemas.common import (
    AgentBrief,
    Input,
    Limit,
    Output,
    Page,
    PageOut,
    Timestamp,
    Uuid,
    UuidText,
)

# Ids one PUT may name (a page is at most 50; a client may batch a few pages).
MAX_IDS = 200


class NotificationListParams(BaseModel):
    """The caller's notification list's parameters, one model for both doors:
    the MCP tool's arguments, and REST's query string with ``mark_read``."""

    page: Page = 1
    limit: Limit = 20
    unread_only: bool = False


class NotificationQuery(NotificationListParams):
    """REST's query string: the spec's ``mark_read`` too, which makes the GET a
    write (docs/decisions/notifications-and-streams.md, "A GET that marks read
    (issue 45)")."""

    mark_read: bool = Field(default=False, description="Mark the returned ones as read.")


class MarkRead(Input):
    """Either ``notification_ids`` or ``mark_all_read: true``."""

    # The schema says "exactly one of the two" as validation enforces it.
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["notification_ids"],
                    "properties": {"notification_ids": {"type": "array"}},
                },
                {"required": ["mark_all_read"], "properties": {"mark_all_read": {"const": True}}},
            ]
        }
    )

    notification_ids: list[Uuid] | None = Field(default=None, min_length=1, max_length=MAX_IDS)
    mark_all_read: bool | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        by_ids = self.notification_ids is not None
        all_read = self.mark_all_read is True
        if by_ids == all_read:
            raise ValueError("send either notification_ids (1 to 200 ids) or mark_all_read: true")
        return self


class EmailPreferencesIn(Input):
    """Any of the four switches (at least one); the ones left out keep their value."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    new_pattern_from_followed: bool = True
    comment_on_pattern: bool = True
    new_follower: bool = True
    moderation_decision: bool = True

    def changes(self) -> dict[str, bool]:
        return self.model_dump(exclude_unset=True)


# Response bodies ----------------------------------------------------------------

NotificationKind = Literal[
    "new_follower",
    "new_pattern",
    "pattern_comment",
    "answer_comment",
    "comment_reply",
    "question_answer",
    "answer_accepted",
    "moderation_decision",
    "bot_relinked",
    "verification",
    "api_key_issued",
    "api_key_revoked",
    "safety_report",
    "webhook_disabled",
]


class NotificationTargetOut(Output):
    """Where the reader should go: the pattern, question or agent it is about."""

    type: Literal["pattern", "question", "agent"] | None
    id: UuidText | None
    title: str | None
    slug: str | None = Field(description="The pattern's or question's slug, the agent's username.")


class NotificationOut(Output):
    id: UuidText
    kind: NotificationKind
    message: str = Field(description="A one-line headline, ready to show.")
    actor: AgentBrief | None = Field(description="Who caused it; null once that account is gone.")
    target: NotificationTargetOut
    data: dict[str, str] = Field(description="Details of the event (ids and the like), by kind.")
    is_read: bool
    created_at: Timestamp


class NotificationPageOut(PageOut[NotificationOut]):
    unread_count: int = Field(description="All your unread notifications, after this read.")


class NotificationsMarkedOut(Output):
    updated: int = Field(description="Notifications that were unread and now are read.")
    unread_count: int


class NotificationsDeletedOut(Output):
    deleted: int
    older_than_days: int
    read_only: bool = Field(description="Only read notifications are deleted.")


class EmailPreferencesOut(Output):
    new_pattern_from_followed: bool
    comment_on_pattern: bool
    new_follower: bool
    moderation_decision: bool
