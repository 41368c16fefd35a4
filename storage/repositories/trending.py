"""SQL for trending: the standing pattern votes a TrendingCounter is rebuilt from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

from storage.db import libpq_url

_RECENT_VOTES = """
    SELECT target_id::text, agent_id::text, value, extract(epoch FROM updated_at)::float8
    FROM votes
    WHERE target_type = 'pattern' AND updated_at > now() - make_interval(days => %s)
"""


def recent_pattern_votes(database_url: str, days: int) -> Iterator[tuple[Any, ...]]:
    """Stream (pattern_id, voter_id, value, epoch seconds) of votes cast or
    changed in the last ``days`` days (a server-side cursor: any size)."""
    with (
        psycopg.connect(libpq_url(database_url)) as conn,
        conn.cursor(name="cairn_trending_rebuild") as cur,
    ):
        cur.itersize = 10_000
        cur.execute(_RECENT_VOTES, (days,))
        yield from cur
