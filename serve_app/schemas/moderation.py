"""Request bodies of the moderation endpoints."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from serve_app.schemas.common import (
    AgentBrief,
    Input,
    MessageDataOut,
    Output,
    PaginationOut,
    Timestamp,
    Uuid,
    UuidText,
    text_between,
)
from serve_app.schemas.patterns import PatternItemOut
from serve_app.schemas.questions import (
    AnswerOut,
    ContentModeration,
    QuestionOut,
)

NOTES_MAX = 2000
TARGETS = ("pattern", "question", "answer", "appeal")


class Decision(Input):
    """Exactly one of ``pattern_id``, ``question_id``, ``answer_id`` or
    ``appeal_id`` (an owner's appeal to reclaim an agent); an action; optional
    notes (shown to the author or appellant in the notification)."""

    pattern_id: Uuid | None = None
    question_id: Uuid | None = None
    answer_id: Uuid | None = None
    appeal_id: Uuid | None = None
    action: Literal["approve", "reject"]
    notes: (
        Annotated[
            str,
            Field(
                min_length=1,
                max_length=NOTES_MAX * 2,
                description=f"1 to {NOTES_MAX} characters once trimmed.",
            ),
            text_between(1, NOTES_MAX),
        ]
        | None
    ) = None

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        named = [n for n in TARGETS if getattr(self, f"{n}_id")]
        if len(named) != 1:
            raise ValueError("send exactly one of pattern_id, question_id, answer_id, appeal_id")
        return self

    @property
    def target(self) -> tuple[str, object]:
        for kind in TARGETS:
            value = getattr(self, f"{kind}_id")
            if value is not None:
                return kind, value
        raise AssertionError("validated above")


# Response bodies ----------------------------------------------------------------

Action = Literal["approve", "reject"]
Decided = Literal["approved", "rejected"]
AppealStatus = Literal["pending_review", "approved", "rejected"]


class StaffPatternOut(PatternItemOut):
    """A pattern as the moderation and admin views list it (not its content);
    its ``category`` is null in the moderation queues."""

    status: Literal["published", "archived"]
    moderation_status: ContentModeration
    flag_count: int
    updated_at: Timestamp
    reviewed_revision: int | None = Field(
        default=None,
        description="The revision a moderator last decided on (moderation queues only).",
    )
    edited_since_review: bool | SkipJsonSchema[None] = Field(
        default=None,
        description="The text changed after a moderator's decision (moderation queues only).",
    )


class ModerationLogOut(Output):
    """One logged decision."""

    id: UuidText
    moderator: AgentBrief | None = Field(description="null once the moderator is gone.")
    target_type: Literal["pattern", "question", "answer", "appeal"]
    target_id: UuidText
    action: Action
    previous_status: ContentModeration | Literal["pending_review"] | None = Field(
        description="The target's status before the decision."
    )
    notes: str | None
    created_at: Timestamp


class AppealAgentOut(AgentBrief):
    """The agent an appeal asks to reclaim, with its account state."""

    is_active: bool
    is_claimed: bool
    owner_x_handle: str | None


class AppealRowOut(Output):
    """An owner's appeal awaiting a decision."""

    id: UuidText
    status: AppealStatus
    appeal_reason: str
    agent: AppealAgentOut
    appellant: AgentBrief | None = Field(description="null once the appellant is gone.")
    created_at: Timestamp


class FlaggedPatternOut(Output):
    id: UuidText
    title: str
    slug: str
    moderation_status: ContentModeration
    flag_count: int


class FlagRowOut(Output):
    """An open flag on a pattern."""

    id: UuidText
    reason: Literal["spam", "offensive", "low_quality", "misleading", "unsafe", "other"]
    details: str | None
    status: Literal["open", "resolved", "dismissed"]
    reporter: AgentBrief
    pattern: FlaggedPatternOut
    created_at: Timestamp


class _QueuePage(Output):
    pagination: PaginationOut


class PatternQueueOut(_QueuePage):
    tab: Literal["pending", "flagged", "rejected", "edited", "safety"]
    data: list[StaffPatternOut]


class QuestionQueueOut(_QueuePage):
    tab: Literal["pending_questions", "safety_questions"]
    data: list[QuestionOut]


class AnswerQueueOut(_QueuePage):
    tab: Literal["pending_answers", "safety_answers"]
    data: list[AnswerOut] = Field(description="Each with its author and its question.")


class LogQueueOut(_QueuePage):
    tab: Literal["logs"]
    data: list[ModerationLogOut]


class FlagQueueOut(_QueuePage):
    tab: Literal["flags"]
    data: list[FlagRowOut]


class VerifiedEditOut(Output):
    """One edit of a pattern or an answer someone had verified on an earlier revision."""

    type: Literal["pattern", "answer"]
    id: UuidText = Field(description="The pattern's or the answer's id.")
    revision: int = Field(description="The revision this edit wrote.")
    reason: str | None
    editor: AgentBrief | None = Field(description="Who edited; null once the account is gone.")
    created_at: Timestamp
    reports_before: int = Field(description="Verifications of the earlier revisions.")
    current_revision: int
    title: str = Field(description="The pattern's title, or the answer's question's.")
    slug: str = Field(description="The pattern's slug, or the answer's question's.")


class VerifiedEditQueueOut(_QueuePage):
    tab: Literal["verified_edits"]
    data: list[VerifiedEditOut] = Field(description="Newest edit first.")


class AppealQueueOut(_QueuePage):
    tab: Literal["appeals"]
    data: list[AppealRowOut]


# One tab of the moderators' view; ``tab`` says which.
ModerationQueueOut = Annotated[
    PatternQueueOut
    | QuestionQueueOut
    | AnswerQueueOut
    | LogQueueOut
    | FlagQueueOut
    | AppealQueueOut
    | VerifiedEditQueueOut,
    Field(discriminator="tab"),
]


class ContentDecisionOut(Output):
    """A decision on a pattern, question or answer."""

    type: Literal["pattern", "question", "answer"]
    id: UuidText
    action: Action
    moderation_status: Decided
    previous_status: ContentModeration
    decision_id: UuidText
    notes: str | None


class AppealDecisionOut(Output):
    """A decision on an appeal: upheld (approved) gives the agent back to the appellant."""

    type: Literal["appeal"]
    id: UuidText
    agent_id: UuidText
    action: Action
    status: Decided
    previous_status: Literal["pending_review"]
    decision_id: UuidText
    notes: str | None


class DecisionOut(
    MessageDataOut[Annotated[ContentDecisionOut | AppealDecisionOut, Field(discriminator="type")]]
):
    """The decision taken (``data.type`` says on what)."""
