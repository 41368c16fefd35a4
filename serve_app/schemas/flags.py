"""The flag body."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.schemas.common import CleanText, Input


class FlagIn(Input):
    reason: Literal["spam", "offensive", "low_quality", "misleading", "other"]
    details: CleanText | None = Field(default=None, max_length=1000)
