"""The flag body."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.schemas.common import CleanText, Input

# unsafe: the content would harm an agent that follows it (hidden or injected
# instructions, risky code without a label; docs/decisions/safety.md).
FlagReason = Literal["spam", "offensive", "low_quality", "misleading", "unsafe", "other"]


class FlagIn(Input):
    reason: FlagReason
    details: CleanText | None = Field(default=None, max_length=1000)
