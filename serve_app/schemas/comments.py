"""Comment bodies (bounds: docs/decisions.md, "Comments")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from serve_app.schemas.common import Input, Uuid, no_control_chars

MAX_CONTENT = 10_000
CommentSort = Literal["newest", "oldest", "top"]


def _not_blank(value: str) -> str:
    value = no_control_chars(value).strip()
    if not value:
        raise ValueError("must not be blank")
    return value


Content = Annotated[str, Field(min_length=1, max_length=MAX_CONTENT), AfterValidator(_not_blank)]


class CommentCreate(Input):
    content: Content
    parent_id: Uuid | None = None


class CommentUpdate(Input):
    content: Content
