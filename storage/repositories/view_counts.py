"""SQL for view counts: one more view of a pattern or a question, and the sums.

The counts live in sharded counter tables (storage/models/views.py), never on
the pattern or question row that votes lock.
"""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models.views import VIEW_SHARDS

# kind -> (counter table, key column); ours, never input.
_COUNTERS = {
    "pattern": ("pattern_views", "pattern_id"),
    "question": ("question_views", "question_id"),
}


async def count_view(session: AsyncSession, kind: str, item_id: uuid.UUID) -> int:
    """Add one view to the item (``kind`` pattern or question) and return its
    total, this view included, in one round trip.

    The shard is the connection's: two transactions that count at the same
    time run on two connections and so mostly on two rows; the row lock the
    upsert takes is held only until the request commits, and no vote waits on
    it."""
    table, key = _COUNTERS[kind]
    row = await session.exec(  # type: ignore[call-overload]
        text(
            f"WITH bump AS (INSERT INTO {table} ({key}, shard, views) "  # noqa: S608 - names are ours
            f"VALUES (:id, pg_backend_pid() % :shards, 1) "
            f"ON CONFLICT ({key}, shard) DO UPDATE SET views = {table}.views + 1 "
            f"RETURNING shard, views) "
            f"SELECT bump.views + coalesce((SELECT sum(v.views) FROM {table} v "
            f"WHERE v.{key} = :id AND v.shard <> bump.shard), 0) FROM bump"
        ).bindparams(id=item_id, shards=VIEW_SHARDS)
    )
    return int(row.one()[0])
