"""The error answers of the layers in front of the app, in the app's shape.

Every answer that leaves Cairn with a 4xx or 5xx is ``{"error": ..., "message":
...}`` (serve_app/kit/errors.py for the app's own). Two layers answer without the
app:

* HAProxy (Serve's ingress): its error pages, set by ``cairn-haproxy``
  (serve_app/launch/haproxy_shim.py) from ``EDGE_ERRORS``;
* Ray Serve's own HTTP servers, the proxy actor and each Api replica's direct
  ingress server: a request timeout, backpressure, a path outside the route
  prefix, a replica that died, in plain text. ``JsonServeErrors`` rewrites
  those; Serve installs it through ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``
  (serve_app/launch/bootstrap.py, ``ray_env``).

docs/decisions/uploads-and-exposure.md, "Security: edge error answers and
markdown resources (issue 30)", says what is covered and what HAProxy 2.8
cannot be made to answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.middleware import Middleware
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("cairn.edge")

# HAProxy answers URIs longer than this with 414 itself, before any replica
# (8 KiB, the common limit of web servers). It can only see a request whose
# head fits in its buffer: tune.bufsize (RAY_SERVE_HAPROXY_TUNE_BUFSIZE, which
# bootstrap.ray_env raises to EDGE_BUFFER_BYTES).
MAX_URI_BYTES = 8192
EDGE_BUFFER_BYTES = 131072

_RETRY = "retry (with the same Idempotency-Key, where the operation takes one)"

# status -> (error, message). Messages carry no single quote: HAProxy takes
# them inside a single-quoted string.
EDGE_ERRORS: dict[int, tuple[str, str]] = {
    400: ("bad_request", "The request is not valid HTTP."),
    401: ("unauthorized", "Authentication is required."),
    403: ("forbidden", "The request was refused."),
    404: ("not_found", "Nothing is served at this path."),
    405: ("method_not_allowed", "This method is not allowed here."),
    407: ("proxy_authentication_required", "Proxy authentication is required."),
    408: ("request_timeout", "The request was not received or answered in time."),
    410: ("gone", "This resource is gone."),
    413: ("payload_too_large", "The request is too large."),
    414: ("uri_too_long", f"The request URI is longer than {MAX_URI_BYTES} bytes."),
    421: ("misdirected_request", "This server does not answer for that host."),
    422: ("unprocessable_content", "The request could not be processed."),
    425: ("too_early", "The request was sent too early; retry it."),
    429: ("rate_limited", "Too many requests; retry later."),
    499: ("client_closed_request", "The client closed the connection before the answer."),
    500: ("internal_error", "An unexpected error occurred."),
    501: ("not_implemented", "The server does not support this request."),
    502: ("bad_gateway", f"The server handling this request stopped before it answered; {_RETRY}."),
    503: (
        "service_unavailable",
        "No server can take this request just now; retry in a few seconds.",
    ),
    504: ("gateway_timeout", f"The server did not answer in time; {_RETRY}."),
}

# The statuses HAProxy 2.8 answers with its own page and lets a config replace
# (`http-error status N` refuses any other; 200 is not an error).
HAPROXY_ERROR_STATUSES = (
    400, 401, 403, 404, 405, 407, 408, 410, 413, 421, 422, 425, 429, 500, 501, 502, 503, 504,
)  # fmt: skip


def error_for(status: int) -> tuple[str, str]:
    """(error, message) for ``status``, a generic pair for one not listed."""
    if status in EDGE_ERRORS:
        return EDGE_ERRORS[status]
    return ("http_error", "The request failed.") if status < 500 else EDGE_ERRORS[500]


def error_body(status: int, message: str | None = None) -> bytes:
    """The JSON body of an error answer with ``status``; ``message`` replaces
    the standard one."""
    error, standard = error_for(status)
    body = {"error": error, "message": message or standard}
    return json.dumps(body, separators=(",", ":")).encode()


# Serve's own answers are plain text (serve/_private/http_util.py,
# convert_object_to_asgi_messages); the app's are JSON or, for pages, HTML.
_PLAIN = b"text/plain"
_MESSAGE_MAX = 300


class JsonServeErrors:
    """ASGI middleware for Serve's HTTP servers: a plain-text error answer
    becomes the JSON error shape (same status and headers, Serve's text as the
    message); a request that ends, or fails, before any answer gets a JSON 500
    instead of uvicorn's plain-text one. Every other answer passes untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        held: Message | None = None  # a plain-text error's start, until its body ends
        chunks: list[bytes] = []

        async def relay(message: Message) -> None:
            nonlocal started, held
            if held is not None:
                if message["type"] == "http.response.body":
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        start, held = held, None
                        await _answer(send, start["status"], _text(chunks), start["headers"])
                return
            if message["type"] == "http.response.start":
                started = True
                if message["status"] >= 400 and _plain_text(message.get("headers") or ()):
                    held = message
                    return
            await send(message)

        try:
            await self.app(scope, receive, relay)
        except Exception:
            if started and held is None:
                raise  # the answer is on its way: nothing else can be sent
            log.exception("request failed before an answer: %s", scope.get("path", "")[:200])
            status = held["status"] if held is not None else 500
            await _answer(send, status, None, held["headers"] if held is not None else ())
            return
        if held is not None:  # a plain-text error whose body never ended
            await _answer(send, held["status"], _text(chunks), held["headers"])
        elif not started:
            await _answer(send, 500, "The server failed before it answered this request.", ())


def _plain_text(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(_PLAIN) for k, v in headers)


def _text(chunks: list[bytes]) -> str | None:
    text = b"".join(chunks).decode("utf-8", "replace").strip()
    return text[:_MESSAGE_MAX] or None


async def _answer(
    send: Send, status: int, message: str | None, headers: Iterable[tuple[bytes, bytes]]
) -> None:
    body = error_body(status, message)
    kept = [(k, v) for k, v in headers if k.lower() not in (b"content-type", b"content-length")]
    kept += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": kept})
    await send({"type": "http.response.body", "body": body})


def serve_http_middlewares() -> list[Middleware]:
    """What ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` names: Serve calls it
    in its proxy actor and in each replica's direct ingress server, and wraps
    their ASGI apps in the middlewares it returns."""
    from starlette.middleware import Middleware

    return [Middleware(JsonServeErrors)]


CALLBACK_IMPORT_PATH = f"{__name__}:{serve_http_middlewares.__name__}"
