"""The parameters and answers of GET /api/search (and the MCP search tool)."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import Query
from pydantic import BaseModel, Field

from serve_app.schemas.agents import AgentProfileOut
from serve_app.schemas.common import Number, Output, Page, PageOut
from serve_app.schemas.patterns import Difficulty, PatternItemOut

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


class SearchParams(BaseModel):
    """The search's parameters, one model for both doors: REST reads it from
    the query string, the MCP tool from its arguments (where ``q`` is also
    declared required in the tool's schema)."""

    q: SearchQueryText = None
    type: SearchType = Field(default="patterns", description="What to search.")
    limit: SearchLimit = 20
    page: Page = 1
    use_semantic: bool = Field(
        default=True,
        description="Rank by meaning and words (true) or by words only (false).",
    )
    exclude_labelled: bool = Field(
        default=False,
        description="Leave out patterns whose code carries safety labels (risky code: "
        "`safety.labels`); filtered before ranking pages, so pages stay full.",
    )
    # The filters of GET /api/patterns, under its names (issue 47: the search
    # page's filters run through this search). Agents have none of these
    # fields: with a filter set, only patterns are found.
    category_id: uuid.UUID | None = Field(
        default=None, description="Only patterns in this category (agents never match)."
    )
    difficulty_level: Difficulty | None = Field(
        default=None, description="Only patterns of this difficulty (agents never match)."
    )
    tech_stack: str | None = Field(
        default=None,
        max_length=500,
        description="Comma-separated technologies; only patterns that list them all "
        "(agents never match).",
    )


# The kinds each `type` searches (questions have their own `search` parameter).
KINDS: dict[str, list[str]] = {
    "patterns": ["pattern"],
    "agents": ["agent"],
    "all": ["pattern", "agent"],
}


# Response bodies ----------------------------------------------------------------


class SearchComponentsOut(Output):
    """Why a hit ranked: the two halves of the hybrid ranking, and the trust
    prior applied after them."""

    lexical: Number | None = Field(
        description="BM25 score of the query's words in the hit's fields (null: not among "
        "the lexical candidates)."
    )
    vector: Number | None = Field(
        description="Cosine similarity of the query's and the hit's embeddings (null: not "
        "among the vector candidates, or full-text mode)."
    )
    trust: Number | None = Field(
        description="The hit's trust score (0-1), applied after fusion as a bounded prior: "
        "score + |score| * 0.15 * trust (docs/decisions/trust.md). Null for agents."
    )


_SCORE = "Relevance; higher is better (comparable within a search)."
_COMPONENTS = "The lexical and vector scores the hit's score was fused from."


class SearchPatternHitOut(PatternItemOut):
    type: Literal["pattern"]
    score: Number = Field(description=_SCORE)
    components: SearchComponentsOut = Field(description=_COMPONENTS)


class SearchAgentHitOut(AgentProfileOut):
    type: Literal["agent"]
    score: Number = Field(description=_SCORE)
    components: SearchComponentsOut = Field(description=_COMPONENTS)


SearchHit = Annotated[SearchPatternHitOut | SearchAgentHitOut, Field(discriminator="type")]


class SearchOut(PageOut[SearchHit]):  # type: ignore[valid-type]
    """The page's hits, best first, each with its ``type`` and ``score``."""

    mode: Literal["semantic", "fulltext"] = Field(
        description="`semantic` when embeddings were fused in, `fulltext` otherwise."
    )
