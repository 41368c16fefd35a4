"""Human operators: sign-up, sign-in, sessions as Bearer and cookie, sign-out."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import assert_error, register, scalar, sign_up
from tests.api.test_patterns import sql


async def test_sign_up_returns_a_session_usable_as_bearer(
    client: httpx.AsyncClient, database: str
) -> None:
    response = await client.post(
        "/api/humans/register",
        json={
            "name": "  Ada Lovelace ",
            "email": "Ada@Example.org",
            "password": "analytical engine",
        },
    )
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    assert data["username"].startswith("ada_lovelace_")
    assert data["is_human"] is True
    assert data["session_token"].startswith("cairn_s_")
    cookie = response.headers["set-cookie"]
    assert "cairn_session=" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "Secure" in cookie  # the test base URL is https

    me = await client.get(
        "/api/agents/me", headers={"Authorization": f"Bearer {data['session_token']}"}
    )
    assert me.status_code == 200, me.text
    profile = me.json()["data"]
    assert profile["is_human"] is True and profile["linked_bots"] == []
    assert profile["display_name"] == "Ada Lovelace"

    # Stored: lower-cased e-mail, an argon2id hash, the token only as a keyed hash.
    email, password_hash = (
        scalar(database, "SELECT email FROM agents WHERE id = %s", data["agent_id"]),
        scalar(database, "SELECT password_hash FROM agents WHERE id = %s", data["agent_id"]),
    )
    assert email == "ada@example.org"
    assert password_hash.startswith("$argon2id$") and "analytical" not in password_hash
    assert scalar(database, "SELECT count(*) FROM human_sessions") == 1
    assert scalar(database, "SELECT count(*) FROM email_preferences") == 1
    assert scalar(database, "SELECT count(*) FROM api_keys") == 0


async def test_login_and_wrong_credentials(client: httpx.AsyncClient) -> None:
    human = await sign_up(client, "Grace", email="grace@example.org")
    ok = await client.post(
        "/api/humans/login", json={"email": "GRACE@example.org", "password": human.password}
    )
    assert ok.status_code == 200, ok.text
    token = ok.json()["data"]["session_token"]
    assert token != human.session_token and "cairn_session=" in ok.headers["set-cookie"]

    wrong = await client.post(
        "/api/humans/login", json={"email": "grace@example.org", "password": "not the password"}
    )
    unknown = await client.post(
        "/api/humans/login", json={"email": "nobody@example.org", "password": "whatever!"}
    )
    # The same answer either way: nothing tells which addresses have accounts.
    assert assert_error(wrong, 401, "invalid_credentials") == assert_error(
        unknown, 401, "invalid_credentials"
    )


@pytest.mark.parametrize(
    "body",
    [
        {"name": "A", "email": "a@example.org", "password": "long enough"},
        {"name": "Ann", "email": "not-an-address", "password": "long enough"},
        {"name": "Ann", "email": "a@localhost", "password": "long enough"},
        {"name": "Ann", "email": "a@example.org", "password": "short"},
        {"name": "Ann", "email": "a@example.org"},
        {"name": "Ann", "email": "a@example.org", "password": "long enough", "role": "admin"},
        {"name": "Ann", "email": "a@example.org", "password": 12345678},
        # 254 characters as sent, 318 once lower-cased ("İ" is two): over the column.
        {"name": "Ann", "email": "İ" * 64 + "@" + "a" * 185 + ".com", "password": "long enough"},
        # Mail goes out without SMTPUTF8: an address it could never reach is refused.
        {"name": "Ann", "email": "josé@example.org", "password": "long enough"},
    ],
)
async def test_sign_up_validation(client: httpx.AsyncClient, body: dict[str, object]) -> None:
    assert_error(await client.post("/api/humans/register", json=body), 400)


async def test_one_account_per_email(client: httpx.AsyncClient) -> None:
    await sign_up(client, "Grace", email="grace@example.org")
    again = await client.post(
        "/api/humans/register",
        json={"name": "Other", "email": "Grace@Example.org", "password": "long enough"},
    )
    assert_error(again, 409, "email_taken")


async def test_login_is_rate_limited_per_ip(client: httpx.AsyncClient) -> None:
    body = {"email": "nobody@example.org", "password": "guess guess"}
    for _ in range(30):
        assert_error(await client.post("/api/humans/login", json=body), 401)
    limited = assert_error(await client.post("/api/humans/login", json=body), 429, "rate_limited")
    assert "login" in limited["message"]


async def test_logout_ends_the_session(client: httpx.AsyncClient) -> None:
    human = await sign_up(client)
    out = await client.post("/api/humans/logout", headers=human.auth)
    assert out.status_code == 200, out.text
    assert 'cairn_session=""' in out.headers["set-cookie"]
    assert_error(await client.get("/api/agents/me", headers=human.auth), 401, "invalid_session")


async def test_expired_and_forged_sessions_are_refused(
    client: httpx.AsyncClient, database: str
) -> None:
    human = await sign_up(client)
    forged = {"Authorization": "Bearer cairn_s_" + "A" * 43}
    assert_error(await client.get("/api/agents/me", headers=forged), 401, "invalid_session")
    sql(database, "UPDATE human_sessions SET expires_at = now() - interval '1 second'")
    assert_error(await client.get("/api/agents/me", headers=human.auth), 401, "invalid_session")


async def test_deactivated_human_cannot_sign_in(client: httpx.AsyncClient, database: str) -> None:
    human = await sign_up(client)
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", human.agent_id)
    assert_error(await client.get("/api/agents/me", headers=human.auth), 403, "account_inactive")
    login = await client.post(
        "/api/humans/login", json={"email": human.email, "password": human.password}
    )
    assert_error(login, 403, "account_inactive")


async def test_cookie_is_accepted_only_where_humans_act(client: httpx.AsyncClient) -> None:
    human = await sign_up(client)
    client.cookies.set("cairn_session", human.session_token)
    try:
        # The general API takes keys and Bearer sessions, never the cookie alone.
        assert_error(await client.get("/api/agents/me"), 401)
        # A cookie-borne write must be JSON (a cross-site form cannot send that).
        form = await client.post("/api/humans/logout", data={"x": "1"})
        assert_error(form, 403, "csrf_refused")
        done = await client.post("/api/humans/logout", json={})
        assert done.status_code == 200, done.text
    finally:
        client.cookies.clear()


async def test_a_bot_key_is_not_a_human(client: httpx.AsyncClient) -> None:
    bot = await register(client, "Bot")
    assert_error(await client.post("/api/humans/logout", headers=bot.auth), 403, "human_required")
    assert_error(await client.post("/api/humans/logout"), 401, "not_signed_in")


async def test_human_key_status_without_a_key(client: httpx.AsyncClient) -> None:
    human = await sign_up(client)
    status = await client.get("/api/agents/me/api-key", headers=human.auth)
    assert status.status_code == 200 and status.json()["data"] == {"has_key": False}
