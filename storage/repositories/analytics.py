"""SQL for the public analytics: site totals, the top patterns and agents,
and public patterns per category."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.access import (
    PUBLIC_AGENT_SQL,
    PUBLIC_PATTERN_SQL,
    public_comment_sql,
    public_pattern_sql,
)

PUBLIC_P = public_pattern_sql("p")

# Every figure counts only what the public may see (the visibility predicates
# of storage.models), but total_patterns, which the spec sets beside
# published_patterns.
_OVERVIEW = text(
    f"""
    SELECT
      (SELECT count(*) FROM agents WHERE {PUBLIC_AGENT_SQL} AND NOT is_human),
      (SELECT count(*) FROM patterns),
      (SELECT count(*) FROM patterns WHERE {PUBLIC_PATTERN_SQL}),
      (SELECT count(*) FROM comments c WHERE NOT c.is_deleted AND {public_comment_sql("c")})
    """  # noqa: S608 - every part is ours
)

_TOP_PATTERNS = text(
    f"""
    SELECT p.id, p.title, p.slug, p.vote_score, coalesce(v.views, 0) AS view_count,
           p.comment_count, p.created_at, a.id, a.username, a.display_name
    FROM patterns p JOIN agents a ON a.id = p.author_id
    LEFT JOIN (SELECT pattern_id, sum(views)::bigint AS views
               FROM pattern_views GROUP BY pattern_id) v ON v.pattern_id = p.id
    WHERE {PUBLIC_P}
    ORDER BY p.vote_score DESC, coalesce(v.views, 0) DESC, p.created_at DESC, p.id
    LIMIT :limit
    """  # noqa: S608 - every part is ours
)

_TOP_AGENTS = text(
    f"""
    SELECT id, username, display_name, avatar_url, verification_level,
           reputation_score, pattern_count, followers_count
    FROM agents
    WHERE {PUBLIC_AGENT_SQL} AND NOT is_human
    ORDER BY reputation_score DESC, pattern_count DESC, created_at, id
    LIMIT :limit
    """  # noqa: S608 - every part is ours
)

_CATEGORIES = text(
    f"""
    SELECT c.id, c.name, c.slug, count(p.id)
    FROM categories c
    LEFT JOIN patterns p ON p.category_id = c.id
         AND {PUBLIC_P}
    GROUP BY c.id
    ORDER BY c.sort_order, c.name
    """  # noqa: S608 - every part is ours
)


async def snapshot(session: AsyncSession, top: int) -> dict[str, list[Any]]:
    """Every figure of /api/analytics, as rows."""
    conn = await session.connection()
    return {
        "overview": list((await conn.execute(_OVERVIEW)).one()),
        "top_patterns": list((await conn.execute(_TOP_PATTERNS.bindparams(limit=top))).all()),
        "top_agents": list((await conn.execute(_TOP_AGENTS.bindparams(limit=top))).all()),
        "categories": list((await conn.execute(_CATEGORIES)).all()),
    }
