"""E-mail delivery against a real SMTP server (aiosmtpd, started here): the
outbox is filled in the notification's transaction, the dispatcher sends it,
retries what may succeed later, gives up on refusals, and never sends one
message twice."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from actors.dispatch.dispatcher import Dispatcher
from serve_app.app import create_app
from serve_app.runtime.dispatch import LocalDispatch, dispatch_config
from serve_app.runtime.ratelimit import LocalRateLimiter
from serve_app.settings import Settings
from storage.db import make_engine, make_sessionmaker
from storage.repositories import notifications as notification_repo
from tests.api.conftest import (
    CLIENT_IP,
    SECRET,
    Registered,
    make_settings,
    register,
    scalar,
    sign_up,
)
from tests.api.test_notifications import follow, one, seed_followers
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask
from tests.mailbox import Mailbox, free_port, running_smtp


@pytest.fixture(scope="module")
def smtp() -> Iterator[tuple[Mailbox, int]]:
    with running_smtp() as server:
        yield server


@pytest.fixture(scope="module")
def mail_settings(smtp: tuple[Mailbox, int]) -> Settings:
    return make_settings(
        smtp_url=f"smtp://127.0.0.1:{smtp[1]}",
        mail_from="Cairn <cairn@cairn.example>",
        mail_retry_base_s=0,
        mail_max_attempts=3,
    )


@pytest.fixture(scope="module")
async def mail_app(database: str, mail_settings: Settings) -> AsyncIterator[FastAPI]:
    application = create_app(mail_settings, database_url=database, secret=SECRET, pool_size=5)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(mail_app: FastAPI, smtp: tuple[Mailbox, int]) -> AsyncIterator[httpx.AsyncClient]:
    """This module's client: the app with e-mail on."""
    smtp[0].clear()
    mail_app.state.ctx.limiter = LocalRateLimiter()
    transport = httpx.ASGITransport(app=mail_app, client=(CLIENT_IP, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c
    await mail_app.state.ctx.dispatch.idle()


def local(client: httpx.AsyncClient) -> LocalDispatch:
    found: LocalDispatch = client._transport.app.state.ctx.dispatch  # type: ignore[attr-defined]
    return found


def human(database: str, name: str, email: str) -> str:
    """A signed-up human whose address is verified (written straight to the
    table; tests/security/test_reputation_and_mail.py verifies through the
    real flow, and shows that an unverified address gets no mail)."""
    human_id = str(uuid.uuid4())
    sql(
        database,
        "INSERT INTO agents (id, username, name, display_name, is_human, email,"
        " email_verified_at) VALUES (%s, %s, %s, %s, true, %s, now())",
        human_id,
        name.lower(),
        name,
        name,
        email,
    )
    return human_id


def claim(database: str, bot_id: str, human_id: str) -> None:
    sql(
        database,
        "UPDATE agents SET owner_id = %s, is_claimed = true, claimed_at = now() WHERE id = %s",
        human_id,
        bot_id,
    )


async def queue_follower_mail(database: str, recipient: str, follower: str) -> None:
    """A new-follower notification with its outbox row, as a request would write them."""
    engine = make_engine(database, pool_size=1, max_overflow=0)
    try:
        async with make_sessionmaker(engine)() as session:
            await notification_repo.add(
                session,
                [
                    {
                        "recipient_id": uuid.UUID(recipient),
                        "kind": "new_follower",
                        "actor_id": uuid.UUID(follower),
                        "target_type": "agent",
                        "target_id": uuid.UUID(follower),
                        "target_title": "Fan",
                        "target_slug": "fan",
                    }
                ],
                mail=True,
                # Each call is a message of its own here: no daily throttle
                # (tests/security/test_reputation_and_mail.py tests it).
                throttle_s=0,
            )
            await session.commit()
    finally:
        await engine.dispose()


def outbox(database: str) -> list[tuple[Any, ...]]:
    import psycopg

    from storage.db import libpq_url

    with psycopg.connect(libpq_url(database)) as conn:
        return conn.execute(
            "SELECT m.to_address, n.kind, m.status, m.attempts, m.last_error, m.id"
            " FROM mail_outbox m JOIN notifications n ON n.id = m.notification_id"
            " ORDER BY m.created_at, m.to_address"
        ).fetchall()


async def test_mail_to_a_human_and_for_a_claimed_bot(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int]
) -> None:
    box = smtp[0]
    owner = human(database, "Grace", "grace@example.org")
    bot = await register(client, "Owned Bot")
    claim(database, bot.agent_id, owner)
    fan, loner = await register(client, "Fan"), await register(client, "Loner")

    # Someone follows the human: mail to her own address.
    response = await client.post("/api/agents/grace/follow", headers=fan.auth)
    assert response.status_code == 201, response.text
    # A comment on the bot's pattern: mail to the human who claimed it.
    pattern = await publish(client, bot, title="Idempotent webhooks")
    response = await client.post(
        f"/api/patterns/{pattern['id']}/comments",
        headers=fan.auth,
        json={"content": "Keyed on the delivery id?"},
    )
    assert response.status_code == 201, response.text
    # In-app only: an answer on the bot's question; nothing for an unclaimed bot.
    question = await ask(client, bot)
    await answer(client, fan, question["slug"])
    await follow(client, fan, loner)
    await local(client).settle()

    rows = outbox(database)
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("grace@example.org", "new_follower", "sent", 1),
        ("grace@example.org", "pattern_comment", "sent", 1),
    ]
    assert len(box.messages) == 2
    by_id = {m["Message-ID"]: m for m in box.messages}
    follow_mail = by_id[f"<{rows[0][5]}@cairn>"]
    assert follow_mail["To"] == "Grace <grace@example.org>"
    assert follow_mail["From"] == "Cairn <cairn@cairn.example>"
    assert follow_mail["Subject"] == f"[Cairn] @{fan.username} started following you"
    comment_mail = by_id[f"<{rows[1][5]}@cairn>"]
    assert comment_mail["To"] == "grace@example.org"
    assert comment_mail["Subject"] == (
        f"[Cairn] @{fan.username} commented on your pattern \u201cIdempotent webhooks\u201d"
    )
    text = comment_mail.get_content()
    assert f"For your agent @{bot.username}:" in text
    assert f"https://cairn.example/patterns/{pattern['slug']}" in text


async def test_preferences_decide_what_is_mailed(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int]
) -> None:
    owner = human(database, "Grace", "grace@example.org")
    bot = await register(client, "Owned Bot")
    claim(database, bot.agent_id, owner)
    fan = await register(client, "Fan")
    response = await client.put(
        "/api/notifications/email", headers=bot.auth, json={"comment_on_pattern": False}
    )
    assert response.status_code == 200, response.text
    pattern = await publish(client, bot)
    response = await client.post(
        f"/api/patterns/{pattern['id']}/comments", headers=fan.auth, json={"content": "Nice."}
    )
    assert response.status_code == 201
    await follow(client, fan, bot)
    await local(client).settle()
    # The comment is still a notification, just not an e-mail.
    assert (
        scalar(database, "SELECT count(*) FROM notifications WHERE kind = 'pattern_comment'") == 1
    )
    assert [(r[1], r[2]) for r in outbox(database)] == [("new_follower", "sent")]
    assert len(smtp[0].messages) == 1


async def test_moderation_decision_mail(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int]
) -> None:
    owner = human(database, "Grace", "grace@example.org")
    bot, mod = await register(client, "Owned Bot"), await register(client, "Moderator")
    claim(database, bot.agent_id, owner)
    sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", mod.agent_id)
    pattern = await publish(client, bot, title="Scraping without asking")
    response = await client.patch(
        "/api/moderation",
        headers=mod.auth,
        json={"pattern_id": pattern["id"], "action": "reject", "notes": "Breaks site terms."},
    )
    assert response.status_code == 200, response.text
    await local(client).settle()
    (mail,) = smtp[0].messages
    assert mail["To"] == "grace@example.org"
    assert mail["Subject"] == (
        "[Cairn] Your pattern \u201cScraping without asking\u201d was rejected by a moderator"
    )


async def test_a_key_issued_for_a_bot_is_mailed_to_its_human(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int]
) -> None:
    """Issue 45: a new API key issued for a bot (key recovery) is mailed to
    its human's verified address every time, whatever their preferences."""
    owner = await sign_up(client, "Keyholder", email="keyholder@example.org")
    sql(database, "UPDATE agents SET email_verified_at = now() WHERE id = %s", owner.agent_id)
    switches = ("new_pattern_from_followed", "comment_on_pattern", "new_follower")
    off = {name: False for name in (*switches, "moderation_decision")}
    response = await client.put("/api/notifications/email", headers=owner.auth, json=off)
    assert response.status_code == 200, response.text
    bot = await register(client, "Keyed Bot")
    claim(database, bot.agent_id, owner.agent_id)
    path = f"/api/agents/claim/{bot.agent_id}/api-key"
    for _ in range(2):
        issued = await client.post(path, headers=owner.auth)
        assert issued.status_code == 200, issued.text
    await local(client).settle()
    rows = [r for r in outbox(database) if r[1] == "api_key_issued"]
    assert [(r[0], r[2]) for r in rows] == [("keyholder@example.org", "sent")] * 2
    mails = [m for m in smtp[0].messages if "API key" in m["Subject"]]
    assert len(mails) == 2
    assert mails[0]["To"] == "Keyholder <keyholder@example.org>"
    assert mails[0]["Subject"] == (
        "[Cairn] A new API key was issued for your agent \u201cKeyed Bot\u201d; "
        "its previous key no longer works"
    )
    text = mails[0].get_content()
    assert "whatever your notification settings" in text
    assert f"https://cairn.example/agents/{bot.username}" in text
    assert issued.json()["data"]["api_key"] not in text


async def test_new_pattern_mail_through_the_fanout(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int]
) -> None:
    owner = human(database, "Grace", "grace@example.org")
    star, bot = await register(client, "Star"), await register(client, "Owned Bot")
    claim(database, bot.agent_id, owner)
    await follow(client, bot, star)
    seed_followers(database, star, 50)
    pattern = await publish(client, star, title="Backpressure for agents")
    await local(client).settle()
    assert scalar(database, "SELECT count(*) FROM notifications WHERE kind = 'new_pattern'") == 51
    assert [(r[0], r[1], r[2]) for r in outbox(database)] == [
        ("grace@example.org", "new_pattern", "sent")
    ]
    (mail,) = smtp[0].messages
    assert mail["Subject"] == (
        f"[Cairn] @{star.username} published a new pattern: \u201cBackpressure for agents\u201d"
    )
    assert pattern["slug"] in mail.get_content()


async def test_a_temporary_failure_is_retried(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int]
) -> None:
    box = smtp[0]
    human(database, "Grace", "grace@example.org")
    box.fail_data.append("451 4.3.0 Try again later")
    await follow(client, await register(client, "Fan"), human_target(database))
    await local(client).settle()
    (row,) = outbox(database)
    assert row[2:5] == ("sent", 2, None)  # the first try failed, the second went out
    assert len(box.messages) == 1


def human_target(database: str) -> Registered:
    """The human as a follow target (only its username is used)."""
    username = scalar(database, "SELECT username FROM agents WHERE is_human LIMIT 1")
    return Registered(agent_id="", username=username, api_key="", claim_code="")


async def test_a_refusal_is_final(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int]
) -> None:
    box = smtp[0]
    human(database, "Grace", "nobody@example.org")
    box.refuse.add("nobody@example.org")
    await follow(client, await register(client, "Fan"), human_target(database))
    await local(client).settle()
    await local(client).settle()
    (row,) = outbox(database)
    assert row[2:4] == ("failed", 1)
    assert "550" in row[4]
    assert box.messages == []


async def test_server_down_then_back(
    client: httpx.AsyncClient,
    database: str,
    smtp: tuple[Mailbox, int],
    mail_settings: Settings,
) -> None:
    """Unreachable: retried with backoff, then given up after the last attempt;
    a message still within its attempts goes out once the server answers.
    (The mail is queued straight through the repository, so that the app's
    own dispatcher, which reaches the server, stays out of it.)"""
    grace = human(database, "Grace", "grace@example.org")
    fan = await register(client, "Fan")
    dead = mail_settings.model_copy(
        update={"smtp_url": SecretStr(f"smtp://127.0.0.1:{free_port()}"), "mail_retry_base_s": 0.3}
    )
    down = Dispatcher(dispatch_config(dead, database, SECRET))
    try:
        await queue_follower_mail(database, grace, fan.agent_id)
        await down.drain()
        (row,) = outbox(database)
        assert row[2] == "pending" and row[3] >= 1 and "Connection refused" in row[4]
        pending_id = row[5]
    finally:
        await down.close()
    up = Dispatcher(dispatch_config(mail_settings, database, SECRET))
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while one(database, "SELECT status FROM mail_outbox WHERE id = %s", pending_id) != (
            "sent",
        ):
            assert asyncio.get_running_loop().time() < deadline, outbox(database)
            await up.drain()
            await asyncio.sleep(0.1)
    finally:
        await up.close()
    assert len(smtp[0].messages) == 1

    # All attempts used up while the server is away: failed for good.
    out_of_tries = Dispatcher(
        dispatch_config(dead.model_copy(update={"mail_retry_base_s": 0}), database, SECRET)
    )
    try:
        await queue_follower_mail(database, grace, fan.agent_id)
        await out_of_tries.drain()
    finally:
        await out_of_tries.close()
    last = outbox(database)[-1]
    assert last[2:4] == ("failed", 3)


async def test_no_message_is_sent_twice(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int], mail_settings: Settings
) -> None:
    """Four workers drain one outbox of 60 messages at once: each goes out once."""
    owner = human(database, "Grace", "grace@example.org")
    star = await register(client, "Star")
    seed_followers(database, star, 60, prefix="bot")
    sql(
        database,
        "UPDATE agents SET owner_id = %s, is_claimed = true WHERE username LIKE 'bot%%'",
        owner,
    )
    workers = [Dispatcher(dispatch_config(mail_settings, database, SECRET)) for _ in range(3)]
    try:
        await publish(client, star)
        await asyncio.gather(local(client).settle(), *(w.drain() for w in workers))
    finally:
        for worker in workers:
            await worker.close()
    rows = outbox(database)
    assert len(rows) == 60 and {r[2] for r in rows} == {"sent"} and {r[3] for r in rows} == {1}
    ids = [m["Message-ID"] for m in smtp[0].messages]
    assert len(ids) == 60 and set(ids) == {f"<{r[5]}@cairn>" for r in rows}


async def test_one_message_that_cannot_be_built_stops_no_other(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int]
) -> None:
    """An address Cairn cannot write (non-ASCII: no SMTPUTF8; sign-up refuses
    it now, an older row may hold one) fails its own message for good; the
    batch and the queue behind it go on. A title holding characters Python
    reads as line breaks (an older row's) is put on one line in the subject."""
    box = smtp[0]
    fan = await register(client, "Fan")
    odd = human(database, "Jose", "josé@example.org")
    fine = human(database, "Grace", "grace@example.org")
    await queue_follower_mail(database, odd, fan.agent_id)
    await queue_follower_mail(database, fine, fan.agent_id)
    owner_bot = await register(client, "Owned Bot")
    claim(database, owner_bot.agent_id, fine)
    pattern = await publish(client, owner_bot, title="Retry with jitter, capped")
    # A title from before one-line fields refused U+2028 (now a 400).
    sql(
        database,
        "UPDATE patterns SET title = %s WHERE id = %s",
        "Retry\u2028with jitter, capped",
        pattern["id"],
    )
    response = await client.post(
        f"/api/patterns/{pattern['id']}/comments", headers=fan.auth, json={"content": "Nice."}
    )
    assert response.status_code == 201
    await local(client).settle()
    rows = {(r[0], r[1]): r for r in outbox(database)}
    failed = rows[("josé@example.org", "new_follower")]
    assert failed[2] == "failed" and "not composed" in failed[4]
    assert rows[("grace@example.org", "new_follower")][2] == "sent"
    assert rows[("grace@example.org", "pattern_comment")][2] == "sent"
    subjects = [m["Subject"] for m in box.messages]
    assert len(subjects) == 2 and any("Retry with jitter" in s for s in subjects)


async def test_mail_turned_off_before_it_went_is_not_sent(
    client: httpx.AsyncClient, database: str, smtp: tuple[Mailbox, int]
) -> None:
    """A message waits (a retry can wait an hour); if its recipient turns that
    kind of mail off, or is deactivated, meanwhile, it does not go."""
    fan = await register(client, "Fan")
    grace = human(database, "Grace", "grace@example.org")
    ada = human(database, "Ada", "ada@example.org")
    await queue_follower_mail(database, grace, fan.agent_id)
    await queue_follower_mail(database, ada, fan.agent_id)
    sql(
        database,
        "INSERT INTO email_preferences (agent_id, new_follower) VALUES (%s, false)",
        grace,
    )
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", ada)
    await local(client).settle()
    rows = outbox(database)
    assert {r[2] for r in rows} == {"failed"} and all("no longer wanted" in r[4] for r in rows)
    assert smtp[0].messages == []
