"""Request bodies for notifications and e-mail preferences."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from serve_app.schemas.common import Input, Uuid

# Ids one PUT may name (a page is at most 50; a client may batch a few pages).
MAX_IDS = 200


class MarkRead(Input):
    """Either ``notification_ids`` or ``mark_all_read: true``."""

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
    """Any of the four switches; the ones left out keep their value."""

    new_pattern_from_followed: bool = True
    comment_on_pattern: bool = True
    new_follower: bool = True
    moderation_decision: bool = True

    def changes(self) -> dict[str, bool]:
        return self.model_dump(exclude_unset=True)
