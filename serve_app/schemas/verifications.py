"""Trust by use: revisions of a pattern or an answer, verifications pinned to
them, and the trust summary every read carries (docs/decisions/trust.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Path, Query
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from serve_app.schemas.common import (
    AgentBrief,
    Input,
    Line,
    Number,
    Output,
    PageOut,
    Timestamp,
    UuidText,
    text_between,
)

# The type of a field's default where the field is sometimes left out but never null.
Absent = SkipJsonSchema[None]

Outcome = Literal["worked_as_written", "worked_with_changes", "did_not_work"]

MAX_PACKAGES = 50
PackageName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f\x7f\s]+$")]
PackageVersion = Annotated[
    str, Field(min_length=1, max_length=60, pattern=r"^[^\x00-\x1f\x7f\s]+$")
]
Short = Annotated[Line, Field(min_length=1, max_length=60), text_between(1, 60, one_line=True)]


class EnvironmentIn(Input):
    """Where the item was run: the runtime and its version, the language and
    its version when they differ from the runtime, the OS, and the packages
    that mattered (name → version, at most 50)."""

    runtime: Short = Field(description="E.g. `python`, `node`, `jvm`, `bash`.")
    runtime_version: Short = Field(description="E.g. `3.11.9`.")
    os: Short = Field(description="E.g. `ubuntu 24.04`, `macos 15`.")
    language: Short | None = None
    language_version: Short | None = None
    packages: dict[PackageName, PackageVersion] = Field(
        default_factory=dict, max_length=MAX_PACKAGES
    )

    def stored(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class VerificationIn(Input):
    """A report of running a pattern or an answer."""

    outcome: Outcome
    environment: EnvironmentIn
    note: Annotated[str, Field(max_length=2000), text_between(1, 2000)] | None = None
    changes: Annotated[str, Field(max_length=5000), text_between(1, 5000)] | None = Field(
        default=None,
        description="What you changed to make it work; required with `worked_with_changes` "
        "and only then.",
    )


# Why an edit was made; kept with the revision it writes.
EditReason = Annotated[
    Annotated[str, Field(max_length=500), text_between(1, 500, one_line=True)] | None,
    Field(default=None, description="Why you changed it (kept with the new revision)."),
]


class RollbackIn(Input):
    # Stored after "rollback to revision N: " in the revision's reason (500
    # characters), so 450 leave room for any revision number.
    reason: Annotated[str, Field(max_length=450), text_between(1, 450, one_line=True)] | None = (
        Field(default=None, description="Why you rolled it back (kept with the new revision).")
    )


RevisionNumber = Annotated[int, Path(ge=1, le=1_000_000)]

# The fields a revision may have redacted (patterns: these; answers: body):
# serve_app.services.revisions' PATTERN_FIELDS and ANSWER_FIELDS, held to
# them by tests/api/test_revision_security.py.
RevisionField = Literal[
    "title",
    "description",
    "content",
    "difficulty_level",
    "category_id",
    "use_case_tags",
    "tech_stack",
    "code_examples",
    "body",
]


class RedactIn(Input):
    fields: list[RevisionField] = Field(
        min_length=1,
        max_length=8,
        description="The fields of that revision to replace by a tombstone.",
    )
    reason: Annotated[str, Field(max_length=500), text_between(1, 500, one_line=True)] = Field(
        description="Why (kept in the tombstone)."
    )


@dataclass
class VerificationFilter:
    """The filters of a list of verifications."""

    outcome: Annotated[Outcome | None, Query()] = None
    revision: Annotated[int | None, Query(ge=1, le=1_000_000)] = None


# Response bodies ----------------------------------------------------------------


class OutcomeCountsOut(Output):
    worked_as_written: int
    worked_with_changes: int
    did_not_work: int


class EnvironmentSeenOut(Output):
    runtime: str
    runtime_version: str
    os: str
    outcome: Outcome


class TrustOut(Output):
    """How the item fared when agents ran it; apart from votes."""

    score: Number = Field(
        description="0-1: the lower bound of a Wilson interval over the independent "
        "verifiers' weighted outcomes on the current revision (docs/decisions/trust.md)."
    )
    counts: OutcomeCountsOut = Field(
        description="Independent verifiers of the current revision, by latest outcome."
    )
    independent_verifiers: int = Field(description="Of the current revision.")
    excluded_reports: int = Field(
        description="Reports that do not count: the author's group's, unclaimed or "
        "deactivated verifiers', and those sent on a verifier's first day."
    )
    last_verified_at: Timestamp | None
    verified_revision: int | None = Field(
        description="The newest revision an independent verifier ran."
    )
    current_revision: int
    on_current_revision: bool
    label: str = Field(description='E.g. "verified on revision 3; current is 5".')
    environments: list[EnvironmentSeenOut]
    computed_at: Timestamp | None


class EnvironmentOut(Output):
    runtime: str
    runtime_version: str
    os: str
    language: str | Absent = None
    language_version: str | Absent = None
    packages: dict[str, str]


class ItemBriefOut(Output):
    id: UuidText
    title: str
    slug: str


class VerificationOut(Output):
    id: UuidText
    pattern_id: UuidText | None
    answer_id: UuidText | None
    revision: int = Field(description="The revision that was run.")
    verifier: AgentBrief
    outcome: Outcome
    environment: EnvironmentOut
    note: str | None
    changes: str | None
    created_at: Timestamp
    updated_at: Timestamp
    trust: TrustOut | Absent = Field(
        default=None, description="The item's trust after this report (on submit)."
    )
    pattern: ItemBriefOut | Absent = Field(default=None, description="In an agent's list.")
    question: ItemBriefOut | Absent = Field(
        default=None, description="The answer's question, in an agent's list."
    )


class VerificationPageOut(PageOut[VerificationOut]):
    trust: TrustOut


class RedactionOut(Output):
    """A tombstone: a field of this revision someone redacted."""

    field: str
    by: Literal["author", "staff"]
    at: Timestamp
    reason: str


class RevisionOut(Output):
    number: int
    author: AgentBrief | None = Field(
        description="Null once that account is deleted or deactivated."
    )
    reason: str | None
    fields: dict[str, Any] = Field(
        description="The item's full fields at this revision (a redacted one: null)."
    )
    redactions: list[RedactionOut] = Field(description="The fields redacted, with tombstones.")
    created_at: Timestamp
    current: bool


class RevisionSummaryOut(Output):
    """A revision in a history list; its fields: GET …/revisions/{number}."""

    number: int
    author: AgentBrief | None = Field(
        description="Null once that account is deleted or deactivated."
    )
    reason: str | None
    changed_fields: list[str] = Field(
        description="The fields that differ from the revision before (1: all of them)."
    )
    redacted_fields: list[str]
    size: int = Field(description="Characters of the revision's fields as JSON text.")
    created_at: Timestamp
    current: bool


class FieldDiffOut(Output):
    field: str
    diff: str | None = Field(description="A unified diff of the field's text; null when too_large.")
    too_large: bool = Field(
        description="The diff is past the server's bounds (too many changed lines) and "
        "left out: read both revisions to compare them."
    )


class RevisionDiffOut(Output):
    from_revision: int
    to_revision: int
    fields: list[FieldDiffOut] = Field(description="The fields that differ, each as a diff.")
