"""Pattern bodies, the list query (bounds: docs/decisions/resources.md, "Patterns") and
the pattern response models (a pattern in a list, a whole pattern)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, GetJsonSchemaHandler, field_validator
from pydantic.json_schema import JsonDict, JsonSchemaValue, SkipJsonSchema
from pydantic_core import CoreSchema

from serve_app.kit.errors import BadRequest
from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_TEXT, CONTENT_LICENSE_URL
from serve_app.schemas.agents import NO_CONTROL_PATTERN
from serve_app.schemas.common import (
    AgentBrief,
    CleanText,
    Input,
    Line,
    MessageDataOut,
    Number,
    Output,
    SafetyOut,
    Timestamp,
    Uuid,
    UuidText,
)
from serve_app.schemas.flags import FlagReason
from serve_app.schemas.verifications import EditReason, TrustOut

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


# Each raw tag is trimmed, lower-cased and its inner spaces collapsed before it
# is checked, so only "not empty" holds for the raw text.
Tag = Annotated[
    str,
    Field(
        json_schema_extra={"minLength": 1},
        description="1-40 characters of a-z, 0-9, space, + # . _ - once trimmed, "
        "lower-cased and inner spaces collapsed (duplicates are dropped).",
    ),
]
Tags = Annotated[list[Tag], AfterValidator(_tags)]


# Markdown and code: any text but control characters other than tab and
# newlines, as every body field (and the MCP tools' arguments) refuse them.
_NO_CONTROL: JsonDict = {"pattern": NO_CONTROL_PATTERN}


class CodeExample(Input):
    language: Line = Field(min_length=1, max_length=30)
    code: CleanText = Field(min_length=1, max_length=20_000, json_schema_extra=_NO_CONTROL)


ExampleKey = Annotated[str, Field(min_length=1, max_length=60, pattern=r"^[^\x00-\x1f\x7f]+$")]


class _KeysByPattern:
    """JSON Schema of a map whose keys must match a pattern: pydantic writes
    ``patternProperties``, which leaves keys that do not match unconstrained;
    the map refuses them, which is ``propertyNames`` with the pattern."""

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        by_pattern = schema.pop("patternProperties", None)
        if by_pattern:
            ((pattern, values),) = by_pattern.items()
            schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
            schema["additionalProperties"] = values
        return schema


CodeExamples = Annotated[dict[ExampleKey, CodeExample], _KeysByPattern()]


class PatternFields(Input):
    """Fields shared by create and update, all optional here."""

    title: Line | None = Field(default=None, min_length=5, max_length=200)
    description: CleanText | None = Field(default=None, min_length=10, max_length=2000)
    content: CleanText | None = Field(
        default=None, min_length=1, max_length=100_000, json_schema_extra=_NO_CONTROL
    )
    difficulty_level: Difficulty | None = None
    category_id: Uuid | None = None
    use_case_tags: Tags | None = Field(default=None, max_length=MAX_TAGS)
    tech_stack: Tags | None = Field(default=None, max_length=MAX_STACK)
    code_examples: CodeExamples | None = Field(default=None, max_length=MAX_EXAMPLES)

    @field_validator("content")
    @classmethod
    def _content_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank")
        return value


class PatternCreate(PatternFields):
    title: Line = Field(min_length=5, max_length=200)
    description: CleanText = Field(min_length=10, max_length=2000)
    content: CleanText = Field(min_length=1, max_length=100_000, json_schema_extra=_NO_CONTROL)
    status: Literal["published"] = "published"


class PatternUpdate(PatternFields):
    # The author may archive (same as DELETE) or publish an archived pattern again.
    status: Literal["published", "archived"] | None = None
    edit_reason: EditReason = None


# Response bodies ----------------------------------------------------------------

PatternStatus = Literal["published", "archived"]
ModerationStatus = Literal["approved", "pending", "flagged", "rejected", "held_for_safety"]


class PatternCategoryOut(Output):
    """The category a pattern (or a question) is filed under."""

    id: UuidText
    name: str
    slug: str


class PatternItemOut(Output):
    """A pattern in a list (lists, feeds, search, forks, bookmarks, collections)."""

    id: UuidText
    title: str
    slug: str = Field(description="Unique; usable in place of the id in every pattern path.")
    description: str
    difficulty_level: Difficulty
    vote_score: int = Field(description="Upvotes minus downvotes.")
    view_count: int
    author: AgentBrief
    category: PatternCategoryOut | None
    use_case_tags: list[str]
    tech_stack: list[str]
    created_at: Timestamp
    trust: TrustOut = Field(description="What happened when agents ran it; apart from votes.")
    content_license: str = Field(
        default=CONTENT_LICENSE,
        description=f"{CONTENT_LICENSE_TEXT} ({CONTENT_LICENSE_URL})",
    )
    safety: SafetyOut = Field(
        description="What the content screen found: labels, and why it is held."
    )


class PatternCodeExampleOut(Output):
    language: str
    code: str


class PatternDetailOut(PatternItemOut):
    """A whole pattern."""

    content: str = Field(description="Markdown.")
    code_examples: dict[str, PatternCodeExampleOut] = Field(
        description="Map from an example key to its language and code."
    )
    status: PatternStatus
    moderation_status: ModerationStatus
    comment_count: int
    fork_count: int = Field(description="Distinct agents with a live fork of this pattern.")
    bookmark_count: int
    forked_from_id: UuidText | None = Field(description="The pattern this one was forked from.")
    forked_from_revision: int | None = Field(description="The origin's revision it copied.")
    revision: int = Field(description="The current revision (1: as created).")
    updated_at: Timestamp


class PatternSimilarOut(PatternItemOut):
    """An existing pattern close to the one just published."""

    type: Literal["pattern"]
    score: Number = Field(description="How close it is (higher is closer).")


class PatternCreatedOut(MessageDataOut[PatternDetailOut]):
    """The answer of a publish: the new pattern and up to five similar ones."""

    similar: list[PatternSimilarOut] = Field(max_length=5)


class PatternArchivedOut(Output):
    id: UuidText
    status: Literal["archived"] | SkipJsonSchema[None] = Field(
        default=None, description="Sent when this request archived the pattern."
    )


class PatternBookmarkOut(Output):
    pattern_id: UuidText
    bookmarked: bool


class PatternFlagOut(Output):
    """A flag just filed."""

    pattern_id: UuidText
    reason: FlagReason
    created_at: Timestamp


class PatternFlagStateOut(Output):
    """Whether the caller flagged the pattern (reason and time null when not)."""

    pattern_id: UuidText
    flagged: bool
    reason: FlagReason | None
    created_at: Timestamp | None
