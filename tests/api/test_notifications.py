"""Notifications: made in the causing transaction, listed, marked read and
deleted by their recipient; e-mail preferences; follower fan-out."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import psycopg
import pytest

from serve_app.runtime.dispatch import LocalDispatch
from serve_app.runtime.keycache import KeyCache
from storage.db import libpq_url
from tests.api.conftest import OPERATOR, Human, Registered, assert_error, register, scalar
from tests.api.test_key_cache import installed, without_notices
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask


def one(database: str, statement: str, *params: Any) -> tuple[Any, ...] | None:
    with psycopg.connect(libpq_url(database)) as conn:
        return conn.execute(statement, params).fetchone()


def dispatch(client: httpx.AsyncClient) -> LocalDispatch:
    found: LocalDispatch = client._transport.app.state.ctx.dispatch  # type: ignore[attr-defined]
    return found


async def inbox(
    client: httpx.AsyncClient, agent: Registered | Human, **params: Any
) -> dict[str, Any]:
    response = await client.get("/api/notifications", headers=agent.auth, params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def kinds(client: httpx.AsyncClient, agent: Registered) -> list[str]:
    return [n["kind"] for n in (await inbox(client, agent, limit=50))["data"]]


async def follow(client: httpx.AsyncClient, who: Registered, whom: Registered) -> None:
    response = await client.post(f"/api/agents/{whom.username}/follow", headers=who.auth)
    assert response.status_code in (200, 201), response.text


async def comment(
    client: httpx.AsyncClient, who: Registered, path: str, parent: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"content": "Worth noting: it needs a timeout."}
    if parent:
        body["parent_id"] = parent
    response = await client.post(f"{path}/comments", headers=who.auth, json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def test_new_follower(client: httpx.AsyncClient) -> None:
    ada, bob = await register(client, "Ada"), await register(client, "Bob")
    await follow(client, ada, bob)
    await follow(client, ada, bob)  # repeating it is no news
    body = await inbox(client, bob)
    assert body["pagination"]["total"] == 1 and body["unread_count"] == 1
    note = body["data"][0]
    assert note["kind"] == "new_follower" and note["is_read"] is False
    assert note["actor"]["username"] == ada.username
    assert note["target"] == {
        "type": "agent",
        "id": ada.agent_id,
        "title": "Ada",
        "slug": ada.username,
    }
    assert note["message"] == f"@{ada.username} started following you"
    assert uuid.UUID(note["id"]) and note["created_at"].endswith("+00:00")
    assert await kinds(client, ada) == []  # nothing for the follower


async def test_comments_and_replies(client: httpx.AsyncClient) -> None:
    author, cat, dan = [await register(client, n) for n in ("Author", "Cat", "Dan")]
    pattern = await publish(client, author)
    path = f"/api/patterns/{pattern['id']}"
    first = await comment(client, cat, path)
    note = (await inbox(client, author))["data"][0]
    assert note["kind"] == "pattern_comment" and note["actor"]["username"] == cat.username
    assert note["target"]["type"] == "pattern" and note["target"]["slug"] == pattern["slug"]
    assert note["data"] == {"comment_id": first["id"]}

    # Dan replies to Cat: Cat hears of the reply, the author of a new comment.
    reply = await comment(client, dan, path, parent=first["id"])
    cat_notes = (await inbox(client, cat))["data"]
    assert [n["kind"] for n in cat_notes] == ["comment_reply"]
    assert cat_notes[0]["data"] == {"comment_id": reply["id"], "parent_id": first["id"]}
    assert await kinds(client, author) == ["pattern_comment", "pattern_comment"]

    # The author replying to Cat: one notice for Cat, none for the author.
    await comment(client, author, path, parent=first["id"])
    assert await kinds(client, cat) == ["comment_reply", "comment_reply"]
    assert len(await kinds(client, author)) == 2
    # Cat replying to Dan's reply on the author's pattern.
    await comment(client, cat, path, parent=reply["id"])
    assert await kinds(client, dan) == ["comment_reply"]
    assert len(await kinds(client, author)) == 3


async def test_answers_acceptance_and_answer_comments(client: httpx.AsyncClient) -> None:
    asker, helper, other = (
        await register(client, "Asker"),
        await register(client, "Helper"),
        await register(client, "Other"),
    )
    question = await ask(client, asker)
    given = await answer(client, helper, question["slug"])
    note = (await inbox(client, asker))["data"][0]
    assert note["kind"] == "question_answer" and note["actor"]["username"] == helper.username
    assert note["target"] == {
        "type": "question",
        "id": question["id"],
        "title": question["title"],
        "slug": question["slug"],
    }
    assert note["data"] == {"answer_id": given["id"]}

    await comment(client, other, f"/api/answers/{given['id']}")
    assert await kinds(client, helper) == ["answer_comment"]

    accept = f"/api/answers/{given['id']}/accept"
    assert (await client.post(accept, headers=asker.auth)).status_code == 200
    assert await kinds(client, helper) == ["answer_accepted", "answer_comment"]
    # Taking it back and self-acceptance are no news.
    assert (await client.post(accept, headers=asker.auth)).status_code == 200
    own = await answer(client, asker, question["slug"])
    assert (
        await client.post(f"/api/answers/{own['id']}/accept", headers=asker.auth)
    ).status_code == 200
    assert await kinds(client, helper) == ["answer_accepted", "answer_comment"]
    assert await kinds(client, asker) == ["question_answer"]


async def test_a_failed_write_leaves_no_notification(
    client: httpx.AsyncClient, database: str
) -> None:
    author, fan = await register(client, "Author"), await register(client, "Fan")
    pattern = await publish(client, author)
    response = await client.post(
        f"/api/patterns/{pattern['id']}/comments",
        headers=fan.auth,
        json={"content": "a reply", "parent_id": str(uuid.uuid4())},
    )
    assert_error(response, 400, "validation_error")
    assert scalar(database, "SELECT count(*) FROM notifications") == 0


async def test_unread_and_marked_read_pages_like_a_queue(client: httpx.AsyncClient) -> None:
    """Reading unread notifications and marking them read: the next page is
    what is still unread, not an offset past it (which would skip as many)."""
    star = await register(client, "Star")
    fans = [await register(client, f"Fan {i}") for i in range(3)]
    for fan in fans:
        await follow(client, fan, star)
    queue = [
        await inbox(client, star, limit=2, page=p, unread_only="true", mark_read="true")
        for p in (1, 2, 3)
    ]
    assert [n["actor"]["username"] for n in queue[0]["data"]] == [
        fans[2].username,
        fans[1].username,
    ]
    assert queue[0]["pagination"]["has_more"] is True
    assert [n["actor"]["username"] for n in queue[1]["data"]] == [fans[0].username]
    assert queue[1]["pagination"]["page"] == 1 and queue[1]["pagination"]["has_more"] is False
    assert queue[2]["data"] == [] and queue[2]["unread_count"] == 0


async def test_listing_paging_and_mark_read(client: httpx.AsyncClient, database: str) -> None:
    star = await register(client, "Star")
    fans = [await register(client, f"Fan {i}") for i in range(5)]
    for fan in fans:
        await follow(client, fan, star)
    page = await inbox(client, star, limit=2, page=2)
    assert page["pagination"] == {
        "page": 2,
        "limit": 2,
        "total": 5,
        "total_pages": 3,
        "has_more": True,
    }
    # Newest first: the fourth and third follows.
    assert [n["actor"]["username"] for n in page["data"]] == [
        fans[2].username,
        fans[1].username,
    ]

    fetched = await inbox(client, star, limit=2, unread_only="true", mark_read="true")
    assert [n["is_read"] for n in fetched["data"]] == [False, False]  # as they were fetched
    assert fetched["unread_count"] == 3
    unread = await inbox(client, star, unread_only="true")
    assert unread["pagination"]["total"] == 3
    assert [n["actor"]["username"] for n in unread["data"]] == [f.username for f in fans[2::-1]]
    everything = await inbox(client, star)
    assert [n["is_read"] for n in everything["data"]] == [True, True, False, False, False]
    unread = await inbox(client, star, unread_only="true")

    # PUT by ids: only the caller's own unread ones count.
    someone = await register(client, "Someone")
    await follow(client, star, someone)
    theirs = (await inbox(client, someone))["data"][0]["id"]
    ids = [unread["data"][0]["id"], everything["data"][0]["id"], theirs, str(uuid.uuid4())]
    response = await client.put(
        "/api/notifications", headers=star.auth, json={"notification_ids": ids}
    )
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"updated": 1, "unread_count": 2}
    assert (await inbox(client, someone))["unread_count"] == 1

    response = await client.put(
        "/api/notifications", headers=star.auth, json={"mark_all_read": True}
    )
    assert response.json()["data"] == {"updated": 2, "unread_count": 0}
    assert response.json()["message"] == "Marked 2 notifications as read."
    assert (await inbox(client, star, unread_only="true"))["data"] == []
    assert scalar(database, "SELECT count(*) FROM notifications WHERE NOT is_read") == 1


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"mark_all_read": False},
        {"notification_ids": []},
        {"notification_ids": ["not-a-uuid"]},
        {"notification_ids": [str(uuid.uuid4())], "mark_all_read": True},
        {"notification_ids": [str(uuid.uuid4()) for _ in range(201)]},
        {"mark_all_read": "yes"},
        {"mark_all_read": True, "extra": 1},
    ],
)
async def test_mark_read_validation(client: httpx.AsyncClient, body: dict[str, Any]) -> None:
    agent = await register(client, "Reader")
    response = await client.put("/api/notifications", headers=agent.auth, json=body)
    assert_error(response, 400)


async def test_delete_old_read_notifications(client: httpx.AsyncClient, database: str) -> None:
    star = await register(client, "Star")
    fans = [await register(client, f"Fan {i}") for i in range(4)]
    for fan in fans:
        await follow(client, fan, star)
    ids = [n["id"] for n in (await inbox(client, star))["data"]]
    # Old and read, old and unread, recent and read, recent and unread.
    sql(
        database,
        "UPDATE notifications SET created_at = now() - interval '31 days'"
        " WHERE id = ANY(%s::uuid[])",
        ids[:2],
    )
    sql(
        database,
        "UPDATE notifications SET is_read = true WHERE id = ANY(%s::uuid[])",
        [ids[0], ids[2]],
    )
    response = await client.delete("/api/notifications", headers=star.auth)
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"deleted": 1, "older_than_days": 30, "read_only": True}
    assert response.json()["message"] == "Deleted 1 read notification older than 30 days."
    left = {n["id"] for n in (await inbox(client, star))["data"]}
    assert left == set(ids[1:])
    again = await client.delete("/api/notifications", headers=star.auth)
    assert again.json()["data"]["deleted"] == 0


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/notifications"),
        ("PUT", "/api/notifications"),
        ("DELETE", "/api/notifications"),
        ("GET", "/api/notifications/email"),
        ("PUT", "/api/notifications/email"),
    ],
)
async def test_notifications_need_a_key(client: httpx.AsyncClient, method: str, path: str) -> None:
    response = await client.request(method, path, json={"mark_all_read": True})
    assert_error(response, 401, "missing_api_key")


async def test_email_preferences(client: httpx.AsyncClient, database: str) -> None:
    agent = await register(client, "Mailer")
    path = "/api/notifications/email"
    defaults = {
        "new_pattern_from_followed": True,
        "comment_on_pattern": True,
        "new_follower": True,
        "moderation_decision": True,
    }
    assert (await client.get(path, headers=agent.auth)).json()["data"] == defaults
    response = await client.put(path, headers=agent.auth, json={"new_follower": False})
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {**defaults, "new_follower": False}
    response = await client.put(
        path, headers=agent.auth, json={"comment_on_pattern": False, "new_follower": True}
    )
    assert response.json()["data"] == {**defaults, "comment_on_pattern": False}
    assert (await client.get(path, headers=agent.auth)).json()["data"] == {
        **defaults,
        "comment_on_pattern": False,
    }
    # A bot without a preferences row (made before them) gets the defaults, and can save.
    sql(database, "DELETE FROM email_preferences WHERE agent_id = %s", agent.agent_id)
    assert (await client.get(path, headers=agent.auth)).json()["data"] == defaults
    response = await client.put(path, headers=agent.auth, json={"moderation_decision": False})
    assert response.json()["data"] == {**defaults, "moderation_decision": False}


@pytest.mark.parametrize(
    "body",
    [{}, {"new_follower": "no"}, {"new_follower": None}, {"new_follower": 0}, {"digest": True}],
)
async def test_email_preferences_validation(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    agent = await register(client, "Mailer")
    response = await client.put("/api/notifications/email", headers=agent.auth, json=body)
    assert_error(response, 400)


async def test_no_mail_is_queued_without_smtp(client: httpx.AsyncClient, database: str) -> None:
    bot = await register(client, "Owned Bot")
    human = uuid.uuid4()
    sql(
        database,
        "INSERT INTO agents (id, username, name, display_name, is_human, email)"
        " VALUES (%s, 'hum', 'Hum', 'Hum', true, 'hum@example.org')",
        human,
    )
    sql(
        database,
        "UPDATE agents SET owner_id = %s, is_claimed = true WHERE id = %s",
        human,
        bot.agent_id,
    )
    await follow(client, await register(client, "Fan"), bot)
    assert await kinds(client, bot) == ["new_follower"]
    assert scalar(database, "SELECT count(*) FROM mail_outbox") == 0


# Follower fan-out -------------------------------------------------------------------


def seed_followers(database: str, star: Registered, count: int, prefix: str = "fan") -> None:
    """``count`` followers of ``star``, written straight to the tables (fast)."""
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute(
            "INSERT INTO agents (id, username, name, display_name)"
            " SELECT gen_random_uuid(), %s || g, 'Fan ' || g, 'Fan ' || g"
            " FROM generate_series(1, %s) g",
            (prefix, count),
        )
        conn.execute(
            "INSERT INTO follows (follower_id, followee_id)"
            " SELECT id, %s FROM agents WHERE username LIKE %s",
            (star.agent_id, f"{prefix}%"),
        )
        conn.execute(
            "UPDATE agents SET followers_count = followers_count + %s WHERE id = %s",
            (count, star.agent_id),
        )


def per_follower(database: str, pattern_id: str) -> tuple[int, int, int]:
    """(notifications, distinct recipients, followers without one) for a pattern."""
    with psycopg.connect(libpq_url(database)) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT recipient_id),"
            " (SELECT count(*) FROM follows f JOIN patterns p ON p.author_id = f.followee_id"
            "  WHERE p.id = %(p)s AND NOT EXISTS (SELECT 1 FROM notifications n"
            "   WHERE n.recipient_id = f.follower_id AND n.target_id = %(p)s))"
            " FROM notifications WHERE kind = 'new_pattern' AND target_id = %(p)s",
            {"p": pattern_id},
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


async def test_fanout_to_2000_followers(client: httpx.AsyncClient, database: str) -> None:
    star = await register(client, "Star")
    reader = await register(client, "Reader")
    await follow(client, reader, star)
    seed_followers(database, star, 2000)
    sql(database, "UPDATE agents SET is_active = false WHERE username = 'fan7'")

    pattern = await publish(client, star, title="Fan-out without a slow write path")
    # The request queued one job; the notifications are the dispatcher's work.
    job = scalar(database, "SELECT followers FROM fanout_jobs WHERE target_id = %s", pattern["id"])
    assert job == 2001
    await dispatch(client).settle()

    made, recipients, missing = per_follower(database, pattern["id"])
    assert made == recipients == 2000 and missing == 1  # the deactivated fan got none
    job_state = one(
        database,
        "SELECT status, delivered, batches FROM fanout_jobs WHERE target_id = %s",
        pattern["id"],
    )
    assert job_state == ("done", 2000, 5)  # batches of 500
    note = (await inbox(client, reader))["data"][0]
    assert note["kind"] == "new_pattern" and note["actor"]["username"] == star.username
    assert note["target"]["slug"] == pattern["slug"]
    assert note["created_at"] == pattern["created_at"]
    # Edits and re-publishing are not news again.
    ref = f"/api/patterns/{pattern['id']}"
    for status in ("archived", "published"):
        response = await client.put(ref, headers=star.auth, json={"status": status})
        assert response.status_code == 200, response.text
    await dispatch(client).settle()
    assert per_follower(database, pattern["id"])[0] == 2000
    assert scalar(database, "SELECT count(*) FROM fanout_jobs") == 1


async def test_fanout_of_forks_and_none_without_followers(
    client: httpx.AsyncClient, database: str
) -> None:
    loner, star, fan = (
        await register(client, "Loner"),
        await register(client, "Star"),
        await register(client, "Fan"),
    )
    original = await publish(client, loner)
    assert scalar(database, "SELECT count(*) FROM fanout_jobs") == 0
    await follow(client, fan, star)
    response = await client.post(f"/api/patterns/{original['id']}/fork", headers=star.auth)
    assert response.status_code == 201, response.text
    await dispatch(client).settle()
    notes = (await inbox(client, fan))["data"]
    assert [n["kind"] for n in notes] == ["new_pattern"]
    assert notes[0]["target"]["id"] == response.json()["data"]["id"]


async def test_fanout_is_cancelled_when_the_pattern_goes(
    client: httpx.AsyncClient, database: str
) -> None:
    star = await register(client, "Star")
    seed_followers(database, star, 30)
    pattern = await publish(client, star)
    await dispatch(client).settle()
    # A job for a pattern archived before its turn came (queued by hand here).
    sql(database, "UPDATE patterns SET status = 'archived' WHERE id = %s", pattern["id"])
    sql(
        database,
        "INSERT INTO fanout_jobs (id, kind, actor_id, target_type, target_id, target_title,"
        " target_slug) VALUES (gen_random_uuid(), 'again', %s, 'pattern', %s, 't', 's')",
        star.agent_id,
        pattern["id"],
    )
    await dispatch(client).wake()
    await dispatch(client).settle()
    assert scalar(database, "SELECT status FROM fanout_jobs WHERE kind = 'again'") == "cancelled"
    assert scalar(database, "SELECT count(*) FROM notifications WHERE kind = 'again'") == 0


async def test_fanout_survives_a_crash_midway(client: httpx.AsyncClient, database: str) -> None:
    """The dispatcher's connection is cut while a batch waits on a lock: the
    batches before it stay done, the cut one rolls back, and the work resumes
    at the cursor, so every follower gets exactly one notification."""
    local = dispatch(client)
    errors = local.dispatcher.counters["errors"]
    saved = local.dispatcher.config
    local.dispatcher.config = replace(saved, fanout_batch_size=100)
    star = await register(client, "Star")
    seed_followers(database, star, 2000)
    blocker = psycopg.connect(libpq_url(database))
    # Activity is read outside the blocker's transaction (a snapshot there is stale).
    watcher = psycopg.connect(libpq_url(database), autocommit=True)
    try:
        # Hold the 1,001st follower's row: the FK check of the batch that
        # reaches it waits (FOR KEY SHARE), after ten batches have committed.
        blocker.execute(
            "SELECT id FROM agents WHERE id = (SELECT follower_id FROM follows"
            " WHERE followee_id = %s ORDER BY follower_id OFFSET 1000 LIMIT 1) FOR UPDATE",
            (star.agent_id,),
        )
        pattern = await publish(client, star, title="Fan-out through a crash")
        deadline = time.monotonic() + 60
        while True:
            waiting = watcher.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database() AND query LIKE '%INSERT INTO notifications%'"
            ).fetchall()
            if waiting:
                break
            assert time.monotonic() < deadline, "the fan-out never reached the held row"
            await asyncio.sleep(0.05)
        made, _, missing = per_follower(database, pattern["id"])
        assert made == 1000 and missing == 1000  # mid-way
        assert watcher.execute(
            "SELECT status, delivered FROM fanout_jobs WHERE target_id = %s", (pattern["id"],)
        ).fetchone() == ("pending", 1000)
        # The crash: the worker's connection dies mid-batch.
        for (pid,) in waiting:
            watcher.execute("SELECT pg_terminate_backend(%s)", (pid,))
        blocker.rollback()  # releases the row
        await local.settle()
    finally:
        blocker.close()
        watcher.close()
        local.dispatcher.config = saved
    assert per_follower(database, pattern["id"]) == (2000, 2000, 0)
    assert one(
        database, "SELECT status, delivered FROM fanout_jobs WHERE target_id = %s", pattern["id"]
    ) == ("done", 2000)
    assert local.dispatcher.counters["errors"] > errors  # the cut batch failed, and was redone


@pytest.fixture
async def unheard(client: httpx.AsyncClient) -> AsyncIterator[KeyCache]:
    """A key cache that hears no notices from Postgres: a key revoked by
    another writer stays kept until its TTL (tests/api/test_key_cache.py)."""
    async for cache in installed(client, without_notices(60)):
        yield cache


async def test_a_get_that_marks_read_is_admitted_as_a_write(
    client: httpx.AsyncClient, database: str, unheard: KeyCache
) -> None:
    """Issue 45, L6: the spec's GET with mark_read=true changes state, so it is
    admitted as a write: its key is checked in Postgres, never answered by the
    key cache that may answer reads (a key revoked elsewhere cannot mark), and
    no cache may keep or replay the answer."""
    star, fan = await register(client, "Marked Star"), await register(client, "Marked Fan")
    await follow(client, fan, star)
    listed = await client.get("/api/notifications", headers=star.auth)
    assert listed.status_code == 200 and listed.headers["cache-control"] == "no-store"
    # Revoked by another writer: this replica's cache has not heard of it.
    sql(database, "UPDATE api_keys SET revoked_at = now() WHERE agent_id = %s", star.agent_id)
    # A read may still be answered from the cache within its TTL (by design)...
    read = await client.get("/api/notifications", headers=star.auth, params={"mark_read": "false"})
    assert read.status_code == 200 and read.json()["unread_count"] == 1
    # ...a GET that marks is checked in Postgres, whatever form true takes.
    for query in ("mark_read=true", "mark_read=1", "mark_read=YES", "mark_read=false&mark_read=on"):
        marking = await client.get(f"/api/notifications?{query}", headers=star.auth)
        assert_error(marking, 401, "invalid_api_key")
    unread = "SELECT count(*) FROM notifications WHERE recipient_id = %s AND NOT is_read"
    assert scalar(database, unread, star.agent_id) == 1


async def test_health_shows_the_queues(client: httpx.AsyncClient) -> None:
    body = (await client.get("/api/health", headers=OPERATOR)).json()
    queues = body["dispatch"]
    assert queues["where"] == "in-process" and queues["mail_enabled"] is False
    for key in ("fanout_jobs_pending", "fanout_followers_pending", "mail_pending", "mail_failed"):
        assert isinstance(queues[key], int)
