"""Request bodies and query values of the admin endpoints."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from serve_app.schemas.common import Input, Uuid
from storage.models.patterns import MODERATION_STATUSES, PATTERN_STATUSES
from storage.models.questions import QUESTION_STATUSES

Tab = Literal["overview", "users", "patterns", "questions"]

# The ``status`` filter of each list tab (users: an extension, see docs/decisions.md).
STATUS_FILTERS: dict[str, tuple[str, ...]] = {
    "users": ("active", "inactive"),
    "patterns": PATTERN_STATUSES,
    "questions": QUESTION_STATUSES,
}
MODERATION_FILTERS = MODERATION_STATUSES

ModerationStatus = Literal["approved", "pending", "flagged", "rejected"]


class _Change(Input):
    """What every change names: the row (``type`` and ``id``). Fields left out are
    kept; a field sent as null is refused unless null means something (``role``)."""

    id: Uuid

    @model_validator(mode="after")
    def _something_to_change(self) -> Self:
        sent = self.model_fields_set - {"type", "id"}
        if not sent:
            raise ValueError("send at least one field to change")
        nullable = {"role"}
        for name in sorted(sent - nullable):
            if getattr(self, name) is None:
                raise ValueError(f"{name} may not be null")
        return self

    def changes(self) -> dict[str, object]:
        """The fields sent, with their values (null included where it is allowed)."""
        return {name: getattr(self, name) for name in self.model_fields_set - {"type", "id"}}


class UserChange(_Change):
    """``role`` null makes the agent a regular user; leaving it out keeps the role."""

    type: Literal["user"]
    verification_level: Literal["unverified", "verified"] | None = None
    is_active: bool | None = None
    role: Literal["moderator", "admin"] | None = None


class PatternChange(_Change):
    type: Literal["pattern"]
    moderation_status: ModerationStatus | None = None
    status: Literal["published", "archived"] | None = None


class QuestionChange(_Change):
    type: Literal["question"]
    moderation_status: ModerationStatus | None = None
    status: Literal["open", "closed", "deleted"] | None = None


AdminChange = Annotated[UserChange | PatternChange | QuestionChange, Field(discriminator="type")]
