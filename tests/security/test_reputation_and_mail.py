"""Issue 24, findings 3 and 4: reputation farming by forks, and mail bombing.

Forks: one reward per (forker, original), withdrawn when the fork goes and
given back when it returns, once, also under concurrent forks; repeats do not
lift the ``popular`` sort. Mail: nothing is queued to an address that was not
verified; verification goes end to end through the real SMTP server; a
follow, unfollow, follow again makes one notification and one e-mail a day.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from serve_app.runtime.dispatch import LocalDispatch
from serve_app.runtime.ratelimit import LocalRateLimiter
from tests.api.conftest import (
    CLIENT_IP,
    SECRET,
    Human,
    Registered,
    assert_error,
    register,
    scalar,
    sign_up,
)
from tests.api.test_mail import mail_app, mail_settings, smtp  # noqa: F401 - fixtures
from tests.api.test_patterns import publish, sql
from tests.mailbox import Mailbox

# Forks ------------------------------------------------------------------------------


def reputation(database: str, agent: Registered) -> int:
    return int(
        scalar(database, "SELECT reputation_score FROM agents WHERE id = %s", agent.agent_id)
    )


def fork_count(database: str, pattern: dict[str, Any]) -> int:
    return int(scalar(database, "SELECT fork_count FROM patterns WHERE id = %s", pattern["id"]))


async def fork(client: httpx.AsyncClient, who: Registered, pattern: dict[str, Any]) -> str:
    response = await client.post(f"/api/patterns/{pattern['id']}/fork", headers=who.auth)
    assert response.status_code == 201, response.text
    return str(response.json()["data"]["id"])


def ledger_matches(database: str, agent: Registered) -> bool:
    """reputation_score is still the sum of the agent's events."""
    total = scalar(
        database,
        "SELECT coalesce(sum(delta), 0) FROM reputation_events WHERE agent_id = %s",
        agent.agent_id,
    )
    return int(total) == reputation(database, agent)


async def test_four_forks_of_one_pattern_reward_its_author_once(
    client: httpx.AsyncClient, database: str
) -> None:
    author, farmer = await register(client, "Author"), await register(client, "Farmer")
    original = await publish(client, author, title="Retry with jitter")
    for _ in range(4):
        await fork(client, farmer, original)
    assert reputation(database, author) == 5  # was +20
    assert fork_count(database, original) == 1
    # Every fork still exists and is listed.
    forks = await client.get(f"/api/patterns/{original['id']}/forks")
    assert forks.json()["pagination"]["total"] == 4
    # A second forker is a second reward.
    await fork(client, await register(client, "Other"), original)
    assert reputation(database, author) == 10 and fork_count(database, original) == 2
    assert ledger_matches(database, author)


async def test_the_reward_goes_with_the_fork_and_returns_with_it_once(
    client: httpx.AsyncClient, database: str
) -> None:
    author, forker = await register(client, "Author"), await register(client, "Forker")
    original = await publish(client, author, title="Circuit breakers")
    first = await fork(client, forker, original)
    second = await fork(client, forker, original)
    assert reputation(database, author) == 5

    # One of the two forks archived: the other still holds the credit.
    response = await client.delete(f"/api/patterns/{first}", headers=forker.auth)
    assert response.status_code == 200, response.text
    assert reputation(database, author) == 5 and fork_count(database, original) == 1
    # Both archived: withdrawn (was: nothing undone).
    response = await client.delete(f"/api/patterns/{second}", headers=forker.auth)
    assert response.status_code == 200, response.text
    assert reputation(database, author) == 0 and fork_count(database, original) == 0

    # Republished (both): given back once.
    for fork_id in (first, second):
        response = await client.put(
            f"/api/patterns/{fork_id}", headers=forker.auth, json={"status": "published"}
        )
        assert response.status_code == 200, response.text
    assert reputation(database, author) == 5 and fork_count(database, original) == 1

    # Rejected by a moderator: withdrawn as well; approved again: back.
    moderator = await register(client, "Moderator")
    sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", moderator.agent_id)
    response = await client.delete(f"/api/patterns/{second}", headers=forker.auth)
    assert response.status_code == 200, response.text
    for action, expected in (("reject", 0), ("approve", 5)):
        response = await client.patch(
            "/api/moderation",
            headers=moderator.auth,
            json={"pattern_id": first, "action": action},
        )
        assert response.status_code == 200, response.text
        assert reputation(database, author) == expected
    assert ledger_matches(database, author)

    # The forker's account deleted: its forks go, and the credit with them.
    response = await client.delete(f"/api/agents/{forker.username}", headers=forker.auth)
    assert response.status_code == 200, response.text
    assert reputation(database, author) == 0 and fork_count(database, original) == 0
    assert ledger_matches(database, author)


async def test_concurrent_forks_by_one_agent_reward_once(
    client: httpx.AsyncClient, database: str
) -> None:
    author, farmer = await register(client, "Author"), await register(client, "Farmer")
    original = await publish(client, author, title="Idempotency keys")
    await asyncio.gather(*(fork(client, farmer, original) for _ in range(4)))
    assert reputation(database, author) == 5
    assert fork_count(database, original) == 1
    assert (
        scalar(database, "SELECT count(*) FROM patterns WHERE forked_from_id = %s", original["id"])
        == 4
    )
    assert ledger_matches(database, author)


async def test_repeated_forks_do_not_lift_the_popular_sort(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    adopted = await publish(client, author, title="Adopted by two agents")
    farmed = await publish(client, author, title="Farmed by one agent")  # newer: wins ties
    await fork(client, await register(client, "First User"), adopted)
    await fork(client, await register(client, "Second User"), adopted)
    farmer = await register(client, "Farmer")
    for _ in range(4):
        await fork(client, farmer, farmed)
    response = await client.get(
        "/api/patterns", params={"sort_by": "popular", "author_id": author.agent_id}
    )
    assert response.status_code == 200, response.text
    assert [p["title"] for p in response.json()["data"]] == [adopted["title"], farmed["title"]]


async def test_forking_your_own_pattern_earns_nothing_and_counts_once(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    original = await publish(client, author, title="Self forked")
    for _ in range(3):
        await fork(client, author, original)
    assert reputation(database, author) == 0
    assert fork_count(database, original) == 1


# Mail ------------------------------------------------------------------------------

TOKEN = re.compile(r"cairn_v_[A-Za-z0-9_-]{43}")


@pytest.fixture
async def mail_client(
    mail_app: FastAPI,  # noqa: F811 - the fixture imported above
    smtp: tuple[Mailbox, int],  # noqa: F811
) -> AsyncIterator[httpx.AsyncClient]:
    """The app with e-mail on (a real SMTP server)."""
    smtp[0].clear()
    mail_app.state.ctx.limiter = LocalRateLimiter()
    transport = httpx.ASGITransport(app=mail_app, client=(CLIENT_IP, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c
    await mail_app.state.ctx.dispatch.idle()


async def settle(client: httpx.AsyncClient) -> None:
    dispatch: LocalDispatch = client._transport.app.state.ctx.dispatch  # type: ignore[attr-defined]
    await dispatch.settle()


def mails_to(box: Mailbox, address: str) -> list[Any]:
    return [m for m in box.messages if address in m["To"]]


def token_in(box: Mailbox, address: str) -> str:
    """The token of the latest verification mail to ``address``."""
    found = [
        m for m in mails_to(box, address) if m["Subject"] == "[Cairn] Confirm your e-mail address"
    ]
    assert found, [m["Subject"] for m in box.messages]
    match = TOKEN.search(found[-1].get_content())
    assert match is not None
    return match.group(0)


async def verified_human(client: httpx.AsyncClient, box: Mailbox, name: str) -> Human:
    """A human signed up and verified through the real flow (mailed token)."""
    human = await sign_up(client, name)
    await settle(client)
    response = await client.post(
        "/api/humans/email/confirm", json={"token": token_in(box, human.email)}
    )
    assert response.status_code == 200, response.text
    return human


def as_target(human: Human) -> Registered:
    return Registered(human.agent_id, human.username, "", "")


def outbox_kinds(database: str) -> list[str]:
    import psycopg

    from storage.db import libpq_url

    with psycopg.connect(libpq_url(database)) as conn:
        rows = conn.execute(
            "SELECT coalesce(n.kind, 'verification') FROM mail_outbox m"
            " LEFT JOIN notifications n ON n.id = m.notification_id ORDER BY m.created_at"
        ).fetchall()
    return [r[0] for r in rows]


async def test_no_mail_to_an_unverified_address(
    mail_client: httpx.AsyncClient,
    database: str,
    smtp: tuple[Mailbox, int],  # noqa: F811
) -> None:
    box = smtp[0]
    # Anyone can sign up with someone else's address...
    victim = await sign_up(mail_client, "Mallory", email="victim@example.org")
    bot = await register(mail_client, "Owned Bot")
    sql(
        database,
        "UPDATE agents SET owner_id = %s, is_claimed = true WHERE id = %s",
        victim.agent_id,
        bot.agent_id,
    )
    fans = [await register(mail_client, f"Fan {i}") for i in range(3)]
    for fan in fans:
        for target in (as_target(victim), bot):
            response = await mail_client.post(
                f"/api/agents/{target.username}/follow", headers=fan.auth
            )
            assert response.status_code == 201, response.text
    await settle(mail_client)
    # ...the notifications exist, but the only mail is the one verification.
    assert scalar(database, "SELECT count(*) FROM notifications") == 6
    assert outbox_kinds(database) == ["verification"]
    (only,) = box.messages
    assert only["Subject"] == "[Cairn] Confirm your e-mail address"


async def test_verification_end_to_end(
    mail_client: httpx.AsyncClient,
    database: str,
    smtp: tuple[Mailbox, int],  # noqa: F811
) -> None:
    box = smtp[0]
    human = await sign_up(mail_client, "Grace")
    await settle(mail_client)
    token = token_in(box, human.email)
    # Only the keyed hash is stored; the token itself is nowhere in the database.
    from serve_app.kit.keys import hash_secret

    assert (
        scalar(
            database,
            "SELECT count(*) FROM email_verifications WHERE token_hash = %s",
            hash_secret(SECRET, token),
        )
        == 1
    )
    assert (
        scalar(
            database, "SELECT count(*) FROM mail_outbox WHERE to_address LIKE %s", "%" + token + "%"
        )
        == 0
    )

    fan = await register(mail_client, "Fan")
    response = await mail_client.post(f"/api/agents/{human.username}/follow", headers=fan.auth)
    assert response.status_code == 201
    await settle(mail_client)
    assert len(box.messages) == 1  # not verified yet: the follow is not mailed

    bad = await mail_client.post("/api/humans/email/confirm", json={"token": "cairn_v_" + "x" * 43})
    assert_error(bad, 400, "invalid_token")
    ok = await mail_client.post("/api/humans/email/confirm", json={"token": token})
    assert ok.status_code == 200, ok.text
    assert ok.json()["data"] == {
        "agent_id": human.agent_id,
        "email": human.email,
        "email_verified": True,
    }
    again = await mail_client.post("/api/humans/email/confirm", json={"token": token})
    assert_error(again, 400, "invalid_token")  # single use
    resend = await mail_client.post("/api/humans/me/email/verify", headers=human.auth)
    assert_error(resend, 409, "email_already_verified")

    # Verified: the next notice is mailed.
    other = await register(mail_client, "Other Fan")
    response = await mail_client.post(f"/api/agents/{human.username}/follow", headers=other.auth)
    assert response.status_code == 201
    await settle(mail_client)
    assert [m["Subject"] for m in box.messages][1:] == [
        f"[Cairn] @{other.username} started following you"
    ]

    # A changed address is unverified again, and gets nothing.
    sql(database, "UPDATE agents SET email = 'new@example.org' WHERE id = %s", human.agent_id)
    assert (
        scalar(database, "SELECT email_verified_at FROM agents WHERE id = %s", human.agent_id)
        is None
    )


async def test_verification_mail_is_throttled_and_expires(
    mail_client: httpx.AsyncClient,
    database: str,
    smtp: tuple[Mailbox, int],  # noqa: F811
) -> None:
    box = smtp[0]
    human = await sign_up(mail_client, "Grace")  # the first mail
    for _ in range(2):
        response = await mail_client.post("/api/humans/me/email/verify", headers=human.auth)
        assert response.status_code == 202, response.text
    response = await mail_client.post("/api/humans/me/email/verify", headers=human.auth)
    body = assert_error(response, 429)
    assert int(response.headers["Retry-After"]) > 0 and response.headers["X-RateLimit-Limit"] == "3"
    assert "verification" in body["message"]
    await settle(mail_client)
    assert len(mails_to(box, human.email)) == 3

    # A token past its expiry verifies nothing.
    token = token_in(box, human.email)
    sql(database, "UPDATE email_verifications SET expires_at = now() - interval '1 second'")
    assert_error(
        await mail_client.post("/api/humans/email/confirm", json={"token": token}),
        400,
        "invalid_token",
    )
    # A bot's key cannot ask for one.
    bot = await register(mail_client, "Bot")
    response = await mail_client.post("/api/humans/me/email/verify", headers=bot.auth)
    assert_error(response, 403, "human_required")


async def test_follow_unfollow_follow_is_one_notice_and_one_mail_a_day(
    mail_client: httpx.AsyncClient,
    database: str,
    smtp: tuple[Mailbox, int],  # noqa: F811
) -> None:
    box = smtp[0]
    human = await verified_human(mail_client, box, "Grace")
    box.clear()
    bomber = await register(mail_client, "Bomber")
    path = f"/api/agents/{human.username}/follow"
    for _ in range(5):
        assert (await mail_client.post(path, headers=bomber.auth)).status_code == 201
        assert (await mail_client.delete(path, headers=bomber.auth)).status_code == 200
    assert (await mail_client.post(path, headers=bomber.auth)).status_code == 201
    await settle(mail_client)
    assert (
        scalar(
            database,
            "SELECT count(*) FROM notifications WHERE recipient_id = %s AND kind = 'new_follower'",
            human.agent_id,
        )
        == 1
    )
    assert len(box.messages) == 1

    # Another follower is another notice; a day later the same one is news again.
    await mail_client.post(path, headers=(await register(mail_client, "Friend")).auth)
    sql(database, "UPDATE notice_throttle SET last_at = last_at - interval '25 hours'")
    assert (await mail_client.delete(path, headers=bomber.auth)).status_code == 200
    assert (await mail_client.post(path, headers=bomber.auth)).status_code == 201
    await settle(mail_client)
    assert len(box.messages) == 3


async def test_comments_stay_notices_but_mail_is_one_a_day_per_commenter(
    mail_client: httpx.AsyncClient,
    database: str,
    smtp: tuple[Mailbox, int],  # noqa: F811
) -> None:
    box = smtp[0]
    human = await verified_human(mail_client, box, "Grace")
    bot = await register(mail_client, "Owned Bot")
    sql(
        database,
        "UPDATE agents SET owner_id = %s, is_claimed = true WHERE id = %s",
        human.agent_id,
        bot.agent_id,
    )
    box.clear()
    pattern = await publish(mail_client, bot, title="Commented a lot")
    chatty = await register(mail_client, "Chatty")
    for i in range(4):
        response = await mail_client.post(
            f"/api/patterns/{pattern['id']}/comments",
            headers=chatty.auth,
            json={"content": f"Comment number {i} {uuid.uuid4()}"},
        )
        assert response.status_code == 201, response.text
    await settle(mail_client)
    assert (
        scalar(database, "SELECT count(*) FROM notifications WHERE kind = 'pattern_comment'") == 4
    )
    assert len(box.messages) == 1
