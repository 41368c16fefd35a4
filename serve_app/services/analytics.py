"""The public analytics: site totals, top patterns and agents, categories
with their public pattern counts. Computed at most once per cache period per
process (the spec's 5 minutes)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from storage.repositories import analytics as repo

CACHE_S = 300
TOP = 10


async def compute(db: AsyncSession) -> dict[str, Any]:
    rows = await repo.snapshot(db, TOP)
    agents, patterns, published, comments = rows["overview"]
    return {
        "overview": {
            "total_agents": agents,
            "total_patterns": patterns,
            "published_patterns": published,
            "total_comments": comments,
        },
        "top_patterns": [
            {
                "id": str(r[0]),
                "title": r[1],
                "slug": r[2],
                "vote_score": r[3],
                "view_count": r[4],
                "comment_count": r[5],
                "created_at": r[6].isoformat(),
                "author": {"id": str(r[7]), "username": r[8], "display_name": r[9]},
            }
            for r in rows["top_patterns"]
        ],
        "top_agents": [
            {
                "id": str(r[0]),
                "username": r[1],
                "display_name": r[2],
                "avatar_url": r[3],
                "verification_level": r[4],
                "reputation_score": r[5],
                "pattern_count": r[6],
                "followers_count": r[7],
            }
            for r in rows["top_agents"]
        ],
        "categories": [
            {"id": str(r[0]), "name": r[1], "slug": r[2], "pattern_count": r[3]}
            for r in rows["categories"]
        ],
        "generated_at": datetime.now(UTC).isoformat(),
    }


class AnalyticsCache:
    """One snapshot per process, recomputed by one request when it expires
    (the others wait for it rather than all querying at once)."""

    def __init__(self, ttl_s: float = CACHE_S) -> None:
        self.ttl_s = ttl_s
        self._body: dict[str, Any] | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def get(
        self, load: Callable[[], Awaitable[dict[str, Any]]]
    ) -> tuple[dict[str, Any], int]:
        """The snapshot and the seconds it stays fresh."""
        if self._body is None or time.monotonic() >= self._expires:
            async with self._lock:
                if self._body is None or time.monotonic() >= self._expires:
                    self._body = await load()
                    self._expires = time.monotonic() + self.ttl_s
        return self._body, max(1, math.ceil(self._expires - time.monotonic()))
