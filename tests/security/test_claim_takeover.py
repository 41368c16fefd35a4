"""Finding 1 (bot takeover by a replayed claim post) and the two claim-related
suspicions of finding 8: a claim holding a database connection while it asks
X, and a moderator undoing an admin's deactivation through an appeal."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.api.conftest import Human, Registered, assert_error, register, scalar, sign_up
from tests.api.test_moderation_decisions import staff
from tests.xserver import FakeX

REASON = "This agent is mine; please give it back to my profile."


async def claimed(client: httpx.AsyncClient, x: FakeX) -> tuple[Registered, Human, str]:
    """A bot claimed by its owner with the post the claim page suggests."""
    bot, owner = await register(client, "Prized Bot"), await sign_up(client, "Owner")
    post = x.post("owner_x", f"I'm claiming my AI agent @{bot.username} on Cairn: {bot.claim_code}")
    response = await client.post(
        f"/api/agents/claim/{bot.agent_id}", headers=owner.auth, json={"tweet_url": post}
    )
    assert response.status_code == 200, response.text
    return bot, owner, post


def owner_of(database: str, bot: Registered) -> str:
    return str(scalar(database, "SELECT owner_id::text FROM agents WHERE id = %s", bot.agent_id))


async def code_for(client: httpx.AsyncClient, bot: Registered, human: Human) -> str:
    response = await client.post(
        f"/api/agents/claim/{bot.agent_id}/relink-code", headers=human.auth
    )
    assert response.status_code == 201, response.text
    return str(response.json()["data"]["code"])


async def relink(
    client: httpx.AsyncClient, bot: Registered, human: Human, url: str | None = None
) -> httpx.Response:
    body = {"tweet_url": url} if url else None
    return await client.patch(f"/api/agents/claim/{bot.agent_id}", headers=human.auth, json=body)


async def test_a_replayed_claim_post_takes_over_nothing(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot, owner, claim_post = await claimed(client, x)
    stranger = await sign_up(client, "Stranger")

    replayed = await relink(client, bot, stranger, claim_post)
    assert replayed.status_code in (400, 403, 409), replayed.text
    # Another public post of the owner naming the bot proves nothing either,
    # not even once the stranger holds a code of their own.
    chatter = x.post("owner_x", f"Look what @{bot.username} did today")
    await code_for(client, bot, stranger)
    assert_error(await relink(client, bot, stranger, chatter), 400, "relink_code_missing")

    assert owner_of(database, bot) == owner.agent_id
    handle = "SELECT owner_x_handle FROM agents WHERE id = %s"
    assert scalar(database, handle, stranger.agent_id) is None
    assert_error(await relink(client, bot, stranger), 403, "not_owner")
    appeal = await client.post(
        f"/api/agents/reclaim/{bot.agent_id}",
        headers=stranger.auth,
        json={"appeal_reason": REASON, "captcha_token": "cairn-captcha-test"},
    )
    assert_error(appeal, 403, "not_owner")
    bots = (await client.get(f"/api/agents/{stranger.username}")).json()["data"]["linked_bots"]
    assert bots == []


async def test_the_code_is_bound_to_one_human_and_one_bot(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot, owner, _ = await claimed(client, x)
    other_bot, _, _ = await claimed_by(client, x, "other_x")
    new_profile, stranger = await sign_up(client, "Owner Again"), await sign_up(client, "Mallory")
    code = await code_for(client, bot, new_profile)
    post = x.post("owner_x", f"Linking {bot.username} to my Cairn profile: {code}")
    # Someone else submitting the owner's post: the code was not issued to them.
    await code_for(client, bot, stranger)
    assert_error(await relink(client, bot, stranger, post), 400, "relink_code_missing")
    # The code is for this bot only.
    foreign = x.post("other_x", f"Linking {other_bot.username}: {code}")
    assert_error(await relink(client, other_bot, new_profile, foreign), 400, "relink_code_missing")
    assert owner_of(database, bot) == owner.agent_id

    moved = await relink(client, bot, new_profile, post)
    assert moved.status_code == 200, moved.text
    assert owner_of(database, bot) == new_profile.agent_id


async def claimed_by(
    client: httpx.AsyncClient, x: FakeX, handle: str
) -> tuple[Registered, Human, str]:
    bot, owner = await register(client, f"Bot of {handle}"), await sign_up(client, "Someone")
    post = x.post(handle, bot.claim_code)
    response = await client.post(
        f"/api/agents/claim/{bot.agent_id}", headers=owner.auth, json={"tweet_url": post}
    )
    assert response.status_code == 200, response.text
    return bot, owner, post


async def test_a_post_older_than_its_code_is_refused(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot, owner, _ = await claimed(client, x)
    new_profile = await sign_up(client, "Owner Again")
    code = await code_for(client, bot, new_profile)
    backdated = x.post("owner_x", f"Linking: {code}", at=time.time() - 3600)
    assert_error(await relink(client, bot, new_profile, backdated), 400, "post_too_old")
    # A claim post made before the bot existed cannot carry its code either.
    fresh, human = await register(client, "Fresh Bot"), await sign_up(client, "Claimer")
    old = x.post("claimer_x", fresh.claim_code, at=time.time() - 3600)
    response = await client.post(
        f"/api/agents/claim/{fresh.agent_id}", headers=human.auth, json={"tweet_url": old}
    )
    assert_error(response, 400, "post_too_old")
    assert owner_of(database, bot) == owner.agent_id


async def test_a_post_proves_once_and_the_previous_owner_is_told(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot, owner, _ = await claimed(client, x)
    new_profile = await sign_up(client, "Owner Again")
    post = x.post("owner_x", f"Linking: {await code_for(client, bot, new_profile)}")
    assert (await relink(client, bot, new_profile, post)).status_code == 200
    # A later profile of the same person asks for a code but sends the used post.
    third = await sign_up(client, "Owner Third")
    await code_for(client, bot, third)
    assert_error(await relink(client, bot, third, post), 409, "post_already_used")
    assert owner_of(database, bot) == new_profile.agent_id

    inbox = await client.get("/api/notifications", headers=owner.auth)
    assert inbox.status_code == 200, inbox.text
    (note,) = inbox.json()["data"]
    assert note["kind"] == "bot_relinked"
    assert note["actor"]["username"] == new_profile.username
    assert note["target"] == {
        "type": "agent",
        "id": bot.agent_id,
        "title": "Prized Bot",
        "slug": bot.username,
    }


async def test_a_claim_holds_no_connection_while_it_asks_x(
    client: httpx.AsyncClient, x: FakeX, roomy_registration: None
) -> None:
    """X answers slowly (the app gives up after 1 s): the claims waiting on it
    must not hold the pool's connections, or a handful of them starve the API."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    pairs = [
        (await register(client, f"Bot {i}"), await sign_up(client, f"Human {i}")) for i in range(6)
    ]
    urls = [x.post(f"slow_{i}", bot.claim_code) for i, (bot, _) in enumerate(pairs)]
    x.mode = "slow"
    claims = [
        client.post(f"/api/agents/claim/{bot.agent_id}", headers=h.auth, json={"tweet_url": url})
        for (bot, h), url in zip(pairs, urls, strict=True)
    ]
    claiming = asyncio.gather(*claims)
    await asyncio.sleep(0.5)  # every claim is now waiting on X
    held = []
    for _ in range(10):  # while they wait (X gives up at 1 s)
        held.append(ctx.engine.pool.checkedout())
        await asyncio.sleep(0.02)
    started = time.monotonic()
    read = await client.get(f"/api/agents/{pairs[0][0].username}")
    read_s = time.monotonic() - started
    responses = await claiming
    assert read.status_code == 200
    assert all(r.status_code == 502 for r in responses), [r.text for r in responses]
    assert max(held) == 0, f"connections held while the claims waited on X: {held}"
    assert read_s < 0.3, f"a plain read waited {read_s:.2f} s for a connection"


async def test_a_moderator_cannot_undo_an_admins_deactivation(
    client: httpx.AsyncClient, database: str, x: FakeX
) -> None:
    bot, owner, _ = await claimed(client, x)
    admin, mod = await staff(client, database, "admin"), await staff(client, database)
    off = await client.patch(
        "/api/admin",
        headers=admin.auth,
        json={"type": "user", "id": bot.agent_id, "is_active": False},
    )
    assert off.status_code == 200, off.text
    filed = await client.post(
        f"/api/agents/reclaim/{bot.agent_id}",
        headers=owner.auth,
        json={"appeal_reason": REASON, "captcha_token": "cairn-captcha-test"},
    )
    assert filed.status_code == 201, filed.text
    appeal_id = filed.json()["data"]["appeal_id"]

    upheld = await client.patch(
        "/api/moderation", headers=mod.auth, json={"appeal_id": appeal_id, "action": "approve"}
    )
    assert_error(upheld, 403, "admin_required")
    assert scalar(database, "SELECT is_active FROM agents WHERE id = %s", bot.agent_id) is False
    assert scalar(database, "SELECT status FROM appeals WHERE id = %s", appeal_id) == (
        "pending_review"
    )
    by_admin = await client.patch(
        "/api/moderation", headers=admin.auth, json={"appeal_id": appeal_id, "action": "approve"}
    )
    assert by_admin.status_code == 200, by_admin.text
    assert scalar(database, "SELECT is_active FROM agents WHERE id = %s", bot.agent_id) is True
