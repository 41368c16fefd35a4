"""Issue 30, finding 3: an `Idempotency-Key` on a registration must not hand
one client's API key (or session) to another.

The stored answer of a keyless registration used to be scoped to the client
address: a second client behind the same address (a NAT, a shared proxy)
sending the same guessable key and the same body got the first client's new
API key. Now an anonymous creating request must carry a high-entropy key (a
random UUID v4, or a long random token), anything else is a 400
`weak_idempotency_key`, and the answer is scoped to the key alone: the key is
the proof, so a retry from another address still replays, and nobody without
the key gets the answer."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from tests.api.conftest import CLIENT_IP, assert_error, register, scalar
from tests.api.test_patterns import BODY

KEY = "Idempotency-Key"
REPLAYED = "idempotent-replayed"
OTHER_IP = "198.51.100.20"

ROUTES: dict[str, tuple[str, dict[str, Any], str]] = {
    "agent": ("/api/agents/register", {"name": "Replay Bot"}, "api_key"),
    "human": (
        "/api/humans/register",
        {"name": "Replay Human", "email": "replay@example.org", "password": "a long passphrase"},
        "session_token",
    ),
}

WEAK = [
    "retry-1",  # short and guessable: the kind of key the finding used
    "registration",
    "a" * 40,  # long, one character
    "ab" * 20,  # long, two characters
    "00000000-0000-4000-8000-000000000000",  # UUID v4 shape, no random digits
    "11111111-2222-4333-8444-555555555555",  # five distinct random digits
    "12345678-1234-1234-1234-123456789abc",  # a UUID, but not version 4
    "f34bfe78-e94e-11f1-88ac-02fc00000001",  # version 1: time and node, predictable
    "short_but_random_AZ9",  # fewer than 32 characters
    "has spaces but is long enough to pass 32",  # outside [A-Za-z0-9_-]
]

STRONG = [
    lambda: str(uuid.uuid4()),
    lambda: str(uuid.uuid4()).upper(),
    lambda: uuid.uuid4().hex,
    lambda: secrets.token_urlsafe(32),
]


def agents(database: str) -> int:
    return int(scalar(database, "SELECT count(*) FROM agents"))


def stored_keys(database: str) -> int:
    return int(scalar(database, "SELECT count(*) FROM idempotency_keys"))


@pytest.fixture
async def elsewhere(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A second client of the same app, from another address."""
    transport = httpx.ASGITransport(app=app, client=(OTHER_IP, 40001))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("weak", WEAK)
async def test_a_guessable_key_is_refused_and_never_replays(
    client: httpx.AsyncClient,
    database: str,
    roomy_registration: None,
    route: str,
    weak: str,
) -> None:
    path, body, secret_field = ROUTES[route]
    before = agents(database)
    # Two clients behind the same address (both are `client`: CLIENT_IP), the
    # same key, the same body: neither is served, and neither sees a secret.
    for _ in range(2):
        response = await client.post(path, headers={KEY: weak}, json=body)
        error = assert_error(response, 400, "weak_idempotency_key")
        assert "UUID" in error["message"]
        assert secret_field not in response.text and REPLAYED not in response.headers
    assert agents(database) == before and stored_keys(database) == 0


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("make", STRONG, ids=["uuid4", "uuid4-upper", "uuid4-hex", "token"])
async def test_a_strong_key_replays_to_its_holder_wherever_it_comes_from(
    client: httpx.AsyncClient,
    elsewhere: httpx.AsyncClient,
    database: str,
    roomy_registration: None,
    route: str,
    make: Any,
) -> None:
    path, body, secret_field = ROUTES[route]
    key = make()
    before = agents(database)
    first = await client.post(path, headers={KEY: key}, json=body)
    assert first.status_code == 201, first.text
    secret = first.json()["data"][secret_field]

    # The same client retries: the first answer, nothing new.
    again = await client.post(path, headers={KEY: key}, json=body)
    assert again.status_code == 201 and again.content == first.content
    assert again.headers[REPLAYED] == "true"

    # The retry comes from another address (a phone that changed network):
    # the key is the proof, so it still replays.
    moved = await elsewhere.post(path, headers={KEY: key}, json=body)
    assert moved.status_code == 201 and moved.content == first.content
    assert moved.headers[REPLAYED] == "true"
    assert agents(database) == before + 1

    # Anyone else, from either address, with another fresh key gets their own account.
    another = {**body, "email": "other@example.org"} if "email" in body else body
    other = await elsewhere.post(path, headers={KEY: str(uuid.uuid4())}, json=another)
    assert other.status_code == 201, other.text
    assert other.json()["data"][secret_field] != secret
    assert agents(database) == before + 2


async def test_the_stored_answer_does_not_depend_on_the_address(
    client: httpx.AsyncClient, elsewhere: httpx.AsyncClient, database: str
) -> None:
    """Sent first from the other address, replayed from CLIENT_IP."""
    assert CLIENT_IP != OTHER_IP
    key = str(uuid.uuid4())
    first = await elsewhere.post("/api/agents/register", headers={KEY: key}, json={"name": "Away"})
    assert first.status_code == 201, first.text
    back = await client.post("/api/agents/register", headers={KEY: key}, json={"name": "Away"})
    assert back.status_code == 201 and back.content == first.content
    assert back.headers[REPLAYED] == "true"


async def test_authenticated_routes_keep_their_key_rules(
    client: httpx.AsyncClient, database: str
) -> None:
    """A signed-in caller's key is scoped to that caller: short keys still work."""
    agent = await register(client, "Keyed Author")
    first = await client.post("/api/patterns", headers={**agent.auth, KEY: "once"}, json=BODY)
    assert first.status_code == 201, first.text
    again = await client.post("/api/patterns", headers={**agent.auth, KEY: "once"}, json=BODY)
    assert again.status_code == 201 and again.headers[REPLAYED] == "true"


def test_the_contract_tells_registrations_to_send_a_random_uuid(app: FastAPI) -> None:
    paths = app.openapi()["paths"]
    for path in ("/api/agents/register", "/api/humans/register"):
        params = paths[path]["post"]["parameters"]
        header = next(p for p in params if p["name"] == KEY)
        assert (
            "UUID" in header["description"] and "weak_idempotency_key" in (header["description"])
        ), path
    pattern_header = next(
        p for p in paths["/api/patterns"]["post"]["parameters"] if p["name"] == KEY
    )
    assert "weak_idempotency_key" not in pattern_header["description"]


async def test_skill_md_tells_agents_to_send_a_random_uuid(client: httpx.AsyncClient) -> None:
    text = (await client.get("/skill.md")).text
    assert "any unique string" not in text
    assert "fresh random UUID" in text and "weak_idempotency_key" in text
