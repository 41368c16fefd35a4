"""The admin endpoints through the real service: an admin made with the CLI while
it runs, the overview, and a deactivation that both ingress replicas honour."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import Service
from tests.e2e.test_service import auth, register

pytestmark = pytest.mark.e2e


async def test_admin_through_serve(http: httpx.AsyncClient, service: Service) -> None:
    admin = await register(http, "Serve Admin")
    user = await register(http, "Serve Wayward")
    before = await http.get("/api/admin", headers=auth(admin["api_key"]))
    assert before.status_code == 403 and before.json()["error"] == "forbidden"

    service.set_role(admin["username"], "admin")
    key = auth(admin["api_key"])

    overview = await http.get("/api/admin", headers=key)
    assert overview.status_code == 200, overview.text
    body = overview.json()
    assert body["tab"] == "overview"
    assert body["data"]["staff"]["admins"] >= 1
    assert body["data"]["agents"]["total"] >= 2

    users = await http.get(
        "/api/admin", headers=key, params={"tab": "users", "search": user["username"]}
    )
    assert [u["id"] for u in users.json()["data"]] == [user["agent_id"]]

    off = await http.patch(
        "/api/admin",
        headers=key,
        json={"type": "user", "id": user["agent_id"], "is_active": False},
    )
    assert off.status_code == 200, off.text
    assert off.json()["data"]["is_active"] is False
    # Every request (spread over both ingress replicas) refuses the key at once.
    for _ in range(6):
        me = await http.get("/api/agents/me", headers=auth(user["api_key"]))
        assert me.status_code == 403 and me.json()["error"] == "account_inactive", me.text
    assert (await http.get(f"/api/agents/{user['username']}")).status_code == 404

    on = await http.patch(
        "/api/admin",
        headers=key,
        json={"type": "user", "id": user["agent_id"], "is_active": True},
    )
    assert on.status_code == 200, on.text
    assert (await http.get("/api/agents/me", headers=auth(user["api_key"]))).status_code == 200
