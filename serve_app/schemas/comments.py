"""Comment bodies (bounds: docs/decisions.md, "Comments")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from serve_app.schemas.common import Input, Uuid, text_between

MAX_CONTENT = 10_000
CommentSort = Literal["newest", "oldest", "top"]


Content = Annotated[str, Field(max_length=MAX_CONTENT + 1_000), text_between(1, MAX_CONTENT)]


class CommentCreate(Input):
    content: Content
    parent_id: Uuid | None = None


class CommentUpdate(Input):
    content: Content
