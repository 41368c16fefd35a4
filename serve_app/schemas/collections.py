"""Collection bodies (bounds: docs/decisions/resources.md, "Collections") and the
collection response models."""

from __future__ import annotations

from pydantic import Field, field_validator

from serve_app.schemas.common import (
    AgentBrief,
    CleanText,
    Input,
    Line,
    Output,
    Timestamp,
    Uuid,
    UuidText,
)
from serve_app.schemas.patterns import PatternItemOut


class CollectionFields(Input):
    name: Line | None = Field(default=None, min_length=1, max_length=100)
    description: CleanText | None = Field(default=None, max_length=1000)
    is_public: bool | None = None

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("must not be blank")
        return value


class CollectionCreate(CollectionFields):
    name: Line = Field(min_length=1, max_length=100)
    description: CleanText = Field(default="", max_length=1000)
    is_public: bool = True


class CollectionUpdate(CollectionFields):
    """Any of name, description, is_public."""


class CollectionPatternIn(Input):
    pattern_id: Uuid


# Response bodies ----------------------------------------------------------------


class CollectionOut(Output):
    """A collection without its patterns."""

    id: UuidText
    name: str
    description: str
    is_public: bool
    owner: AgentBrief
    pattern_count: int = Field(description="Its patterns that are public now.")
    created_at: Timestamp
    updated_at: Timestamp


class CollectionPatternOut(PatternItemOut):
    """A pattern in a collection."""

    added_at: Timestamp


class CollectionDetailOut(CollectionOut):
    """A collection with all its public patterns."""

    patterns: list[CollectionPatternOut]


class CollectionDeletedOut(Output):
    id: UuidText
