"""POST /api/agents/register: the spec's registration result, bounds and limits."""

from __future__ import annotations

import re

import httpx
import psycopg
import pytest

from serve_app.kit import keys
from storage.db import libpq_url
from tests.api.conftest import SECRET, assert_error, register


async def test_registration_result_matches_spec(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/agents/register", json={"name": "Research Bot", "description": "Finds papers."}
    )
    assert response.status_code == 201
    body = response.json()
    assert isinstance(body["message"], str)
    data = body["data"]
    assert set(data) == {
        "agent_id",
        "username",
        "api_key",
        "claim_code",
        "claim_url",
        "content_license",
        "content_license_url",
    }
    assert re.fullmatch(r"research_bot_[a-z0-9]{4}", data["username"])
    assert data["api_key"].startswith("cairn_") and keys.parse_key_id(data["api_key"])
    assert re.fullmatch(r"[A-Z0-9]{8}", data["claim_code"])
    assert data["claim_url"] == f"https://cairn.example/agents/claim/{data['agent_id']}"

    profile = (await client.get(f"/api/agents/{data['username']}")).json()["data"]
    assert profile["id"] == data["agent_id"]
    assert profile["display_name"] == "Research Bot"
    assert profile["bio"] == "Finds papers."
    assert profile["verification_level"] == "unverified"


async def test_key_is_stored_only_as_keyed_hash(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client)
    with psycopg.connect(libpq_url(database)) as conn:
        rows = conn.execute("SELECT key_id, key_hash FROM api_keys").fetchall()
        dump = conn.execute("SELECT string_agg(t::text, ' ') FROM api_keys t").fetchone()
    assert len(rows) == 1
    key_id, key_hash = rows[0]
    assert agent.api_key not in (dump[0] if dump else "")
    assert bytes(key_hash) == keys.hash_secret(SECRET, agent.api_key)
    assert key_id == keys.parse_key_id(agent.api_key)


async def test_usernames_are_unique_for_the_same_name(client: httpx.AsyncClient) -> None:
    names = {(await register(client, "Twin")).username for _ in range(8)}
    assert len(names) == 8


@pytest.mark.parametrize(
    ("name", "expected_prefix"),
    [
        ("Ünïcode Agent!", "unicode_agent_"),
        ("日本語", "agent_"),
        ("  spaced  out  ", "spaced_out_"),
    ],
)
async def test_username_from_unusual_names(
    client: httpx.AsyncClient, name: str, expected_prefix: str
) -> None:
    agent = await register(client, name)
    assert agent.username.startswith(expected_prefix)
    assert re.fullmatch(r"[a-z0-9_]+_[a-z0-9]{4}", agent.username)


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x"},
        {"name": "x" * 51},
        {"name": "   a   "},
        {"name": "ok name", "description": "d" * 501},
        {"name": 42},
        {"name": None},
        {"name": ["list"]},
        {},
        {"name": "ok name", "role": "admin"},
        {"name": "ok name", "description": 7},
        {"name": "bad\x00name"},
    ],
)
async def test_invalid_bodies_are_400(client: httpx.AsyncClient, body: dict[str, object]) -> None:
    assert_error(await client.post("/api/agents/register", json=body), 400, "validation_error")


async def test_bounds_are_inclusive(client: httpx.AsyncClient) -> None:
    await register(client, "ab")
    await register(client, "n" * 50, description="d" * 500)
    # The bounds count the trimmed name, as the human sign-up form's do.
    await register(client, " " + "p" * 50 + " ")
    assert_error(
        await client.post("/api/agents/register", json={"name": " " + "p" * 51 + " "}),
        400,
        "validation_error",
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"{bad json",
        b"[1, 2]",
        b'"string"',
        b"null",
        b"",
        b"\xff\xfe",
        b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"name": 1' + b"0" * 5000 + b"}",
        b'{"name": "\\ud800ab"}',
    ],
)
async def test_malformed_json_is_400(client: httpx.AsyncClient, raw: bytes) -> None:
    response = await client.post(
        "/api/agents/register", content=raw, headers={"content-type": "application/json"}
    )
    assert_error(response, 400)


async def test_huge_body_is_refused_without_500(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/api/agents/register",
        content=b'{"name": "' + b"a" * 3_000_000 + b'"}',
        headers={"content-type": "application/json"},
    )
    assert_error(response, 413, "payload_too_large")


async def test_registration_limit_per_ip_with_headers(client: httpx.AsyncClient) -> None:
    for i in range(10):
        response = await client.post("/api/agents/register", json={"name": f"agent {i}"})
        assert response.status_code == 201
        assert response.headers["X-RateLimit-Limit"] == "10"
        assert response.headers["X-RateLimit-Remaining"] == str(9 - i)
        assert int(response.headers["X-RateLimit-Reset"]) > 0
    refused = await client.post("/api/agents/register", json={"name": "one too many"})
    assert_error(refused, 429, "rate_limited")
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert 3500 <= int(refused.headers["Retry-After"]) <= 3600
    # Another client address has its own window.
    other = httpx.ASGITransport(app=client._transport.app, client=("198.51.100.9", 1))  # type: ignore[attr-defined]
    async with httpx.AsyncClient(transport=other, base_url="http://testserver") as c2:
        assert (
            await c2.post("/api/agents/register", json={"name": "elsewhere"})
        ).status_code == 201


async def test_spoofed_forwarded_for_is_ignored_without_trusted_proxies(
    client: httpx.AsyncClient,
) -> None:
    for i in range(10):
        headers = {"X-Forwarded-For": f"10.0.0.{i}"}
        r = await client.post("/api/agents/register", json={"name": "spoof"}, headers=headers)
        assert r.status_code == 201
    r = await client.post(
        "/api/agents/register", json={"name": "spoof"}, headers={"X-Forwarded-For": "10.9.9.9"}
    )
    assert r.status_code == 429
