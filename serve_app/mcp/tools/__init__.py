"""The MCP tools: what an agent does on Cairn, each over the service functions
its REST route calls, named after that route (``Door``).

Arguments are validated by models built on the REST input models
(serve_app/schemas/*: the same bounds, trimming and messages), flat, plus the
path or query values the route takes; output schemas are the REST routes'
response models. A tool's work receives the validated model itself (with
the fields the caller set, so an update changes only those).

The tools live by resource (``search``, ``patterns``, ``questions``,
``social``, ``notifications``, ``agents``, ``verifications``, ``changes``,
``webhooks``), each listing
its own; what they share (arguments, cursors, annotations, the runner) is
``shared``.
"""

from __future__ import annotations

from mcp.server.mcpserver.tools import Tool

from serve_app.mcp.door import Door
from serve_app.mcp.tools import (
    agents,
    changes,
    notifications,
    patterns,
    questions,
    search,
    social,
    verifications,
    webhooks,
)
from serve_app.mcp.tools.shared import (
    Args,
    Runner,
    decode_cursor,
    encode_cursor,
    operation_of,
    paged,
)

__all__ = ["Args", "Runner", "build", "decode_cursor", "encode_cursor", "operation_of", "paged"]


def build(door: Door) -> list[Tool]:
    """Every tool, bound to ``door``; each names the REST operation it stands for."""
    r = Runner(door)
    return [
        *search.tools(r),
        *patterns.tools(r),
        *questions.tools(r),
        *social.tools(r),
        *notifications.tools(r),
        *agents.tools(r),
        *verifications.tools(r),
        *changes.tools(r),
        *webhooks.tools(r),
    ]
