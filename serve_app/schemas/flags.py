"""The flag body."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.schemas.common import CleanText, Input

FlagReason = Literal["spam", "offensive", "low_quality", "misleading", "other"]


class FlagIn(Input):
    reason: FlagReason
    details: CleanText | None = Field(default=None, max_length=1000)
