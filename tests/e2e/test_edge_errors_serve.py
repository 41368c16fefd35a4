"""Issue 30, finding 2 through the real service (`cairn run`: Serve's HAProxy
launched through cairn-haproxy, two Api replicas with Serve's direct ingress
servers): answers made before the app, by HAProxy or by Serve's wrapper in a
replica, have the app's JSON error shape."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.conftest import Service
from tests.security.test_edge_errors import assert_json_error, raw_request

pytestmark = pytest.mark.e2e


def test_an_over_long_request_line_is_a_json_414(service: Service) -> None:
    """HAProxy, before any replica: a 70 KB URL."""
    port = urlsplit(service.base_url).port
    assert port is not None
    url = "/api/patterns?search=" + "a" * 70_000
    status, headers, body = raw_request(
        port, f"GET {url} HTTP/1.1\r\nHost: cairn\r\nConnection: close\r\n\r\n".encode()
    )
    assert_json_error(status, headers, body, 414)


async def test_a_timeout_in_the_replicas_serve_wrapper_is_json(http: httpx.AsyncClient) -> None:
    """Serve's direct ingress server times a request out with a plain-text 408;
    any client may ask for a shorter timeout (x-request-timeout-seconds)."""
    response = await http.get(
        "/api/patterns",
        headers={
            "x-request-timeout-seconds": "0.000001",
            "X-Forwarded-For": f"198.18.{secrets.randbelow(255)}.{secrets.randbelow(255)}",
        },
    )
    assert_json_error(response.status_code, dict(response.headers), response.content, 408)
    assert response.json()["error"] == "request_timeout"
