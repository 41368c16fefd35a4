"""The change feed: each change names its event and its subject, with the
subject as the public sees it now (none for a tombstone)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from serve_app.schemas.common import Output, Timestamp, UuidText


class ChangeOut(Output):
    cursor: str = Field(description="Resume after this change: pass it as `after`.")
    event_id: UuidText = Field(description="The event's stable id (the same in webhooks).")
    type: str = Field(description="What happened, e.g. `pattern.updated`, `answer.removed`.")
    kind: Literal["pattern", "question", "answer", "comment", "verification"]
    id: UuidText = Field(description="The subject's id.")
    change: Literal["created", "updated", "tombstone"] = Field(
        description="`tombstone`: the subject is not public now (deleted, hidden, archived, "
        "rejected, or under something that is); drop it from a mirror."
    )
    revision: int | None = Field(
        description="The subject's current revision (patterns, answers, verifications)."
    )
    occurred_at: Timestamp
    item: dict[str, Any] | None = Field(
        description="The subject's public fields now (its text and links, not its counters); "
        "null for a tombstone."
    )


class ChangesOut(Output):
    data: list[ChangeOut]
    next_cursor: str = Field(
        description="Pass as `after` for the next page; also when the page is empty."
    )
    has_more: bool = Field(description="The page is full: more may follow at once.")
