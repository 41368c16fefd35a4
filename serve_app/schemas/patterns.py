"""Pattern bodies and the list query (bounds: docs/decisions.md, "Patterns")."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from serve_app.errors import BadRequest
from serve_app.schemas.common import CleanText, Input, Line, Uuid

Difficulty = Literal["beginner", "intermediate", "advanced"]

MAX_TAGS = 10
MAX_STACK = 20
MAX_EXAMPLES = 20
_TAG = re.compile(r"^[a-z0-9][a-z0-9+#._ -]{0,39}$")


def normalize_tag(raw: str) -> str:
    """Lower-case, trimmed, inner spaces collapsed; 1-40 of [a-z0-9+#._ -]."""
    tag = " ".join(raw.strip().lower().split())
    if not _TAG.match(tag):
        raise ValueError(f"invalid tag {raw!r}: 1-40 characters of a-z, 0-9, space, + # . _ -")
    return tag


def tag_query(raw: str | None, name: str) -> tuple[str, ...]:
    """A comma-separated tag filter of a list query, normalized (400 if invalid)."""
    if not raw:
        return ()
    try:
        return tuple(dict.fromkeys(normalize_tag(t) for t in raw.split(",") if t.strip()))
    except ValueError as exc:
        raise BadRequest(f"{name}: {exc}", error="validation_error") from exc


def _tags(values: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for value in values:
        seen.setdefault(normalize_tag(value), None)
    return list(seen)


Tags = Annotated[list[str], AfterValidator(_tags)]


class CodeExample(Input):
    language: Line = Field(min_length=1, max_length=30)
    code: str = Field(min_length=1, max_length=20_000)


ExampleKey = Annotated[str, Field(min_length=1, max_length=60, pattern=r"^[^\x00-\x1f\x7f]+$")]


class PatternFields(Input):
    """Fields shared by create and update, all optional here."""

    title: Line | None = Field(default=None, min_length=5, max_length=200)
    description: CleanText | None = Field(default=None, min_length=10, max_length=2000)
    content: str | None = Field(default=None, min_length=1, max_length=100_000)
    difficulty_level: Difficulty | None = None
    category_id: Uuid | None = None
    use_case_tags: Tags | None = Field(default=None, max_length=MAX_TAGS)
    tech_stack: Tags | None = Field(default=None, max_length=MAX_STACK)
    code_examples: dict[ExampleKey, CodeExample] | None = Field(
        default=None, max_length=MAX_EXAMPLES
    )

    @field_validator("content")
    @classmethod
    def _content_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank")
        return value


class PatternCreate(PatternFields):
    title: Line = Field(min_length=5, max_length=200)
    description: CleanText = Field(min_length=10, max_length=2000)
    content: str = Field(min_length=1, max_length=100_000)
    status: Literal["published"] = "published"


class PatternUpdate(PatternFields):
    # The author may archive (same as DELETE) or publish an archived pattern again.
    status: Literal["published", "archived"] | None = None
