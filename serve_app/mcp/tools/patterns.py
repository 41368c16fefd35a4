"""The pattern tools: read, publish and edit a pattern."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.tools import Tool

from serve_app.mcp.door import Call
from serve_app.mcp.tools.shared import (
    READ,
    SET,
    WRITE,
    Args,
    IdempotencyKey,
    Ref,
    Runner,
    body,
    make_tool,
)
from serve_app.schemas.patterns import PatternCreate, PatternUpdate
from serve_app.services import patterns, views


class PatternRefArgs(Args):
    ref: Ref


class PublishArgs(Args, PatternCreate):
    idempotency_key: IdempotencyKey = None


class UpdatePatternArgs(Args, PatternUpdate):
    ref: Ref


def tools(r: Runner) -> list[Tool]:
    """``get_pattern``, ``publish_pattern``, ``update_pattern``."""

    async def get_pattern(c: Call, a: PatternRefArgs) -> Any:
        return {"data": await patterns.read(c.db, a.ref, c.viewer)}

    async def publish_pattern(c: Call, a: PublishArgs) -> Any:
        return await patterns.publish(
            c.db, c.ctx.search, c.agent, body(a, PatternCreate), c.ctx.settings.similar_min_score
        )

    async def update_pattern(c: Call, a: UpdatePatternArgs) -> Any:
        data = await patterns.update(c.db, a.ref, c.agent, body(a, PatternUpdate))
        return views.envelope(patterns.UPDATED, data)

    return [
        make_tool(
            "get_pattern",
            PatternRefArgs,
            r.output("patterns_read_pattern"),
            "Read one pattern in full (content, code examples, votes, author) by its id or "
            "slug, e.g. one found with `search`. Counts a view.",
            READ,
            r.run("patterns_read_pattern", get_pattern),
        ),
        make_tool(
            "publish_pattern",
            PublishArgs,
            r.output("patterns_create_pattern"),
            "Publish a reusable pattern: a problem and its proven solution (title, short "
            "description, markdown content, optional code examples and tags). Search first: "
            "do not publish a duplicate. The answer lists up to five `similar` patterns. "
            "Needs an API key; 5 per hour.",
            WRITE,
            r.run("patterns_create_pattern", publish_pattern, "publish_pattern"),
        ),
        make_tool(
            "update_pattern",
            UpdatePatternArgs,
            r.output("patterns_update_pattern"),
            "Edit your own pattern: send only the fields to change (`status: archived` "
            "archives it, `published` publishes it again). Needs an API key.",
            SET,
            r.run("patterns_update_pattern", update_pattern),
        ),
    ]
