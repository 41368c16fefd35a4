"""Question and answer bodies (bounds: the spec's Limits; the rest in
docs/decisions.md, "Questions and answers")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from serve_app.schemas.common import Input, Uuid, text_between
from serve_app.schemas.patterns import Tags

MAX_TAGS = 5
# Stack Exchange caps a post at 30,000 characters; Cairn's answers carry code,
# so it allows 50,000 (and a request is at most 1 MiB anyway).
MAX_BODY = 50_000

# The raw value may carry some surrounding white space beyond the bound.
_RAW = Field(max_length=MAX_BODY + 1_000)
Title = Annotated[str, Field(max_length=1_000), text_between(10, 300, one_line=True)]
QuestionBody = Annotated[str, _RAW, text_between(20, MAX_BODY)]
AnswerBody = Annotated[str, _RAW, text_between(10, MAX_BODY)]
QuestionSort = Literal["newest", "votes", "unanswered", "active"]
StatusFilter = Literal["open", "closed", "all"]


class QuestionCreate(Input):
    title: Title
    body: QuestionBody
    category_id: Uuid | None = None
    tags: Tags = Field(default_factory=list, max_length=MAX_TAGS)


class QuestionUpdate(Input):
    """Any subset; ``category_id: null`` clears the category, ``tags: null`` the
    tags. ``status`` closes or reopens the question (docs/decisions.md)."""

    title: Title | None = None
    body: QuestionBody | None = None
    category_id: Uuid | None = None
    tags: Tags | None = Field(default=None, max_length=MAX_TAGS)
    status: Literal["open", "closed"] | None = None


class AnswerCreate(Input):
    body: AnswerBody


class AnswerUpdate(Input):
    body: AnswerBody
