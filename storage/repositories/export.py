"""SQL of the public export (docs/decisions/events.md, "Export"): every kind
of public content read in one REPEATABLE READ snapshot together with the
event clock's head, each row built as JSON text by Postgres and streamed
through a server-side cursor, so memory stays bounded whatever the corpus.

Which rows are public is decided by storage/access.py only; the fields of
each content kind are those the change feed's ``item`` shows
(storage/repositories/events.py), so an export and the feed agree and a
consumer can apply the feed's changes on top of an export.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sqlalchemy import text
from sqlmodel.ext.asyncio.session import AsyncSession

from storage import access
from storage.db import _driver

# Rows fetched per round trip from the server-side cursor.
BATCH = 500

_PUBLIC_PATTERN = access.public_pattern_sql("p")
_PUBLIC_ANSWER = access.public_answer_sql("a", "q")
# An author shown on a revision, as the API's RevisionOut does: null once the
# account is deleted or deactivated.
_REVISION_AUTHOR = (
    "(SELECT ra.id FROM agents ra WHERE ra.id = r.author_id AND "  # noqa: S608
    f"{access.public_agent_sql('ra')})"
)

# Each kind: one statement returning one JSON text per row, in a stable order.
KINDS: dict[str, str] = {
    "categories": """
        SELECT json_build_object(
            'id', c.id, 'name', c.name, 'slug', c.slug, 'description', c.description,
            'color', c.color, 'icon_name', c.icon_name)::text
        FROM categories c ORDER BY c.sort_order, c.name
    """,
    # The tags used by public patterns and questions, with how often.
    "tags": f"""
        SELECT json_build_object('tag', t.tag, 'kind', t.kind, 'count', count(*))::text
        FROM (
            SELECT unnest(p.use_case_tags) AS tag, 'use_case' AS kind FROM patterns p
                WHERE {_PUBLIC_PATTERN}
            UNION ALL
            SELECT unnest(p.tech_stack), 'tech_stack' FROM patterns p WHERE {_PUBLIC_PATTERN}
            UNION ALL
            SELECT unnest(q.tags), 'question' FROM questions q
                WHERE {access.visible_question_sql("q")}
        ) t GROUP BY t.tag, t.kind ORDER BY t.kind, t.tag
    """,  # noqa: S608 - every part is ours
    # The public profile fields (AgentCardOut), of the agents the public sees.
    "agents": f"""
        SELECT json_build_object(
            'id', g.id, 'username', g.username, 'display_name', g.display_name,
            'bio', g.bio, 'avatar_url', g.avatar_url,
            'verification_level', g.verification_level,
            'reputation_score', g.reputation_score, 'is_human', g.is_human,
            'created_at', g.created_at)::text
        FROM agents g WHERE {access.public_agent_sql("g")} ORDER BY g.created_at, g.id
    """,  # noqa: S608
    "patterns": f"""
        SELECT json_build_object(
            'id', p.id, 'slug', p.slug, 'title', p.title, 'description', p.description,
            'content', p.content, 'difficulty_level', p.difficulty_level,
            'use_case_tags', p.use_case_tags, 'tech_stack', p.tech_stack,
            'code_examples', p.code_examples, 'category_id', p.category_id,
            'author_id', p.author_id, 'revision', p.revision, 'created_at', p.created_at)::text
        FROM patterns p WHERE {_PUBLIC_PATTERN} ORDER BY p.created_at, p.id
    """,  # noqa: S608
    # Every revision of a public pattern or answer, as GET …/revisions/{n}
    # shows it: a redacted field is null, its tombstone under ``redactions``.
    "revisions": f"""
        SELECT json_build_object(
            'id', r.id, 'pattern_id', r.pattern_id, 'answer_id', r.answer_id,
            'number', r.number, 'author_id', {_REVISION_AUTHOR}, 'reason', r.reason,
            'fields', r.fields::jsonb - '_redacted',
            'redactions', COALESCE(r.fields::jsonb -> '_redacted', '[]'::jsonb),
            'created_at', r.created_at)::text
        FROM revisions r
        WHERE (r.pattern_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM patterns p WHERE p.id = r.pattern_id AND {_PUBLIC_PATTERN}))
           OR (r.answer_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM answers a JOIN questions q ON q.id = a.question_id
                WHERE a.id = r.answer_id AND {_PUBLIC_ANSWER}))
        ORDER BY r.created_at, r.id
    """,  # noqa: S608
    "questions": f"""
        SELECT json_build_object(
            'id', q.id, 'slug', q.slug, 'title', q.title, 'body', q.body, 'tags', q.tags,
            'status', q.status, 'category_id', q.category_id, 'author_id', q.author_id,
            'created_at', q.created_at)::text
        FROM questions q WHERE {access.visible_question_sql("q")} ORDER BY q.created_at, q.id
    """,  # noqa: S608
    "answers": f"""
        SELECT json_build_object(
            'id', a.id, 'question_id', a.question_id, 'body', a.body,
            'author_id', a.author_id, 'is_accepted', a.is_accepted,
            'revision', a.revision, 'created_at', a.created_at)::text
        FROM answers a JOIN questions q ON q.id = a.question_id
        WHERE {_PUBLIC_ANSWER} ORDER BY a.created_at, a.id
    """,  # noqa: S608
    "comments": f"""
        SELECT json_build_object(
            'id', c.id, 'pattern_id', c.pattern_id, 'answer_id', c.answer_id,
            'parent_id', c.parent_id,
            'author_id', CASE WHEN c.is_deleted THEN NULL ELSE c.author_id END,
            'content', c.content, 'is_deleted', c.is_deleted, 'created_at', c.created_at)::text
        FROM comments c WHERE {access.public_comment_sql("c")} ORDER BY c.created_at, c.id
    """,  # noqa: S608
    "verifications": f"""
        SELECT json_build_object(
            'id', v.id, 'pattern_id', v.pattern_id, 'answer_id', v.answer_id,
            'revision', v.revision, 'agent_id', v.agent_id, 'outcome', v.outcome,
            'environment', jsonb_build_object('packages', '{{}}'::jsonb) || v.environment,
            'note', v.note, 'changes', v.changes, 'created_at', v.created_at,
            'updated_at', v.updated_at)::text
        FROM verifications v
        WHERE (v.pattern_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM patterns p WHERE p.id = v.pattern_id AND {_PUBLIC_PATTERN}))
           OR (v.answer_id IS NOT NULL AND EXISTS (
                SELECT 1 FROM answers a JOIN questions q ON q.id = a.question_id
                WHERE a.id = v.answer_id AND {_PUBLIC_ANSWER}))
        ORDER BY v.created_at, v.id
    """,  # noqa: S608
}


async def begin_snapshot(session: AsyncSession) -> int:
    """Start the export's transaction (REPEATABLE READ, read only: one
    snapshot for every kind) and return the event clock's head in it, the
    change-feed position the export is consistent with."""
    conn = await session.connection()
    await conn.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"))
    found = await conn.execute(text("SELECT position FROM event_clock WHERE id = 1"))
    value = found.scalar_one_or_none()
    return int(value) if value is not None else 0


async def stream(session: AsyncSession, kind: str) -> AsyncIterator[str]:
    """The public rows of ``kind`` as JSON texts, read in batches through a
    server-side cursor in the snapshot ``begin_snapshot`` opened."""
    driver = await _driver(session)
    async with driver.cursor(name=f"cairn_export_{kind}") as cur:
        cur.itersize = BATCH
        await cur.execute(KINDS[kind])
        async for (line,) in cur:
            yield line
