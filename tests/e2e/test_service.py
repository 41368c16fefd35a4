"""The foundation through the real service: Ray Serve (HAProxy) + Postgres + Ray actors."""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from collections.abc import Iterable

import httpx
import pytest

from tests.e2e.conftest import GENERAL_LIMIT, Service, until_healthy

pytestmark = pytest.mark.e2e


def as_client() -> dict[str, str]:
    """Headers of a distinct client address (the load balancer on loopback is trusted)."""
    return {"X-Forwarded-For": f"198.51.{secrets.randbelow(255)}.{secrets.randbelow(255)}"}


async def register(http: httpx.AsyncClient, name: str = "E2E Agent") -> dict[str, str]:
    response = await http.post("/api/agents/register", json={"name": name}, headers=as_client())
    assert response.status_code == 201, response.text
    data: dict[str, str] = response.json()["data"]
    return data


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def publish(
    http: httpx.AsyncClient, key: str, patterns: Iterable[tuple[str, str, str]]
) -> list[str]:
    """Create each (title, description, content) as ``key``'s agent; their ids."""
    ids = []
    for title, description, content in patterns:
        response = await http.post(
            "/api/patterns",
            headers=auth(key),
            json={"title": title, "description": description, "content": content},
        )
        assert response.status_code == 201, response.text
        ids.append(response.json()["data"]["id"])
    return ids


async def test_register_profile_and_keys(http: httpx.AsyncClient) -> None:
    agent = await register(http, "Serve Bot")
    assert agent["claim_url"] == f"https://cairn.e2e/agents/claim/{agent['agent_id']}"
    profile = await http.get(f"/api/agents/{agent['username']}")
    assert profile.status_code == 200 and profile.json()["data"]["display_name"] == "Serve Bot"

    me = await http.get("/api/agents/me", headers=auth(agent["api_key"]))
    assert me.status_code == 200 and me.json()["data"]["id"] == agent["agent_id"]
    assert me.headers["X-RateLimit-Limit"] == str(GENERAL_LIMIT)

    patched = await http.patch(
        f"/api/agents/{agent['username']}",
        headers=auth(agent["api_key"]),
        json={"bio": "via serve"},
    )
    assert patched.status_code == 200 and patched.json()["data"]["bio"] == "via serve"

    status = await http.get("/api/agents/me/api-key", headers=auth(agent["api_key"]))
    assert status.status_code == 200 and status.json()["data"]["has_key"] is True

    new_key = (await http.post("/api/agents/me/api-key", headers=auth(agent["api_key"]))).json()[
        "data"
    ]["api_key"]
    await refused_everywhere(http, agent["api_key"])
    assert (await http.get("/api/agents/me", headers=auth(new_key))).status_code == 200
    assert (await http.get("/api/agents/me", headers=auth(new_key))).status_code == 200
    assert (await http.delete("/api/agents/me/api-key", headers=auth(new_key))).status_code == 200
    await refused_everywhere(http, new_key)
    # The replicas keep verified keys and follow credential changes through
    # Postgres (serve_app/runtime/keycache.py): the revocations above were
    # honoured with the cache on.
    keys = (await http.get("/api/health")).json()["keys"]
    assert keys["enabled"] and keys["listening"], keys


# Far below CAIRN_KEY_CACHE_TTL_S (60 s): a refusal within it came from the
# change's notice, not from a kept key running out.
NOTICE_DEADLINE_S = 5.0


async def refused_everywhere(http: httpx.AsyncClient, key: str) -> None:
    """A revoked key: every write refused at once; reads too on the replica
    that revoked it, and on the others as soon as Postgres's notice of the
    change reaches them (docs/decisions/admission.md, "Verified
    API keys kept in the replica (issue 32)"; a read through another replica
    right after the answer may still be served from its cache for those
    milliseconds), and from then on on every replica."""
    for _ in range(4):  # spread over both replicas
        write = await http.post("/api/agents/me/api-key", headers=auth(key))
        assert write.status_code == 401 and write.json()["error"] == "invalid_api_key"
    deadline = asyncio.get_running_loop().time() + NOTICE_DEADLINE_S
    while (await http.get("/api/agents/me", headers=auth(key))).status_code != 401:
        assert asyncio.get_running_loop().time() < deadline, "a replica kept serving the key"
        await asyncio.sleep(0.01)
    for _ in range(6):
        read = await http.get("/api/agents/me", headers=auth(key))
        assert read.status_code == 401 and read.json()["error"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        (
            "POST",
            "/api/agents/register",
            {"content": b"{oops", "headers": {"content-type": "application/json"}},
            400,
        ),
        ("POST", "/api/agents/register", {"json": {"name": "ok", "admin": True}}, 400),
        ("POST", "/api/agents/register", {"json": {"name": 123}}, 400),
        ("POST", "/api/agents/register", {"content": b"x" * 2_000_000}, 413),
        ("GET", "/api/nothing-here", {}, 404),
        ("GET", "/api/agents/nobody_0000", {}, 404),
        ("PUT", "/api/categories", {}, 405),
        ("GET", "/api/agents/me", {"headers": {"Authorization": "Bearer wrong"}}, 401),
    ],
)
async def test_errors_keep_the_json_shape(
    http: httpx.AsyncClient, method: str, path: str, kwargs: dict[str, object], status: int
) -> None:
    headers = {**as_client(), **kwargs.pop("headers", {})}  # type: ignore[dict-item]
    response = await http.request(method, path, headers=headers, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] and body["message"]


async def test_registration_429_with_headers(http: httpx.AsyncClient) -> None:
    client = as_client()
    for i in range(10):
        ok = await http.post("/api/agents/register", json={"name": f"burst {i}"}, headers=client)
        assert ok.status_code == 201 and ok.headers["X-RateLimit-Remaining"] == str(9 - i)
    refused = await http.post("/api/agents/register", json={"name": "burst 10"}, headers=client)
    assert refused.status_code == 429
    assert refused.json()["error"] == "rate_limited"
    assert refused.headers["X-RateLimit-Limit"] == "10"
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert int(refused.headers["Retry-After"]) > 3000
    assert int(refused.headers["X-RateLimit-Reset"]) > 0
    # Another client is not affected.
    assert (
        await http.post("/api/agents/register", json={"name": "x y"}, headers=as_client())
    ).status_code == 201


async def test_exactly_the_limit_is_admitted_under_200_concurrent_requests(
    http: httpx.AsyncClient,
) -> None:
    agent = await register(http, "Concurrent")
    headers = auth(agent["api_key"])
    responses = await asyncio.gather(
        *[http.get("/api/agents/me", headers=headers) for _ in range(200)]
    )
    codes = [r.status_code for r in responses]
    assert codes.count(200) == GENERAL_LIMIT, codes
    assert codes.count(429) == 200 - GENERAL_LIMIT
    refused = next(r for r in responses if r.status_code == 429)
    assert refused.headers["Retry-After"] and refused.headers["X-RateLimit-Remaining"] == "0"


async def test_categories_and_health(http: httpx.AsyncClient) -> None:
    cats = await http.get("/api/categories")
    assert cats.status_code == 200 and cats.headers["cache-control"] == "public, max-age=31536000"
    assert len(cats.json()["data"]) >= 10
    health = await until_healthy(http)
    assert health["metrics"]["db_connected"] is True
    assert {part["state"] for part in health["parts"].values()} == {"up"}


async def test_set_role_while_running(http: httpx.AsyncClient, service: Service) -> None:
    agent = await register(http, "Staff To Be")
    service.set_role(agent["username"], "moderator")
    me = await http.get("/api/agents/me", headers=auth(agent["api_key"]))
    assert me.json()["data"]["role"] == "moderator"
    # The service's database is still up after the CLI detached from it.
    assert (await http.get("/api/health")).json()["metrics"]["db_connected"] is True


def test_ctrl_c_during_start_up_stops_cleanly(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A Ctrl-C while Ray is starting is honoured: exit 0, nothing left running."""
    import signal
    import time

    from serve_app.launch.bootstrap import haproxy_dir, ray_dir
    from tests.e2e.conftest import _leftovers, free_port

    state = tmp_path_factory.mktemp("cairn-early-stop")
    env = {
        **service_env_base(),
        "CAIRN_STATE_DIR": str(state),
        "CAIRN_PORT": str(free_port()),
        "CAIRN_HAPROXY_STATS_PORT": str(free_port()),
        "CAIRN_HAPROXY_METRICS_PORT": str(free_port()),
        "CAIRN_FALLBACK_PROXY_PORT": str(free_port()),
    }
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "serve_app.launch.cli", "run"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "database ready" in line:
            break
    time.sleep(1.0)  # now inside Ray's start-up
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out
    assert "received" in out and "stopped" in out
    deadline = time.monotonic() + 20
    while _leftovers(state) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _leftovers(state) == []
    for link in (haproxy_dir(state), ray_dir(state)):
        if link.is_symlink():
            link.unlink()


def service_env_base() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop("CAIRN_DATABASE_URL", None)
    env.pop("RAY_ADDRESS", None)
    return env


async def test_patterns_through_serve(http: httpx.AsyncClient) -> None:
    agent = await register(http, "Pattern Author")
    headers = auth(agent["api_key"])
    body = {
        "title": "Serve-side pattern check",
        "description": "A pattern published through the real service.",
        "content": "Through HAProxy, the Api replicas and Postgres full-text search.",
        "tech_stack": ["ray", "postgres"],
    }
    created = await http.post("/api/patterns", headers=headers, json=body)
    assert created.status_code == 201, created.text
    pattern = created.json()["data"]
    read = await http.get(f"/api/patterns/{pattern['slug']}")
    assert read.status_code == 200 and read.json()["data"]["view_count"] == 1
    found = await http.get(
        "/api/patterns", params={"search": "haproxy replicas", "tech_stack": "ray"}
    )
    assert [p["id"] for p in found.json()["data"]] == [pattern["id"]]
    edited = await http.put(
        f"/api/patterns/{pattern['id']}", headers=headers, json={"difficulty_level": "advanced"}
    )
    assert edited.json()["data"]["difficulty_level"] == "advanced"
    assert (await http.delete(f"/api/patterns/{pattern['id']}", headers=headers)).status_code == 200
    assert (await http.get(f"/api/patterns/{pattern['id']}")).status_code == 404
    bad = await http.post(
        "/api/patterns", headers=headers, json={**body, "difficulty_level": "guru"}
    )
    assert bad.status_code == 400 and bad.json()["error"] == "validation_error"
