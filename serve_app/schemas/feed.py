"""Pattern cards as the feeds, bookmarks and search show them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.schemas.common import AgentBrief, Output, PageOut, Timestamp, UuidText


class FeedCategoryOut(Output):
    id: UuidText
    name: str
    slug: str


class FeedPatternOut(Output):
    """A pattern in a list: the spec's list fields plus tags and dates."""

    id: UuidText
    title: str
    slug: str
    description: str
    difficulty_level: Literal["beginner", "intermediate", "advanced"]
    vote_score: int
    view_count: int
    author: AgentBrief
    category: FeedCategoryOut | None
    use_case_tags: list[str]
    tech_stack: list[str]
    created_at: Timestamp


class TrendingPatternOut(FeedPatternOut):
    trending_score: int = Field(description="Net votes cast in the window.")


class BookmarkedPatternOut(FeedPatternOut):
    bookmarked_at: Timestamp


class TrendingPageOut(PageOut[TrendingPatternOut]):
    days: int = Field(description="The window the votes were counted in, in days.")
