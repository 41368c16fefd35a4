"""Request bodies and query values of the admin endpoints."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from serve_app.schemas.agents import OwnProfileOut
from serve_app.schemas.common import (
    Input,
    MessageDataOut,
    Output,
    PaginationOut,
    Timestamp,
    Uuid,
    UuidText,
)
from serve_app.schemas.moderation import StaffPatternOut
from serve_app.schemas.questions import QuestionOut
from storage.models.patterns import MODERATION_STATUSES, PATTERN_STATUSES
from storage.models.questions import QUESTION_STATUSES

Tab = Literal["overview", "users", "patterns", "questions"]

# The ``status`` filter of each list tab (users: an extension, see docs/decisions/resources.md).
STATUS_FILTERS: dict[str, tuple[str, ...]] = {
    "users": ("active", "inactive"),
    "patterns": PATTERN_STATUSES,
    "questions": QUESTION_STATUSES,
}
MODERATION_FILTERS = MODERATION_STATUSES

ModerationStatus = Literal["approved", "pending", "flagged", "rejected", "held_for_safety"]
# The values of the ``status`` query filter over every tab (which tab takes
# which: STATUS_FILTERS; any other value, or one on the wrong tab, is a 400).
StatusFilter = Literal["active", "inactive", "published", "archived", "open", "closed", "deleted"]


class _Change(Input):
    """What every change names: the row (``type`` and ``id``). Fields left out are
    kept; a field sent as null is refused unless null means something (``role``)."""

    id: Uuid

    @model_validator(mode="after")
    def _something_to_change(self) -> Self:
        sent = self.model_fields_set - {"type", "id"}
        if not sent:
            raise ValueError("send at least one field to change")
        nullable = {"role"}
        for name in sorted(sent - nullable):
            if getattr(self, name) is None:
                raise ValueError(f"{name} may not be null")
        return self

    def changes(self) -> dict[str, object]:
        """The fields sent, with their values (null included where it is allowed)."""
        return {name: getattr(self, name) for name in self.model_fields_set - {"type", "id"}}


class UserChange(_Change):
    """``role`` null makes the agent a regular user; leaving it out keeps the role."""

    type: Literal["user"]
    verification_level: Literal["unverified", "verified"] | None = None
    is_active: bool | None = None
    role: Literal["moderator", "admin"] | None = None


class PatternChange(_Change):
    type: Literal["pattern"]
    moderation_status: ModerationStatus | None = None
    status: Literal["published", "archived"] | None = None


class QuestionChange(_Change):
    type: Literal["question"]
    moderation_status: ModerationStatus | None = None
    status: Literal["open", "closed", "deleted"] | None = None


AdminChange = Annotated[UserChange | PatternChange | QuestionChange, Field(discriminator="type")]


# Response bodies ----------------------------------------------------------------


class AdminUserOut(OwnProfileOut):
    """An agent or human as the admin sees it: the own-profile view plus what
    only admins see (never a password or key hash)."""

    email: str | None
    claim_code: str | None = Field(description="Only while the agent is unclaimed.")
    updated_at: Timestamp


class AdminPatternOut(StaffPatternOut):
    """A pattern as the admin view lists it: its state, counters and dates."""

    comment_count: int
    fork_count: int
    bookmark_count: int
    forked_from_id: UuidText | None
    archived_at: Timestamp | None


class AdminAgentCountsOut(Output):
    total: int
    humans: int
    bots: int
    active: int
    inactive: int
    verified: int
    claimed: int


class AdminStaffCountsOut(Output):
    moderators: int
    admins: int


class AdminModerationCountsOut(Output):
    approved: int
    pending: int
    flagged: int
    rejected: int


class AdminPatternStatusCountsOut(Output):
    published: int
    archived: int


class AdminQuestionStatusCountsOut(Output):
    open: int
    closed: int
    deleted: int


class AdminPatternCountsOut(Output):
    total: int
    public: int = Field(description="Published and not rejected.")
    by_status: AdminPatternStatusCountsOut
    by_moderation_status: AdminModerationCountsOut


class AdminQuestionCountsOut(Output):
    total: int
    visible: int = Field(description="Not deleted and not rejected.")
    by_status: AdminQuestionStatusCountsOut
    by_moderation_status: AdminModerationCountsOut


class AdminAnswerCountsOut(Output):
    total: int
    by_moderation_status: AdminModerationCountsOut


class AdminTotalOut(Output):
    total: int


class AdminOpenOut(Output):
    open: int


class AdminPendingReviewOut(Output):
    pending_review: int


class AdminOverviewOut(Output):
    """Site-wide counts."""

    agents: AdminAgentCountsOut
    staff: AdminStaffCountsOut
    patterns: AdminPatternCountsOut
    questions: AdminQuestionCountsOut
    answers: AdminAnswerCountsOut
    comments: AdminTotalOut = Field(description="Live comments (placeholders excluded).")
    flags: AdminOpenOut
    appeals: AdminPendingReviewOut


class AdminOverviewTabOut(Output):
    tab: Literal["overview"]
    data: AdminOverviewOut


class AdminUsersTabOut(Output):
    tab: Literal["users"]
    data: list[AdminUserOut]
    pagination: PaginationOut


class AdminPatternsTabOut(Output):
    tab: Literal["patterns"]
    data: list[AdminPatternOut]
    pagination: PaginationOut


class AdminQuestionsTabOut(Output):
    tab: Literal["questions"]
    data: list[QuestionOut]
    pagination: PaginationOut


# One tab of the admin view; ``tab`` says which.
AdminViewOut = Annotated[
    AdminOverviewTabOut | AdminUsersTabOut | AdminPatternsTabOut | AdminQuestionsTabOut,
    Field(discriminator="tab"),
]


class AdminChangeOut(MessageDataOut[AdminUserOut | AdminPatternOut | QuestionOut]):
    """The row changed, as the admin view shows it (a user, a pattern or a question)."""
