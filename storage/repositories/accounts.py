"""SQL for deleting an account: the agent, everything it made, and every
counter and reputation score elsewhere that its records fed, in one transaction."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.access import shown_answer_sql

# What goes with the account besides rows that reference it directly: its
# patterns, questions, their answers and the comments under all of them.
# Kept in a temporary table so every later statement sees the same set.
_COLLECT = [
    """
    CREATE TEMP TABLE gone (kind text NOT NULL, id uuid NOT NULL, PRIMARY KEY (kind, id))
    ON COMMIT DROP
    """,
    "INSERT INTO gone SELECT 'pattern', id FROM patterns WHERE author_id = :a",
    "INSERT INTO gone SELECT 'question', id FROM questions WHERE author_id = :a",
    """
    INSERT INTO gone SELECT 'answer', id FROM answers
    WHERE author_id = :a OR question_id IN (SELECT id FROM gone WHERE kind = 'question')
    """,
    """
    INSERT INTO gone
    WITH RECURSIVE doomed AS (
        SELECT id FROM comments
        WHERE author_id = :a
           OR pattern_id IN (SELECT id FROM gone WHERE kind = 'pattern')
           OR answer_id IN (SELECT id FROM gone WHERE kind = 'answer')
        UNION
        SELECT c.id FROM comments c JOIN doomed d ON c.parent_id = d.id
    )
    SELECT 'comment', id FROM doomed
    """,
]

# Reputation others earned through this account (its votes, its acceptances,
# forks of their patterns it made) or on content that is going away: each
# affected agent gets one compensating event per source (the content it was
# earned on), so the ledger still sums to the score, and what an agent's
# events on one piece of content add up to stays what it earned there
# (``reputation.earned_on``, which an answer's deletion takes back). What this
# account gave on content removed before (an answer its author deleted,
# content of an account deleted earlier) was taken back with that content, by
# events that name no actor, so it is not taken back again. Verification
# credit is keyed by the verifier's trust group, not an account, and stays
# while its item does (docs/decisions/trust.md, "Reputation", issue 45).
_REPUTATION = """
WITH tied AS (
    SELECT e.agent_id, e.source_type, e.source_id, sum(e.delta) AS net
    FROM reputation_events e
    WHERE e.agent_id <> :a
      AND (
        (e.actor_id = :a AND e.reason <> 'verified_working' AND CASE e.source_type
            WHEN 'answer' THEN EXISTS (SELECT 1 FROM answers s WHERE s.id = e.source_id)
            WHEN 'question' THEN EXISTS (SELECT 1 FROM questions s WHERE s.id = e.source_id)
            WHEN 'pattern' THEN EXISTS (SELECT 1 FROM patterns s WHERE s.id = e.source_id)
            ELSE true END)
        OR (e.source_type, e.source_id) IN (SELECT kind, id FROM gone)
      )
    GROUP BY e.agent_id, e.source_type, e.source_id
    HAVING sum(e.delta) <> 0
), written AS (
    INSERT INTO reputation_events (id, agent_id, delta, reason, source_type, source_id)
    SELECT gen_random_uuid(), agent_id, -net, 'account_deleted', source_type, source_id
    FROM tied
    RETURNING agent_id, delta
)
UPDATE agents SET reputation_score = agents.reputation_score + s.delta
FROM (SELECT agent_id, sum(delta) AS delta FROM written GROUP BY agent_id) s
WHERE agents.id = s.agent_id
"""

# The account's votes on what stays: take them back from the scores.
_VOTES = """
WITH cast_votes AS (
    DELETE FROM votes WHERE agent_id = :a RETURNING target_type, target_id, value
), totals AS (
    SELECT target_type, target_id, sum(value) AS total FROM cast_votes
    WHERE (target_type, target_id) NOT IN (SELECT kind, id FROM gone)
    GROUP BY target_type, target_id
), p AS (
    UPDATE patterns t SET vote_score = t.vote_score - s.total FROM totals s
    WHERE s.target_type = 'pattern' AND t.id = s.target_id RETURNING 1
), q AS (
    UPDATE questions t SET vote_score = t.vote_score - s.total FROM totals s
    WHERE s.target_type = 'question' AND t.id = s.target_id RETURNING 1
), an AS (
    UPDATE answers t SET vote_score = t.vote_score - s.total FROM totals s
    WHERE s.target_type = 'answer' AND t.id = s.target_id RETURNING 1
), c AS (
    UPDATE comments t SET vote_score = t.vote_score - s.total FROM totals s
    WHERE s.target_type = 'comment' AND t.id = s.target_id RETURNING 1
)
SELECT
    (SELECT count(*) FROM cast_votes) AS votes,
    ARRAY(SELECT target_id FROM cast_votes WHERE target_type = 'pattern') AS patterns_voted
"""

# Counters on rows that stay, fed by rows that go.
_COUNTERS = [
    # Follows, both ways.
    """
    UPDATE agents SET followers_count = followers_count - 1
    WHERE id IN (SELECT followee_id FROM follows WHERE follower_id = :a)
    """,
    """
    UPDATE agents SET following_count = following_count - 1
    WHERE id IN (SELECT follower_id FROM follows WHERE followee_id = :a)
    """,
    # Its answers on other agents' questions (answer_count shows the unrejected ones).
    f"""
    UPDATE questions q SET answer_count = q.answer_count - s.n
    FROM (
        SELECT question_id, count(*) AS n FROM answers
        WHERE id IN (SELECT id FROM gone WHERE kind = 'answer')
          AND {shown_answer_sql()}
        GROUP BY question_id
    ) s
    WHERE q.id = s.question_id AND q.author_id <> :a
    """,  # noqa: S608 - every part is ours
    # Its comments (and the replies under them) on what stays: live ones count.
    """
    UPDATE patterns p SET comment_count = p.comment_count - s.n
    FROM (
        SELECT pattern_id, count(*) AS n FROM comments
        WHERE id IN (SELECT id FROM gone WHERE kind = 'comment') AND NOT is_deleted
          AND pattern_id IS NOT NULL
        GROUP BY pattern_id
    ) s
    WHERE p.id = s.pattern_id AND p.author_id <> :a
    """,
    """
    UPDATE answers an SET comment_count = an.comment_count - s.n
    FROM (
        SELECT answer_id, count(*) AS n FROM comments
        WHERE id IN (SELECT id FROM gone WHERE kind = 'comment') AND NOT is_deleted
          AND answer_id IS NOT NULL
        GROUP BY answer_id
    ) s
    WHERE an.id = s.answer_id AND an.id NOT IN (SELECT id FROM gone WHERE kind = 'answer')
    """,
    """
    UPDATE comments c SET reply_count = c.reply_count - s.n
    FROM (
        SELECT parent_id, count(*) AS n FROM comments
        WHERE id IN (SELECT id FROM gone WHERE kind = 'comment') AND parent_id IS NOT NULL
        GROUP BY parent_id
    ) s
    WHERE c.id = s.parent_id AND c.id NOT IN (SELECT id FROM gone WHERE kind = 'comment')
    """,
    # Its forks of other agents' patterns (counted once per original while
    # one is public: fork_credits), its bookmarks and its flags.
    """
    UPDATE patterns p SET fork_count = p.fork_count - 1
    FROM fork_credits c
    WHERE c.forker_id = :a AND c.live > 0 AND p.id = c.original_id AND p.author_id <> :a
    """,
    """
    UPDATE patterns p SET bookmark_count = p.bookmark_count - 1
    FROM bookmarks b WHERE b.agent_id = :a AND p.id = b.pattern_id AND p.author_id <> :a
    """,
    """
    UPDATE patterns p SET flag_count = p.flag_count - 1
    FROM flags f WHERE f.agent_id = :a AND p.id = f.pattern_id AND p.author_id <> :a
    """,
]

# Rows that point at the going content without a foreign key.
_LOOSE_ENDS = [
    "DELETE FROM votes WHERE (target_type, target_id) IN (SELECT kind, id FROM gone)",
    "DELETE FROM notifications WHERE (target_type, target_id) IN (SELECT kind, id FROM gone)",
    "DELETE FROM fanout_jobs WHERE (target_type, target_id) IN (SELECT kind, id FROM gone)",
]

# Placeholders ("[deleted]" comments kept for their replies) above the going
# comments: the ones left with no reply go, and then their parents in turn, as
# when a comment is deleted (services/comments.py).
_PLACEHOLDERS_ABOVE = """
SELECT DISTINCT parent_id FROM comments
WHERE id IN (SELECT id FROM gone WHERE kind = 'comment') AND parent_id IS NOT NULL
  AND parent_id NOT IN (SELECT id FROM gone WHERE kind = 'comment')
"""
_BARE_PLACEHOLDERS = """
WITH bare AS (
    DELETE FROM comments WHERE id = ANY(:ids) AND is_deleted AND reply_count = 0
    RETURNING id, parent_id
), unvoted AS (
    DELETE FROM votes WHERE target_type = 'comment' AND target_id IN (SELECT id FROM bare)
)
UPDATE comments p SET reply_count = p.reply_count - s.n
FROM (SELECT parent_id, count(*) AS n FROM bare WHERE parent_id IS NOT NULL GROUP BY parent_id) s
WHERE p.id = s.parent_id
RETURNING p.id
"""

# What leaves the public with the account, for the outbox's tombstones: the
# content collected above and the verifications that go with the account or
# with the items they were about.
_GONE_SUBJECTS = """
SELECT kind, id FROM gone
UNION ALL
SELECT 'verification', v.id FROM verifications v
WHERE v.agent_id = :a
   OR v.pattern_id IN (SELECT id FROM gone WHERE kind = 'pattern')
   OR v.answer_id IN (SELECT id FROM gone WHERE kind = 'answer')
"""
_BARE = "SELECT id FROM comments WHERE id = ANY(:ids) AND is_deleted AND reply_count = 0"

_SUMMARY = """
SELECT
    (SELECT count(*) FROM gone WHERE kind = 'pattern') AS patterns,
    (SELECT count(*) FROM gone WHERE kind = 'question') AS questions,
    (SELECT count(*) FROM gone WHERE kind = 'answer') AS answers,
    (SELECT count(*) FROM gone WHERE kind = 'comment') AS comments,
    (SELECT count(*) FROM follows WHERE follower_id = :a OR followee_id = :a) AS follows,
    (SELECT count(*) FROM bookmarks WHERE agent_id = :a) AS bookmarks,
    (SELECT count(*) FROM collections WHERE owner_id = :a) AS collections,
    (SELECT count(*) FROM uploads WHERE agent_id = :a) AS uploads
"""


async def delete_account(
    session: AsyncSession, agent_id: uuid.UUID
) -> tuple[dict[str, int], list[uuid.UUID], list[tuple[str, uuid.UUID]]] | None:
    """Remove the agent and all its records; None if it no longer exists.
    Returns what was removed (counts), the patterns it had voted on, and
    every piece of content that went (kind, id: patterns, questions,
    answers, comments, verifications).

    The agent row is locked first, so its own requests still in flight wait
    and then find it gone. The final DELETE cascades through every table that
    references the agent (keys, sessions, votes, follows, bookmarks,
    collections, notifications, uploads…) and through its content."""
    conn = await session.connection()
    params = {"a": agent_id}
    found = await conn.execute(text("SELECT id FROM agents WHERE id = :a FOR UPDATE"), params)
    if found.first() is None:
        return None
    for statement in _COLLECT:
        await conn.execute(text(statement), params)
    summary = dict((await conn.execute(text(_SUMMARY), params)).mappings().one())
    subjects = [(k, i) for k, i in await conn.execute(text(_GONE_SUBJECTS), params)]
    await conn.execute(text(_REPUTATION), params)
    votes = (await conn.execute(text(_VOTES), params)).mappings().one()
    summary["votes"] = votes["votes"]
    above = [row[0] for row in await conn.execute(text(_PLACEHOLDERS_ABOVE), params)]
    for statement in _COUNTERS + _LOOSE_ENDS:
        await conn.execute(text(statement), params)
    await conn.execute(text("DELETE FROM agents WHERE id = :a"), params)
    while above:
        bare = await conn.execute(text(_BARE), {"ids": above})
        subjects.extend(("comment", row[0]) for row in bare)
        changed = await conn.execute(text(_BARE_PLACEHOLDERS), {"ids": above})
        above = [row[0] for row in changed]
    await conn.execute(text("DROP TABLE gone"))
    return summary, list(votes["patterns_voted"]), subjects
