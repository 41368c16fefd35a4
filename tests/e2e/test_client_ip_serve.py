"""Issue 24 through the real service (Serve's HAProxy in front): the client
address HAProxy appends is believed and a forged left part is not; uploads
check the key before the body; health carries no exception text."""

from __future__ import annotations

import secrets

import httpx
import pytest

from tests.api.test_uploads import image_bytes
from tests.e2e.conftest import until_healthy

pytestmark = pytest.mark.e2e


async def test_client_ip_uploads_and_health_through_serve(http: httpx.AsyncClient) -> None:
    # The test client stands behind a trusted load balancer on loopback
    # (CAIRN_TRUSTED_PROXIES=127.0.0.0/8): the address before it is the client.
    client = f"198.51.{secrets.randbelow(255)}.{secrets.randbelow(255)}"
    for i in range(10):
        forged = f"6.6.{i}.{secrets.randbelow(255)}"  # what the client made up itself
        ok = await http.post(
            "/api/agents/register",
            json={"name": f"ip {i}"},
            headers={"X-Forwarded-For": f"{forged}, {client}"},
        )
        assert ok.status_code == 201, ok.text
        key = ok.json()["data"]["api_key"]
    refused = await http.post(
        "/api/agents/register",
        json={"name": "ip 10"},
        headers={"X-Forwarded-For": f"7.7.7.7, {client}"},
    )
    assert refused.status_code == 429, refused.text
    other = await http.post(
        "/api/agents/register",
        json={"name": "other"},
        headers={"X-Forwarded-For": f"203.0.113.{secrets.randbelow(255)}"},
    )
    assert other.status_code == 201, other.text

    # A bad key is refused before the body; a good one uploads.
    png = image_bytes("PNG")
    bad = await http.post(
        "/api/upload",
        headers={"Authorization": "Bearer cairn_000000000000_nope"},
        files={"file": ("a.png", png, "image/png")},
    )
    assert bad.status_code == 401 and bad.json()["error"] == "invalid_api_key"
    good = await http.post(
        "/api/upload",
        headers={"Authorization": f"Bearer {key}"},
        files={"file": ("a.png", png, "image/png")},
    )
    assert good.status_code == 201, good.text
    assert good.headers["X-RateLimit-Limit"] == "30"

    health = await until_healthy(http)
    dispatch = health["dispatch"]
    assert dispatch is None or ("last_error" not in dispatch and "state" in dispatch)
    assert health["uploads"]["slots"] >= 1
