"""The pages of owners and moderators over the real app: the one CSRF check
of every form (refused without the token, or with another visitor's), the
session cookie's flags, sign-in without JavaScript with errors beside the
field, the owner's dashboard (keys with their scopes, rotate and revoke
through the claim services), and the moderation queue (the API's rules, a
decision with a reason)."""

from __future__ import annotations

import re

import httpx
import pytest

from serve_app.http import websession
from tests.api.conftest import Human, Registered, make_settings, register, scalar, sign_up
from tests.api.test_patterns import publish, sql
from tests.api.test_web_pages import assert_page, cookie
from tests.xserver import FakeX


@pytest.fixture(autouse=True)
def _no_cookies(client: httpx.AsyncClient) -> None:
    client.cookies.clear()


def token_of(body: str) -> str:
    """The CSRF token the page's forms carry."""
    found = re.search(r'name="csrf_token" value="([^"]+)"', body)
    assert found is not None, "no CSRF token in the page"
    return found.group(1)


async def form_token(client: httpx.AsyncClient, path: str, human: Human) -> str:
    response = await client.get(path, headers=cookie(human.session_token))
    return token_of(assert_page(response))


async def owner_of(client: httpx.AsyncClient, x: FakeX, name: str) -> tuple[Human, Registered]:
    """A human who claimed a new bot through the API."""
    bot = await register(client, name)
    human = await sign_up(client, f"{name} Owner")
    url = x.post(f"h{bot.username[:10]}", f"Claiming {bot.username} on Cairn: {bot.claim_code}")
    response = await client.post(
        f"/api/agents/claim/{bot.agent_id}", headers=human.auth, json={"tweet_url": url}
    )
    assert response.status_code == 200, response.text
    client.cookies.clear()
    return human, bot


def refused(response: httpx.Response) -> None:
    body = assert_page(response, 403)
    assert "did not come from this site" in body


@pytest.mark.parametrize(
    "loopback, secure",
    [
        ("http://localhost:8000", False),
        ("http://127.0.0.1:8000", False),
        ("https://localhost", True),
        ("http://cairn.example", True),
        ("https://cairn.example", True),
    ],
)
def test_session_cookies_are_secure_outside_loopback(loopback: str, secure: bool) -> None:
    assert websession.secure_cookies(make_settings(public_base_url=loopback)) is secure


async def test_sign_in_without_javascript(client: httpx.AsyncClient) -> None:
    human = await sign_up(client, "Form Person")
    client.cookies.clear()
    # The form carries a token bound to a pre-session cookie set with it.
    response = await client.get("/signin?next=/moderation")
    body = assert_page(response)
    pre = response.cookies[websession.CSRF_COOKIE]
    set_cookie = response.headers["set-cookie"]
    assert "HttpOnly" in set_cookie and "SameSite=lax" in set_cookie and "Secure" in set_cookie
    token = token_of(body)
    client.cookies.clear()
    jar = {"Cookie": f"{websession.CSRF_COOKIE}={pre}"}
    form = {"email": human.email, "password": human.password, "next": "/moderation"}
    # Without the token, or with a token of another visitor: refused.
    refused(await client.post("/signin", data=form, headers=jar))
    other = token_of((await client.get("/signin")).text)
    client.cookies.clear()
    refused(await client.post("/signin", data={**form, "csrf_token": other}, headers=jar))
    # A wrong password: the form again, the error beside the password.
    wrong = await client.post(
        "/signin", data={**form, "password": "not it", "csrf_token": token}, headers=jar
    )
    body = assert_page(wrong, 401)
    assert 'id="password-error"' in body and 'aria-describedby="password-error"' in body
    assert f'value="{human.email}"' in body
    ok = await client.post("/signin", data={**form, "csrf_token": token}, headers=jar)
    assert ok.status_code == 303 and ok.headers["location"] == "/moderation"
    session = ok.headers["set-cookie"]
    assert session.startswith("cairn_session=")
    assert "HttpOnly" in session and "SameSite=lax" in session and "Secure" in session
    # An address off this site is never a redirect's target.
    again = await client.post(
        "/signin", data={**form, "next": "//evil.example/", "csrf_token": token}, headers=jar
    )
    assert again.headers["location"] == "/dashboard"


async def test_sign_up_without_javascript(client: httpx.AsyncClient, database: str) -> None:
    taken = await sign_up(client, "Taken Person")
    client.cookies.clear()
    response = await client.get("/signup?next=/moderation")
    body = assert_page(response)
    jar = {"Cookie": f"{websession.CSRF_COOKIE}={response.cookies[websession.CSRF_COOKIE]}"}
    token = token_of(body)
    client.cookies.clear()
    form = {"name": "New Person", "email": "new.person@example.com", "password": "long enough"}
    form["next"] = "/moderation"
    refused(await client.post("/signup", data=form, headers=jar))
    # Bad input and an address that has an account: the form again, errors
    # beside their fields, what was typed kept (never the password), no account.
    for changed, status, field in (
        ({"name": "x", "password": "short"}, 400, ("name", "password")),
        ({"email": "not an address"}, 400, ("email",)),
        ({"email": taken.email}, 409, ("email",)),
    ):
        sent = {**form, **changed, "csrf_token": token}
        body = assert_page(await client.post("/signup", data=sent, headers=jar), status)
        for name in field:
            assert f'id="{name}-error"' in body and f'aria-describedby="{name}-error"' in body
        assert f'value="{sent["email"]}"' in body and "long enough" not in body
    assert scalar(database, "SELECT count(*) FROM agents WHERE email = %s", form["email"]) == 0
    ok = await client.post("/signup", data={**form, "csrf_token": token}, headers=jar)
    assert ok.status_code == 303 and ok.headers["location"] == "/moderation"
    assert ok.headers["set-cookie"].startswith("cairn_session=")
    # Signed in: the dashboard greets the new person.
    session = ok.cookies["cairn_session"]
    page = await client.get("/dashboard", headers={"Cookie": f"cairn_session={session}"})
    assert "New Person" in assert_page(page)


async def test_dashboard_rotates_and_revokes_a_bots_keys(
    client: httpx.AsyncClient, x: FakeX
) -> None:
    human, bot = await owner_of(client, x, "Dash Bot")
    anonymous = await client.get("/dashboard")
    assert "Sign in to see the bots you claimed" in assert_page(anonymous, 401)

    response = await client.get("/dashboard", headers=cookie(human.session_token))
    body = assert_page(response)
    assert response.headers["cache-control"] == "no-store"
    assert f'id="bot-{bot.agent_id}"' in body and "@" + bot.username in body
    assert "read, write" in body  # the key's scopes
    assert 'href="/oauth/grants"' in body
    token = token_of(body)
    rotate = f"/dashboard/bots/{bot.agent_id}/key"

    # A POST without the token (or with one made for another session) does nothing.
    refused(await client.post(rotate, headers=cookie(human.session_token)))
    stranger = await sign_up(client, "Stranger Person")
    client.cookies.clear()
    foreign = cookie(stranger.session_token)
    refused(await client.post(rotate, data={"csrf_token": token}, headers=foreign))
    assert (await client.get("/api/agents/me", headers=bot.auth)).status_code == 200

    # A stranger with their own good token: the service's 403, as over REST.
    theirs = await form_token(client, "/dashboard", stranger)
    response = await client.post(
        rotate, data={"csrf_token": theirs}, headers=cookie(stranger.session_token)
    )
    assert "linked to" in assert_page(response, 403)

    response = await client.post(
        rotate, data={"csrf_token": token}, headers=cookie(human.session_token)
    )
    body = assert_page(response)
    found = re.search(r'<code id="new-key">([^<]+)</code>', body)
    assert found is not None
    new_key = found.group(1)
    assert (await client.get("/api/agents/me", headers=bot.auth)).status_code == 401
    fresh = {"Authorization": f"Bearer {new_key}"}
    assert (await client.get("/api/agents/me", headers=fresh)).status_code == 200

    response = await client.post(
        f"{rotate}/revoke", data={"csrf_token": token}, headers=cookie(human.session_token)
    )
    assert response.status_code == 303 and response.headers["location"] == "/dashboard?done=revoked"
    assert (await client.get("/api/agents/me", headers=fresh)).status_code == 401
    after = await client.get("/dashboard?done=revoked", headers=cookie(human.session_token))
    body = assert_page(after)
    assert "No live key." in body and 'id="done"' in body


async def test_owner_revokes_over_rest_too(client: httpx.AsyncClient, x: FakeX) -> None:
    human, bot = await owner_of(client, x, "Rest Bot")
    stranger = await sign_up(client, "Other Owner")
    path = f"/api/agents/claim/{bot.agent_id}/api-key"
    assert (await client.delete(path, headers=stranger.auth)).status_code == 403
    response = await client.delete(path, headers=human.auth)
    assert response.status_code == 200, response.text
    assert (await client.get("/api/agents/me", headers=bot.auth)).status_code == 401


async def test_moderation_queue_and_decisions(client: httpx.AsyncClient, database: str) -> None:
    author = await register(client, "Queued Author")
    pattern = await publish(client, author, title="Awaiting a moderator's eye")
    sql(database, "UPDATE patterns SET moderation_status = 'pending' WHERE id = %s", pattern["id"])
    moderator = await sign_up(client, "Queue Moderator")
    someone = await sign_up(client, "Queue Stranger")
    sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", moderator.agent_id)
    client.cookies.clear()

    assert "Sign in as a moderator" in assert_page(await client.get("/moderation"), 401)
    # Not staff: the API's 403, on the page as over REST.
    assert_page(await client.get("/moderation", headers=cookie(someone.session_token)), 403)
    assert (await client.get("/api/moderation", headers=someone.auth)).status_code == 403
    assert_page(
        await client.get("/moderation?tab=nope", headers=cookie(moderator.session_token)), 400
    )
    for tab in ("flags", "logs", "safety", "pending_answers", "verified_edits"):
        assert_page(
            await client.get(f"/moderation?tab={tab}", headers=cookie(moderator.session_token))
        )

    body = assert_page(await client.get("/moderation", headers=cookie(moderator.session_token)))
    assert "Awaiting a moderator&#39;s eye" in body and f'id="approve-{pattern["id"]}"' in body
    token = token_of(body)
    decision = {"tab": "pending", "page": "1", "id": pattern["id"], "csrf_token": token}

    refused(
        await client.post(
            "/moderation",
            data={**decision, "action": "approve", "csrf_token": ""},
            headers=cookie(moderator.session_token),
        )
    )
    # A reason past its limit: the queue again, the error beside that item's field.
    response = await client.post(
        "/moderation",
        data={**decision, "action": "reject", "notes": "x" * 2001},
        headers=cookie(moderator.session_token),
    )
    body = assert_page(response, 400)
    assert f'id="notes-{pattern["id"]}-error"' in body
    # A stranger's own token does not make them staff.
    theirs = await form_token(client, "/dashboard", someone)
    response = await client.post(
        "/moderation",
        data={**decision, "action": "approve", "csrf_token": theirs},
        headers=cookie(someone.session_token),
    )
    assert_page(response, 403)

    response = await client.post(
        "/moderation",
        data={**decision, "action": "approve", "notes": "Clear and useful."},
        headers=cookie(moderator.session_token),
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/moderation?tab=pending&page=1&done=approved"
    shown = await client.get(f"/api/patterns/{pattern['id']}")
    assert shown.status_code == 200 and shown.json()["data"]["moderation_status"] == "approved"
    logs = await client.get("/moderation?tab=logs", headers=cookie(moderator.session_token))
    assert "Clear and useful." in assert_page(logs)


async def test_admin_pages_change_a_role_and_deactivate(
    client: httpx.AsyncClient, database: str
) -> None:
    admin = await sign_up(client, "Page Admin")
    moderator = await sign_up(client, "Page Moderator")
    member = await sign_up(client, "Page Member")
    sql(database, "UPDATE agents SET role = 'admin' WHERE id = %s", admin.agent_id)
    sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", moderator.agent_id)
    client.cookies.clear()
    as_admin = cookie(admin.session_token)

    assert_page(await client.get("/admin"), 401)
    # A moderator is not an admin: the API's 403 on the page too.
    assert_page(await client.get("/admin", headers=cookie(moderator.session_token)), 403)
    assert (await client.get("/api/admin", headers=moderator.auth)).status_code == 403
    assert 'id="overview"' in assert_page(await client.get("/admin", headers=as_admin))
    for tab in ("patterns", "questions"):
        assert_page(await client.get(f"/admin?tab={tab}", headers=as_admin))

    body = assert_page(await client.get("/admin?tab=users&search=Page", headers=as_admin))
    assert f'id="row-{member.agent_id}"' in body
    token = token_of(body)
    change = {"type": "user", "id": member.agent_id, "field": "role", "value": "moderator"}
    refused(await client.post("/admin", data=change, headers=as_admin))
    theirs = await form_token(client, "/dashboard", moderator)
    response = await client.post(
        "/admin", data={**change, "csrf_token": theirs}, headers=cookie(moderator.session_token)
    )
    assert_page(response, 403)
    assert_page(
        await client.post(
            "/admin", data={**change, "value": "root", "csrf_token": token}, headers=as_admin
        ),
        400,
    )

    response = await client.post(
        "/admin", data={**change, "csrf_token": token, "search": "Page"}, headers=as_admin
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/admin?tab=users&done=changed&search=Page"
    me = await client.get("/api/agents/me", headers=member.auth)
    assert me.json()["data"]["role"] == "moderator"
    deactivate = {**change, "field": "is_active", "value": "false", "csrf_token": token}
    assert (await client.post("/admin", data=deactivate, headers=as_admin)).status_code == 303
    assert (await client.get("/api/agents/me", headers=member.auth)).status_code == 403
    # An admin cannot change their own role, as over REST.
    own = {**change, "id": admin.agent_id, "value": "user", "csrf_token": token}
    assert_page(await client.post("/admin", data=own, headers=as_admin), 403)
