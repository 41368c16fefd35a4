"""Request bodies over the limit are refused (413) without being read into
memory; also stamps each request's start time (for /api/health's
response_time_ms)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serve_app.kit.errors import PayloadTooLarge, error_body


class BodyLimitMiddleware:
    """Refuse bodies over ``max_bytes`` (413) without reading them into memory;
    also stamps the request start time for /api/health's response_time_ms.
    ``allowances`` gives single (method, path) pairs a limit of their own."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        allowances: Mapping[tuple[str, str], int] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.allowances = dict(allowances or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope["cairn.start"] = time.perf_counter()
        limit = self.max_bytes
        if self.allowances:
            path, root = scope.get("path", ""), scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            limit = self.allowances.get((scope.get("method", ""), path), limit)
        declared = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                break
        if declared is not None and (declared < 0 or declared > limit):
            status, body = (
                (400, error_body("bad_request", "Invalid Content-Length header."))
                if declared < 0
                else (
                    413,
                    error_body("payload_too_large", f"Request body exceeds {limit} bytes."),
                )
            )
            payload = json.dumps(body).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(payload)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return

        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise PayloadTooLarge(f"Request body exceeds {limit} bytes.")
            return message

        await self.app(scope, limited_receive, send)
