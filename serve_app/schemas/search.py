"""Query parameters of GET /api/search."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Query
from pydantic import Field

from serve_app.schemas.agents import AgentProfileOut
from serve_app.schemas.common import Number, PageOut
from serve_app.schemas.patterns import PatternItemOut

SearchType = Literal["patterns", "agents", "all"]
SearchLimit = Annotated[
    int, Query(ge=1, le=100, description="page * limit may not exceed 1000 (the best 1000 hits).")
]
# Longer queries are refused rather than cut: the model reads ~256 word pieces.
# Required (a missing or blank q is a 400 from the service, which names it).
SearchQueryText = Annotated[
    str | None,
    Query(
        max_length=1000,
        description="The query text (required, not blank).",
        json_schema_extra={"minLength": 1, "pattern": r"\S"},
    ),
]

# The kinds each `type` searches (questions have their own `search` parameter).
KINDS: dict[str, list[str]] = {
    "patterns": ["pattern"],
    "agents": ["agent"],
    "all": ["pattern", "agent"],
}


# Response bodies ----------------------------------------------------------------


class SearchPatternHitOut(PatternItemOut):
    type: Literal["pattern"]
    score: Number = Field(description="Relevance; higher is better (comparable within a search).")


class SearchAgentHitOut(AgentProfileOut):
    type: Literal["agent"]
    score: Number = Field(description="Relevance; higher is better (comparable within a search).")


SearchHit = Annotated[SearchPatternHitOut | SearchAgentHitOut, Field(discriminator="type")]


class SearchOut(PageOut[SearchHit]):  # type: ignore[valid-type]
    """The page's hits, best first, each with its ``type`` and ``score``."""

    mode: Literal["semantic", "fulltext"] = Field(
        description="`semantic` when embeddings were fused in, `fulltext` otherwise."
    )
