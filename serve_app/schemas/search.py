"""Query parameters of GET /api/search."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query

SearchType = Literal["patterns", "agents", "all"]
SearchLimit = Annotated[int, Query(ge=1, le=100)]
# Longer queries are refused rather than cut: the model reads ~256 word pieces.
SearchQueryText = Annotated[str | None, Query(max_length=1000)]

# The kinds each `type` searches (questions have their own `search` parameter).
KINDS: dict[str, list[str]] = {
    "patterns": ["pattern"],
    "agents": ["agent"],
    "all": ["pattern", "agent"],
}
