"""JsonServeErrors: Serve's plain-text error answers in the JSON error shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ray._common.utils import import_attr
from ray.serve._private.http_util import (
    convert_object_to_asgi_messages,
    retry_after_headers,
    validate_http_proxy_callback_return,
)

from serve_app.launch.edge_errors import (
    CALLBACK_IMPORT_PATH,
    EDGE_ERRORS,
    HAPROXY_ERROR_STATUSES,
    JsonServeErrors,
    error_body,
)

HTTP = {"type": "http", "path": "/x", "method": "GET"}


async def run(app: Any, scope: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    await JsonServeErrors(app)(scope or HTTP, receive, send)
    return sent


def answer(sent: list[dict[str, Any]]) -> tuple[int, dict[bytes, bytes], Any]:
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    headers = dict(sent[0]["headers"])
    body = sent[1]["body"]
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"content-length"] == str(len(body)).encode()
    return sent[0]["status"], headers, json.loads(body)


async def test_backpressure_keeps_its_status_and_retry_after() -> None:
    async def replica(scope: Any, receive: Any, send: Any) -> None:
        for message in convert_object_to_asgi_messages(
            "Request dropped due to backpressure",
            status_code=503,
            extra_headers=[*(retry_after_headers(2.5) or []), (b"x-request-id", b"r1")],
        ):
            await send(message)

    status, headers, body = answer(await run(replica))
    assert status == 503 and headers[b"retry-after"] == b"3" and headers[b"x-request-id"] == b"r1"
    assert body == {
        "error": "service_unavailable",
        "message": "Request dropped due to backpressure",
    }


async def test_a_body_in_pieces_is_one_message() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/plain")]
        await send({"type": "http.response.start", "status": 408, "headers": headers})
        await send({"type": "http.response.body", "body": b"Request timed ", "more_body": True})
        await send({"type": "http.response.body", "body": b"out."})

    assert answer(await run(app))[2] == {
        "error": "request_timeout",
        "message": "Request timed out.",
    }


async def test_a_failure_before_any_answer_is_a_json_500() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("replica gone")

    status, _, body = answer(await run(app))
    assert status == 500 and body["error"] == "internal_error"


async def test_a_failure_after_the_answer_began_is_left_to_the_server() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("mid-stream")

    with pytest.raises(RuntimeError):
        await run(app)


async def test_successes_and_websockets_pass_untouched() -> None:
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/plain")],
    }
    body = {"type": "http.response.body", "body": b"success"}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(start)
        await send(body)

    assert await run(app) == [start, body]
    assert await run(app, {"type": "websocket", "path": "/ws"}) == [start, body]


def test_the_callback_is_what_serve_accepts() -> None:
    middlewares = validate_http_proxy_callback_return(import_attr(CALLBACK_IMPORT_PATH)())
    assert [m.cls for m in middlewares] == [JsonServeErrors]


def test_the_vocabulary() -> None:
    assert set(HAPROXY_ERROR_STATUSES) <= set(EDGE_ERRORS)
    for status, (error, message) in EDGE_ERRORS.items():
        assert status >= 400 and error and message
        assert "'" not in message  # HAProxy reads it inside single quotes
    assert json.loads(error_body(599)) == json.loads(error_body(500))
    assert json.loads(error_body(418))["error"] == "http_error"
