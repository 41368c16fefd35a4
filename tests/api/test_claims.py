"""Claiming bots through X's embed endpoint (a real local HTTP server plays it),
re-linking, appeals with a captcha, and their resolution by moderators."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from serve_app.kit.errors import Forbidden
from serve_app.schemas.agents import RelinkIn
from serve_app.services import claims
from storage.models import Agent
from tests.api.conftest import (
    CLIENT_IP,
    Human,
    Registered,
    assert_error,
    register,
    scalar,
    sign_up,
)
from tests.api.test_moderation_decisions import decide, staff
from tests.api.test_notifications import inbox
from tests.api.test_patterns import sql
from tests.xserver import FakeX


def claimed_row(database: str, bot: Registered) -> tuple[Any, ...]:
    return tuple(
        scalar(database, f"SELECT {column} FROM agents WHERE id = %s", bot.agent_id)
        for column in (
            "is_claimed",
            "verification_level",
            "owner_x_handle",
            "owner_id::text",
            "claimed_at IS NOT NULL",
        )
    )


UNCLAIMED = (False, "unverified", None, None, False)


async def post_claim(
    client: httpx.AsyncClient, bot: Registered, human: Human, url: str
) -> httpx.Response:
    return await client.post(
        f"/api/agents/claim/{bot.agent_id}", headers=human.auth, json={"tweet_url": url}
    )


async def test_status_shows_the_code_only_while_unclaimed(
    client: httpx.AsyncClient, x: FakeX
) -> None:
    bot, human = await register(client, "Claimable"), await sign_up(client)
    before = await client.get(f"/api/agents/claim/{bot.agent_id}")
    assert before.status_code == 200, before.text
    assert before.json()["data"] == {
        "id": bot.agent_id,
        "username": bot.username,
        "display_name": "Claimable",
        "verification_level": "unverified",
        "is_claimed": False,
        "is_active": True,
        "claim_code": bot.claim_code,
    }
    url = x.post("alice_x", f"Claiming my agent on Cairn: {bot.claim_code}")
    assert (await post_claim(client, bot, human, url)).status_code == 200
    after = (await client.get(f"/api/agents/claim/{bot.agent_id}")).json()["data"]
    assert "claim_code" not in after
    assert after["is_claimed"] is True and after["owner_x_handle"] == "alice_x"

    assert_error(await client.get(f"/api/agents/claim/{human.agent_id}"), 404)  # not a bot
    assert_error(await client.get("/api/agents/claim/7d0c6f1e-0000-4000-8000-000000000000"), 404)
    assert_error(await client.get("/api/agents/claim/not-a-uuid"), 400)


async def test_claim_verifies_the_post_and_links_the_bot(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot, human = await register(client, "Helper Bot"), await sign_up(client, "Alice")
    url = x.post("Alice_X", f"I own this agent.\nCode: {bot.claim_code.lower()} #cairn")
    response = await post_claim(client, bot, human, url + "?s=20")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["data"]["verification_level"] == "verified"
    assert body["data"]["owner_x_handle"] == "Alice_X"  # from the embed's author
    assert body["data"]["claimed_at"]
    # Asked once, for the canonical URL, of the configured endpoint only.
    (asked,) = x.requests
    query = parse_qs(urlsplit(asked).query)
    assert asked.startswith("/oembed?") and query["omit_script"] == ["true"]
    assert query["url"] == [url.replace("https://x.com/", "https://twitter.com/")]
    row = claimed_row(database, bot)
    assert row == (True, "verified", "Alice_X", human.agent_id, True)

    profile = (await client.get(f"/api/agents/{human.username}")).json()["data"]
    assert [b["username"] for b in profile["linked_bots"]] == [bot.username]
    assert (await client.get(f"/api/agents/{bot.username}")).json()["data"][
        "verification_level"
    ] == "verified"


async def test_claim_needs_a_signed_in_human(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot = await register(client, "Bot")
    url = x.post("someone", bot.claim_code)
    no_auth = await client.post(f"/api/agents/claim/{bot.agent_id}", json={"tweet_url": url})
    assert_error(no_auth, 401)
    with_key = await client.post(
        f"/api/agents/claim/{bot.agent_id}", headers=bot.auth, json={"tweet_url": url}
    )
    assert_error(with_key, 403, "human_required")
    assert claimed_row(database, bot) == UNCLAIMED and x.requests == []


@pytest.mark.parametrize(
    "url",
    [
        "https://x.com/alice",
        "http://x.com/alice/status/123",
        "https://127.0.0.1/alice/status/123",
        "https://localhost/alice/status/123",
        "https://x.com.evil.example/alice/status/123",
        "https://evil.example/x.com/alice/status/123",
        "https://x.com@127.0.0.1/alice/status/123",
        "https://x.com:8080/alice/status/123",
        "https://x.com/alice/status/123abc",
        "https://x.com/alice/status/1/../../../admin",
        "https://x.com/this_handle_is_too_long/status/1",
        "javascript:alert(1)",
        "file:///etc/passwd",
        " ",
    ],
)
async def test_bad_post_urls_are_refused_before_any_fetch(
    client: httpx.AsyncClient, database: str, x: FakeX, url: str
) -> None:
    bot, human = await register(client, "Bot"), await sign_up(client)
    response = await post_claim(client, bot, human, url)
    assert_error(response, 400)
    assert x.requests == [] and claimed_row(database, bot) == UNCLAIMED


async def test_a_post_without_the_code_claims_nothing(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot, human = await register(client, "Bot"), await sign_up(client)
    other = await register(client, "Other")
    for text in ("no code here", f"almost {bot.claim_code}X", other.claim_code):
        response = await post_claim(client, bot, human, x.post("alice", text))
        assert_error(response, 400, "claim_code_missing")
    missing = await post_claim(client, bot, human, "https://x.com/alice/status/424242")
    assert_error(missing, 400, "post_not_found")
    assert claimed_row(database, bot) == UNCLAIMED


async def test_one_x_account_claims_one_bot(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    first, second = await register(client, "First"), await register(client, "Second")
    alice, bob = await sign_up(client, "Alice"), await sign_up(client, "Bob")
    ok = await post_claim(client, first, alice, x.post("alice", first.claim_code))
    assert ok.status_code == 200, ok.text
    # The same X account (any letter case), even for another human: refused.
    again = await post_claim(client, second, bob, x.post("ALICE", second.claim_code))
    assert_error(again, 409, "x_account_already_used")
    assert claimed_row(database, second) == UNCLAIMED
    # A claimed bot cannot be claimed again.
    twice = await post_claim(client, first, bob, x.post("bob", first.claim_code))
    assert_error(twice, 409, "already_claimed")
    assert scalar(database, "SELECT owner_x_handle FROM agents WHERE id = %s", first.agent_id) == (
        "alice"
    )


@pytest.mark.parametrize("mode", ["slow", "huge", "redirect", "broken", "error"])
async def test_a_misbehaving_embed_endpoint_is_a_502(
    client: httpx.AsyncClient, database: str, x: FakeX, mode: str
) -> None:
    bot, human = await register(client, "Bot"), await sign_up(client)
    url = x.post("alice", bot.claim_code)
    x.mode = mode
    assert_error(await post_claim(client, bot, human, url), 502, "x_unavailable")
    assert claimed_row(database, bot) == UNCLAIMED
    assert not any(r.startswith("/stolen") for r in x.requests)  # redirects not followed


async def test_claim_through_the_cookie_of_the_web_page(
    client: httpx.AsyncClient, x: FakeX
) -> None:
    bot, human = await register(client, "Bot"), await sign_up(client)
    url = x.post("carol", bot.claim_code)
    client.cookies.set("cairn_session", human.session_token)
    try:
        form = await client.post(f"/api/agents/claim/{bot.agent_id}", data={"tweet_url": url})
        assert_error(form, 403, "csrf_refused")
        ok = await client.post(f"/api/agents/claim/{bot.agent_id}", json={"tweet_url": url})
        assert ok.status_code == 200, ok.text
    finally:
        client.cookies.clear()


async def relink_code(client: httpx.AsyncClient, bot: Registered, human: Human) -> str:
    path = f"/api/agents/claim/{bot.agent_id}/relink-code"
    response = await client.post(path, headers=human.auth)
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    assert data["code"] in data["post_text"] and bot.username in data["post_text"]
    return str(data["code"])


async def test_relink_to_the_owners_profile(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot, first = await register(client, "Bot"), await sign_up(client, "Alice")
    assert (await post_claim(client, bot, first, x.post("alice", bot.claim_code))).is_success
    second = await sign_up(client, "Alice Again")  # the same person, a new profile
    path = f"/api/agents/claim/{bot.agent_id}"

    assert_error(await client.patch(path, headers=second.auth), 403, "not_owner")
    code = await relink_code(client, bot, second)
    by_other = x.post("mallory", f"{bot.username} is mine {code}")
    refused = await client.patch(path, headers=second.auth, json={"tweet_url": by_other})
    assert_error(refused, 403, "not_owner")
    no_code = x.post("alice", f"Moving {bot.username} to my new profile")
    assert_error(
        await client.patch(path, headers=second.auth, json={"tweet_url": no_code}),
        400,
        "relink_code_missing",
    )
    assert scalar(database, "SELECT owner_id::text FROM agents WHERE id = %s", bot.agent_id) == (
        first.agent_id
    )

    proof = x.post("alice", f"Moving {bot.username} to my new profile: {code}")
    moved = await client.patch(path, headers=second.auth, json={"tweet_url": proof})
    assert moved.status_code == 200, moved.text
    bots = (await client.get(f"/api/agents/{second.username}")).json()["data"]["linked_bots"]
    assert [b["username"] for b in bots] == [bot.username]
    assert (await client.get(f"/api/agents/{first.username}")).json()["data"]["linked_bots"] == []

    # The newer proof is the one that counts: the second profile re-links at
    # will, the first must prove the account again.
    assert (await client.patch(path, headers=second.auth)).status_code == 200
    assert_error(await client.patch(path, headers=first.auth), 403, "not_owner")
    again = x.post("alice", await relink_code(client, bot, first))
    back = await client.patch(path, headers=first.auth, json={"tweet_url": again})
    assert back.status_code == 200, back.text
    unclaimed = await register(client, "Fresh")
    assert_error(
        await client.patch(f"/api/agents/claim/{unclaimed.agent_id}", headers=first.auth),
        409,
        "not_claimed",
    )
    assert_error(
        await client.post(
            f"/api/agents/claim/{unclaimed.agent_id}/relink-code", headers=first.auth
        ),
        409,
        "not_claimed",
    )


async def owned_bot(client: httpx.AsyncClient, x: FakeX) -> tuple[Registered, Human]:
    bot, owner = await register(client, "Owned"), await sign_up(client, "Owner")
    response = await post_claim(client, bot, owner, x.post("owner_x", bot.claim_code))
    assert response.status_code == 200, response.text
    return bot, owner


REASON = "My agent was deactivated by mistake; it only posts recipes."


async def appeal(
    client: httpx.AsyncClient, bot: Registered, who: Human | Registered, **body: Any
) -> httpx.Response:
    payload = {"appeal_reason": REASON, "captcha_token": "cairn-captcha-test", **body}
    return await client.post(f"/api/agents/reclaim/{bot.agent_id}", headers=who.auth, json=payload)


async def test_appeal_goes_to_review(client: httpx.AsyncClient, database: str, x: FakeX) -> None:
    bot, owner = await owned_bot(client, x)
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", bot.agent_id)
    response = await appeal(client, bot, owner)
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    assert data["agent_id"] == bot.agent_id and data["status"] == "pending_review"
    assert data["note"]
    again = await appeal(client, bot, owner)
    assert_error(again, 409, "appeal_pending")
    assert scalar(database, "SELECT count(*) FROM appeals") == 1


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"appeal_reason": "x" * 19}, 400, None),
        ({"appeal_reason": "x" * 1001}, 400, None),
        ({"appeal_reason": "   " + "x" * 18 + "   "}, 400, None),
        ({"captcha_token": "wrong"}, 400, "captcha_failed"),
        ({"captcha_token": ""}, 400, None),
    ],
)
async def test_appeal_validation(
    client: httpx.AsyncClient,
    database: str,
    x: FakeX,
    body: dict[str, Any],
    status: int,
    error: str | None,
) -> None:
    bot, owner = await owned_bot(client, x)
    assert_error(await appeal(client, bot, owner, **body), status, error)
    assert scalar(database, "SELECT count(*) FROM appeals") == 0


async def test_only_the_owner_appeals(client: httpx.AsyncClient, database: str, x: FakeX) -> None:
    bot, _ = await owned_bot(client, x)
    stranger = await sign_up(client, "Stranger")
    assert_error(await appeal(client, bot, stranger), 403, "not_owner")
    assert_error(await appeal(client, bot, bot), 403, "human_required")
    assert scalar(database, "SELECT count(*) FROM appeals") == 0


async def test_a_configured_captcha_verifier_decides(
    client: httpx.AsyncClient, x: FakeX, x_server: tuple[FakeX, str]
) -> None:
    bot, owner = await owned_bot(client, x)
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.settings
    ctx.settings = saved.model_copy(
        update={
            "captcha_verify_url": f"{x_server[1]}/siteverify",
            "captcha_secret": SecretStr("s3cret-for-verifier"),
        }
    )
    try:
        # The static test token means nothing once a verifier is configured.
        assert_error(await appeal(client, bot, owner), 400, "captcha_failed")
        x.captcha_tokens.add("solved-token")
        ok = await appeal(client, bot, owner, captcha_token="solved-token")
        assert ok.status_code == 201, ok.text
        form = x.captcha_forms[-1]
        assert form["response"] == ["solved-token"] and form["secret"] == ["s3cret-for-verifier"]
        assert form["remoteip"] == ["203.0.113.7"]
        ctx.settings = ctx.settings.model_copy(
            update={"captcha_verify_url": "http://127.0.0.1:9/siteverify"}
        )
        assert_error(await appeal(client, bot, owner), 503, "captcha_unavailable")
    finally:
        ctx.settings = saved


async def test_moderators_resolve_appeals(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot, owner = await owned_bot(client, x)
    mod = await staff(client, database)
    sql(
        database, "UPDATE agents SET is_active = false, owner_id = NULL WHERE id = %s", bot.agent_id
    )
    appeal_id = (await appeal(client, bot, owner)).json()["data"]["appeal_id"]

    queue = await client.get("/api/moderation?tab=appeals", headers=mod.auth)
    assert queue.status_code == 200, queue.text
    (row,) = queue.json()["data"]
    assert row["id"] == appeal_id and row["appeal_reason"] == REASON
    assert row["agent"]["username"] == bot.username and row["agent"]["is_active"] is False
    assert row["appellant"]["username"] == owner.username
    assert_error(await client.get("/api/moderation?tab=appeals", headers=bot.auth), 403)

    # Only admins deactivate; a moderator cannot overturn that by upholding the appeal.
    refused = await client.patch(
        "/api/moderation", headers=mod.auth, json={"appeal_id": appeal_id, "action": "approve"}
    )
    assert_error(refused, 403, "admin_required")
    admin = await staff(client, database, "admin")
    done = await decide(client, admin, appeal_id=appeal_id, action="approve", notes="Restored.")
    assert done["data"]["status"] == "approved" and done["data"]["agent_id"] == bot.agent_id
    assert scalar(database, "SELECT is_active FROM agents WHERE id = %s", bot.agent_id) is True
    assert scalar(database, "SELECT owner_id::text FROM agents WHERE id = %s", bot.agent_id) == (
        owner.agent_id
    )
    assert (await client.get("/api/agents/me", headers=bot.auth)).status_code == 200
    logs = (await client.get("/api/moderation?tab=logs", headers=mod.auth)).json()["data"]
    assert logs[0]["target_type"] == "appeal" and logs[0]["previous_status"] == "pending_review"
    (note,) = (await inbox(client, owner))["data"]
    assert note["kind"] == "moderation_decision"
    assert note["message"].startswith("Your appeal for")
    assert (await client.get("/api/moderation?tab=appeals", headers=mod.auth)).json()["data"] == []

    # Resolved once; a second decision is a conflict, a rejected appeal changes nothing.
    assert_error(
        await client.patch(
            "/api/moderation", headers=mod.auth, json={"appeal_id": appeal_id, "action": "reject"}
        ),
        409,
        "appeal_resolved",
    )
    second = (await appeal(client, bot, owner)).json()["data"]["appeal_id"]
    await decide(client, mod, appeal_id=second, action="reject")
    assert scalar(database, "SELECT status FROM appeals WHERE id = %s", second) == "rejected"


async def test_the_linked_human_issues_a_new_key(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    """A bot that revoked (or lost) its key gets a new one from the human it
    is linked to; nobody else can issue one."""
    bot, owner = await owned_bot(client, x)
    revoked = await client.delete("/api/agents/me/api-key", headers=bot.auth)
    assert revoked.status_code == 200, revoked.text
    assert_error(await client.get("/api/agents/me", headers=bot.auth), 401)
    path = f"/api/agents/claim/{bot.agent_id}/api-key"
    stranger = await sign_up(client, "Stranger")
    assert_error(await client.post(path, headers=stranger.auth), 403, "not_owner")
    assert_error(await client.post(path, headers=bot.auth), 401)
    unknown = f"/api/agents/claim/{uuid.uuid4()}/api-key"
    assert_error(await client.post(unknown, headers=owner.auth), 404)
    issued = await client.post(path, headers=owner.auth)
    assert issued.status_code == 200, issued.text
    key = issued.json()["data"]["api_key"]
    me = await client.get("/api/agents/me", headers={"Authorization": f"Bearer {key}"})
    assert me.status_code == 200 and me.json()["data"]["username"] == bot.username
    again = (await client.post(path, headers=owner.auth)).json()["data"]["api_key"]
    assert_error(
        await client.get("/api/agents/me", headers={"Authorization": f"Bearer {key}"}), 401
    )
    assert again != key
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", bot.agent_id)
    assert_error(await client.post(path, headers=owner.auth), 403, "account_inactive")


async def test_a_new_key_leaves_a_notice_and_an_audit_record(
    client: httpx.AsyncClient, x: FakeX, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 45: a key issued for a bot by its human is told to that human (a
    notification, mailed whatever the preferences: tests/api/test_mail.py) and
    recorded for the operator (a ``cairn.audit`` line), each time: a key
    issued with a stolen session does not go unseen."""
    bot, owner = await owned_bot(client, x)
    path = f"/api/agents/claim/{bot.agent_id}/api-key"
    prefixes = []
    for _ in range(2):
        with caplog.at_level(logging.INFO, logger="cairn.audit"):
            issued = await client.post(path, headers=owner.auth)
        assert issued.status_code == 200, issued.text
        data = issued.json()["data"]
        prefixes.append(data["key_prefix"])
        (record,) = [r for r in caplog.records if r.name == "cairn.audit"]
        line = record.getMessage()
        for part in (bot.agent_id, bot.username, owner.agent_id, CLIENT_IP, data["key_prefix"]):
            assert part in line, (part, line)
        assert data["api_key"] not in line  # the key itself is never written down
        caplog.clear()
    notes = [n for n in (await inbox(client, owner))["data"] if n["kind"] == "api_key_issued"]
    assert [n["data"] for n in notes] == [{"key_prefix": p} for p in reversed(prefixes)]
    note = notes[0]
    assert note["target"]["type"] == "agent" and note["target"]["id"] == bot.agent_id
    assert note["target"]["slug"] == bot.username and note["actor"] is None
    assert note["message"].startswith("A new API key was issued for your agent")


async def test_an_appeal_made_stale_by_a_newer_proof_is_not_upheld(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    """The latest proof wins: an appeal by a human whom a newer proof of the X
    account has since replaced cannot take the agent back from the new owner."""
    bot, owner = await owned_bot(client, x)
    appeal_id = (await appeal(client, bot, owner)).json()["data"]["appeal_id"]
    newcomer = await sign_up(client, "Newcomer")
    code = await relink_code(client, bot, newcomer)
    path = f"/api/agents/claim/{bot.agent_id}"
    proof = x.post("owner_x", f"Moving {bot.username}: {code}")
    moved = await client.patch(path, headers=newcomer.auth, json={"tweet_url": proof})
    assert moved.status_code == 200, moved.text
    admin = await staff(client, database, "admin")
    stale = await client.patch(
        "/api/moderation", headers=admin.auth, json={"appeal_id": appeal_id, "action": "approve"}
    )
    assert_error(stale, 409, "appeal_stale")
    owner_now = "SELECT owner_id::text FROM agents WHERE id = %s"
    assert scalar(database, owner_now, bot.agent_id) == newcomer.agent_id
    await decide(client, admin, appeal_id=appeal_id, action="reject")
    assert scalar(database, owner_now, bot.agent_id) == newcomer.agent_id


async def test_a_relink_reads_the_callers_proof_under_the_lock(
    client: httpx.AsyncClient, app: FastAPI, database: str, x: FakeX
) -> None:
    """A re-link without a post rests on the caller's proof of the X account.
    Admission loaded the caller before the bot's row was locked; a newer proof
    by someone else that committed in between must win, so the proof is read
    again under the lock (here: the caller's row as it was loaded before)."""
    bot, owner = await owned_bot(client, x)
    ctx = app.state.ctx
    async with ctx.sessions() as early:
        loaded = await early.get(Agent, uuid.UUID(owner.agent_id))
        assert loaded is not None and loaded.owner_x_handle == "owner_x"
        early.expunge(loaded)
    newcomer = await sign_up(client, "Newcomer")
    proof = x.post("owner_x", f"Moving {bot.username}: {await relink_code(client, bot, newcomer)}")
    path = f"/api/agents/claim/{bot.agent_id}"
    moved = await client.patch(path, headers=newcomer.auth, json={"tweet_url": proof})
    assert moved.status_code == 200, moved.text
    with pytest.raises(Forbidden):
        async with ctx.sessions() as db:
            await claims.relink(ctx, db, loaded, uuid.UUID(bot.agent_id), RelinkIn())
    owner_now = "SELECT owner_id::text FROM agents WHERE id = %s"
    assert scalar(database, owner_now, bot.agent_id) == newcomer.agent_id


async def test_two_claims_at_once_one_wins(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot = await register(client, "Contested")
    first, second = await sign_up(client, "First"), await sign_up(client, "Second")
    urls = [x.post("first_x", bot.claim_code), x.post("second_x", bot.claim_code)]
    for _ in range(3):
        responses = await asyncio.gather(
            post_claim(client, bot, first, urls[0]), post_claim(client, bot, second, urls[1])
        )
        statuses = sorted(r.status_code for r in responses)
        assert statuses in ([200, 409], [409, 409]), [r.text for r in responses]
    winner = scalar(database, "SELECT owner_x_handle FROM agents WHERE id = %s", bot.agent_id)
    assert winner in ("first_x", "second_x")
    owner = scalar(database, "SELECT owner_id::text FROM agents WHERE id = %s", bot.agent_id)
    assert owner == (first.agent_id if winner == "first_x" else second.agent_id)
