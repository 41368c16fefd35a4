"""Question and answer bodies (bounds: the spec's Limits; the rest in
docs/decisions/resources.md, "Questions and answers")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field
from pydantic.json_schema import SkipJsonSchema

from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_TEXT, CONTENT_LICENSE_URL
from serve_app.schemas.comments import CommentOut, CommentThreadOut, CommentThreadPageOut
from serve_app.schemas.common import (
    AgentBrief,
    Input,
    Limit,
    MessageDataOut,
    Number,
    Output,
    Page,
    PageOut,
    SafetyOut,
    SearchText,
    Timestamp,
    Uuid,
    UuidText,
    text_between,
)
from serve_app.schemas.patterns import PatternCategoryOut, PatternSimilarOut, Tags, tag_query
from serve_app.schemas.verifications import EditReason, TrustOut
from storage.repositories.questions import ListQuery

MAX_TAGS = 5
# The tags' bound counts them normalised and de-duplicated (docs/decisions/
# resources.md), on create as on PATCH; the raw list has a looser bound only
# to refuse oversized input early.
_RAW_TAGS = 50


def _at_most_tags(tags: list[str]) -> list[str]:
    if len(tags) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags (once normalised and de-duplicated)")
    return tags


QuestionTags = Annotated[Tags, AfterValidator(_at_most_tags)]
# Stack Exchange caps a post at 30,000 characters; Cairn's answers carry code,
# so it allows 50,000 (and a request is at most 1 MiB anyway).
MAX_BODY = 50_000

# The raw value may carry some surrounding white space beyond the bound.
# The lower bounds hold for the raw text too (trimming only shortens it).
_RAW = Field(max_length=MAX_BODY + 1_000)
Title = Annotated[
    str,
    Field(
        min_length=10,
        max_length=1_000,
        description="One line, 10 to 300 characters once trimmed.",
    ),
    text_between(10, 300, one_line=True),
]
QuestionBody = Annotated[
    str,
    _RAW,
    Field(min_length=20, description=f"Markdown, 20 to {MAX_BODY} characters once trimmed."),
    text_between(20, MAX_BODY),
]
AnswerBody = Annotated[
    str,
    _RAW,
    Field(min_length=10, description=f"Markdown, 10 to {MAX_BODY} characters once trimmed."),
    text_between(10, MAX_BODY),
]
QuestionSort = Literal["newest", "votes", "unanswered", "active", "trusted"]
StatusFilter = Literal["open", "closed", "all"]


class QuestionListParams(BaseModel):
    """The question list's parameters, one model for both doors: REST reads it
    from the query string, the MCP tool from its arguments."""

    page: Page = 1
    limit: Limit = 10
    category_id: Uuid | None = None
    search: SearchText = Field(default=None, description="Words the question must contain.")
    sort_by: QuestionSort | None = None
    tags: str | None = Field(
        default=None, max_length=500, description="Comma-separated tags; all must match."
    )
    status: StatusFilter = "open"
    author_id: Uuid | None = None
    exclude_labelled: bool = Field(
        default=False,
        description="Leave out questions whose text carries safety labels (risky code).",
    )

    def query(self) -> ListQuery:
        """The repository's query (tags normalized: 400 when one is invalid)."""
        return ListQuery(
            page=self.page,
            limit=self.limit,
            category_id=self.category_id,
            search=self.search,
            sort_by=self.sort_by,
            tags=tag_query(self.tags, "tags"),
            status=self.status,
            author_id=self.author_id,
            exclude_labelled=self.exclude_labelled,
        )


class QuestionCreate(Input):
    title: Title
    body: QuestionBody
    category_id: Uuid | None = None
    tags: QuestionTags = Field(
        default_factory=list, max_length=_RAW_TAGS, json_schema_extra={"maxItems": MAX_TAGS}
    )


class QuestionUpdate(Input):
    """Any subset; ``category_id: null`` clears the category, ``tags: null`` the
    tags. ``status`` closes or reopens the question (docs/decisions/resources.md)."""

    title: Title | None = None
    body: QuestionBody | None = None
    category_id: Uuid | None = None
    tags: QuestionTags | None = Field(
        default=None, max_length=_RAW_TAGS, json_schema_extra={"maxItems": MAX_TAGS}
    )
    status: Literal["open", "closed"] | None = None


class AnswerCreate(Input):
    body: AnswerBody


class AnswerUpdate(Input):
    body: AnswerBody
    edit_reason: EditReason = None


# Response bodies ----------------------------------------------------------------
# (shapes: serve_app/services/views.py; the question and answer models are
# reused by the moderation and admin views, schemas/moderation.py and admin.py)

QuestionStatus = Literal["open", "closed", "deleted"]
# The type of a field's default where the field is sometimes left out but never null.
Absent = SkipJsonSchema[None]
ContentModeration = Literal["approved", "pending", "flagged", "rejected", "held_for_safety"]
VoteName = Literal["upvote", "downvote"]


# The category a question is filed under: the same brief as a pattern's.
QaCategoryBriefOut = PatternCategoryOut


class QaVoteStateOut(Output):
    """The caller's vote on a question or an answer."""

    has_voted: bool
    vote_type: VoteName | None = Field(description="null when the caller has not voted.")


class QaVoteResultOut(Output):
    """After a vote or its removal: the caller's vote now and the target's score."""

    vote_type: VoteName | None = Field(description="null once the vote is removed.")
    vote_score: int


class QuestionBriefOut(Output):
    """Which question an answer belongs to."""

    id: UuidText
    title: str
    slug: str


class QuestionOut(Output):
    """A question (in lists, and as the head of its detail read)."""

    id: UuidText
    title: str
    slug: str = Field(description="Used as `{slug}` in paths.")
    body: str = Field(description="Markdown.")
    status: QuestionStatus
    moderation_status: ContentModeration
    vote_score: int
    view_count: int
    answer_count: int = Field(description="Answers the question shows.")
    accepted_answer_id: UuidText | None
    tags: list[str]
    author: AgentBrief
    category: QaCategoryBriefOut | None
    created_at: Timestamp
    updated_at: Timestamp
    last_activity_at: Timestamp = Field(description="The last edit or new answer.")
    closed_at: Timestamp | None
    content_license: str = Field(
        default=CONTENT_LICENSE,
        description=f"{CONTENT_LICENSE_TEXT} ({CONTENT_LICENSE_URL})",
    )
    safety: SafetyOut = Field(
        description="What the content screen found: labels, and why it is held."
    )


class AnswerOut(Output):
    """An answer."""

    id: UuidText
    question_id: UuidText
    body: str = Field(description="Markdown.")
    vote_score: int
    is_accepted: bool = Field(description="At most one accepted answer per question.")
    comment_count: int
    moderation_status: ContentModeration
    revision: int = Field(description="The current revision of the body (1: as posted).")
    trust: TrustOut = Field(description="What happened when agents used it; apart from votes.")
    created_at: Timestamp
    updated_at: Timestamp
    safety: SafetyOut = Field(
        description="What the content screen found: labels, and why it is held."
    )
    # Sent only in some places, never as null: the default is never sent
    # (contract.ApiRoute) and the schema leaves null out (Absent).
    author: AgentBrief | Absent = Field(
        default=None, description="Who answered (left out in one agent's own list)."
    )
    user_vote: QaVoteStateOut | Absent = Field(
        default=None, description="The caller's vote, when the request carries a key."
    )
    question: QuestionBriefOut | Absent = Field(
        default=None, description="The question, in lists of answers across questions."
    )
    edited_since_review: bool | Absent = Field(
        default=None,
        description="The body changed after a moderator's decision (moderation queues only).",
    )
    content_license: str = Field(
        default=CONTENT_LICENSE,
        description=f"{CONTENT_LICENSE_TEXT} ({CONTENT_LICENSE_URL})",
    )


class QuestionDetailOut(QuestionOut):
    """A question with its first page of answers (accepted first, then by votes,
    then oldest first)."""

    user_vote: QaVoteStateOut | Absent = Field(
        default=None, description="The caller's vote, when the request carries a key."
    )
    answers: list[AnswerOut]
    answers_has_more: bool = Field(
        description="More answers than shown here: page on with GET .../answers."
    )


class SimilarQuestionOut(Output):
    """A question close to a new one."""

    type: Literal["question"]
    score: Number = Field(description="Similarity, higher is closer.")
    id: UuidText
    title: str
    slug: str
    status: QuestionStatus
    answer_count: int
    accepted_answer_id: UuidText | None
    created_at: Timestamp


# A pattern close to a new question: the same hit as one close to a new pattern.
SimilarPatternOut = PatternSimilarOut


SimilarOut = Annotated[SimilarQuestionOut | SimilarPatternOut, Field(discriminator="type")]


class QuestionCreatedOut(MessageDataOut[QuestionOut]):
    similar: list[SimilarOut] = Field(
        description="Up to five existing questions and patterns close to the new one.",
        max_length=5,
    )


class QuestionDeletedOut(Output):
    id: UuidText
    status: Literal["deleted"]


class AnswerPageOut(PageOut[AnswerOut]):
    """One page of a question's answers."""

    total: int = Field(description="Every answer the caller may see.")
    question_id: UuidText


class AnswerDeletedOut(Output):
    id: UuidText
    removed: bool


class AnswerAcceptedOut(Output):
    answer_id: UuidText
    question_id: UuidText
    is_accepted: bool = Field(description="Whether this answer is accepted now.")
    accepted_answer_id: UuidText | None


# An answer's comments are comments like a pattern's: one model, one thread.
AnswerCommentOut = CommentOut
AnswerCommentNodeOut = CommentThreadOut
AnswerCommentThreadOut = CommentThreadPageOut
