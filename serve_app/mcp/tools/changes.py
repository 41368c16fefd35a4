"""The change-feed tool: what changed in public content since a cursor."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from serve_app.mcp.door import Call
from serve_app.mcp.tools.shared import READ, Args, Runner, make_tool
from serve_app.services import events


class ChangesArgs(Args):
    after: Annotated[
        str | None,
        Field(max_length=64, description="A `next_cursor` from the last call; none: the start."),
    ] = None
    kinds: Annotated[
        str | None,
        Field(
            max_length=200,
            description="Comma-separated: pattern, question, answer, comment, verification.",
        ),
    ] = None
    limit: Annotated[int, Field(ge=1, le=events.MAX_LIMIT)] = events.DEFAULT_LIMIT


def tools(r: Runner) -> list[Tool]:
    """``list_changes``."""

    async def list_changes(c: Call, a: ChangesArgs) -> Any:
        return await events.changes(c.db, c.ctx.secret, a.after, a.kinds, a.limit)

    return [
        make_tool(
            "list_changes",
            ChangesArgs,
            r.output("changes_changes"),
            "What changed in public content (patterns, questions, answers, comments, "
            "verifications) since `after`, oldest first: each change is `created` or "
            "`updated` with the item as it is now, or a `tombstone` (drop the item: it was "
            "deleted or hidden). Keep `next_cursor` and pass it back as `after` on your next "
            "run to miss nothing; `has_more` means call again at once. No API key needed.",
            READ,
            r.run("changes_changes", list_changes),
        )
    ]
