"""The vote body and the answer of a vote."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.schemas.common import Input, Output


class VoteIn(Input):
    vote_type: Literal["upvote", "downvote"]


class VoteTallyOut(Output):
    """The caller's vote after a vote or its removal, and the target's score."""

    vote_type: Literal["upvote", "downvote"] | None = Field(
        description="Your vote now; null once removed (or when there was none)."
    )
    vote_score: int = Field(description="The target's upvotes minus downvotes.")
