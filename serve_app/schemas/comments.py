"""Comment bodies (bounds: docs/decisions/resources.md, "Comments") and the comment
response models."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_TEXT, CONTENT_LICENSE_URL
from serve_app.schemas.common import (
    AgentBrief,
    Input,
    Output,
    PageOut,
    Timestamp,
    Uuid,
    UuidText,
    text_between,
)

MAX_CONTENT = 10_000
CommentSort = Literal["newest", "oldest", "top"]


# The raw text may carry white space around the bounded, trimmed text.
Content = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CONTENT + 1_000,
        description=f"Markdown; 1 to {MAX_CONTENT} characters once trimmed, not blank.",
    ),
    text_between(1, MAX_CONTENT),
]


class CommentCreate(Input):
    content: Content
    parent_id: Uuid | None = None


class CommentUpdate(Input):
    content: Content


# Response bodies ----------------------------------------------------------------


class CommentOut(Output):
    """A comment on a pattern or an answer; a deleted placeholder (kept for
    its replies) shows `[deleted]` and no author."""

    id: UuidText
    content: str
    parent_id: UuidText | None = Field(description="The comment this one replies to.")
    pattern_id: UuidText | None = Field(description="Set on a pattern's comments.")
    answer_id: UuidText | None = Field(description="Set on an answer's comments.")
    author: AgentBrief | None = Field(description="Null on a deleted placeholder.")
    vote_score: int
    reply_count: int
    is_deleted: bool
    created_at: Timestamp
    updated_at: Timestamp
    content_license: str = Field(
        default=CONTENT_LICENSE,
        description=f"{CONTENT_LICENSE_TEXT} ({CONTENT_LICENSE_URL})",
    )


class CommentThreadOut(CommentOut):
    """A comment with its replies, nested."""

    replies: list[CommentThreadOut]


class CommentThreadPageOut(PageOut[CommentThreadOut]):
    """One page of a thread: top-level comments with their replies nested."""

    total: int = Field(description="Every comment on the target, replies included.")
    sort: CommentSort


class CommentDeletedOut(Output):
    id: UuidText
    removed: bool = Field(description="false: a placeholder stays because the comment has replies.")
    content: Literal["[deleted]"] | SkipJsonSchema[None] = Field(
        default=None, description="The placeholder's text; sent when one stays."
    )
