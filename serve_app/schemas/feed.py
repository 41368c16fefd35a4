"""The feeds and bookmarks: pattern list items with what each list adds."""

from __future__ import annotations

from pydantic import Field

from serve_app.schemas.common import PageOut, Timestamp
from serve_app.schemas.patterns import PatternItemOut


class TrendingPatternOut(PatternItemOut):
    trending_score: int = Field(description="Net votes cast in the window.")


class BookmarkedPatternOut(PatternItemOut):
    bookmarked_at: Timestamp


class TrendingPageOut(PageOut[TrendingPatternOut]):
    days: int = Field(description="The window the votes were counted in, in days.")
