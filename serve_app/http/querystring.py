"""Refuse, before any route runs, a URL whose path or query parameters no
handler should see: control characters (a NUL reaching Postgres is an error
deep in a query, i.e. a 500), bytes that are not UTF-8, and parameters longer
than any route takes. Each is a 400 with the usual error body."""

from __future__ import annotations

import json
import re
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Receive, Scope, Send

from serve_app.kit.errors import error_body

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The longest value any query parameter takes is a search text of 200
# characters; 1,000 leaves room for what comes next without inviting abuse.
MAX_PARAM_CHARS = 1000
MAX_QUERY_BYTES = 8192


def problem(path: str, query: bytes) -> str | None:
    """Why this URL is refused, or None when it may go on."""
    if _CONTROL.search(path):
        return "The path contains a control character."
    if len(query) > MAX_QUERY_BYTES:
        return f"The query string exceeds {MAX_QUERY_BYTES} bytes."
    for pair in query.split(b"&"):
        if not pair:
            continue
        raw_name, _, raw_value = pair.partition(b"=")
        try:
            name = unquote_to_bytes(raw_name.replace(b"+", b" ")).decode("utf-8")
            value = unquote_to_bytes(raw_value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            return "The query string is not valid UTF-8."
        shown = name[:40] if not _CONTROL.search(name) else "a parameter name"
        if _CONTROL.search(name) or _CONTROL.search(value):
            return f"Query parameter '{shown}' contains a control character."
        if len(value) > MAX_PARAM_CHARS:
            return f"Query parameter '{shown}' exceeds {MAX_PARAM_CHARS} characters."
    return None


class QueryStringGuard:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            reason = problem(scope.get("path", ""), scope.get("query_string", b""))
            if reason is not None:
                payload = json.dumps(error_body("invalid_query", reason)).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": payload})
                return
        await self.app(scope, receive, send)
