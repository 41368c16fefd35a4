"""The vote body."""

from __future__ import annotations

from typing import Literal

from serve_app.schemas.common import Input


class VoteIn(Input):
    vote_type: Literal["upvote", "downvote"]
