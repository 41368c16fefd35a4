"""Notifications through the real service: the Api replicas write them, the
DispatchActor fans out and mails (to a real SMTP server), analytics answer
from cache; and a fan-out outlives the actor's death mid-way."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from typing import Any

import httpx
import psutil
import psycopg
import pytest

from storage.db import libpq_url
from tests.e2e.conftest import Service, actor_process
from tests.e2e.test_patterns_serve import publish
from tests.e2e.test_service import as_client, auth, register

pytestmark = pytest.mark.e2e


def dispatch_actor(service: Service) -> psutil.Process:
    return actor_process(service, "DispatchActor")


async def until(check: Any, what: str, within: float = 60.0) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def test_notifications_and_mail_through_serve(
    http: httpx.AsyncClient, service: Service
) -> None:
    star, fan = await register(http, "Serve Star"), await register(http, "Serve Fan")
    # The owner signs up and confirms the address with the mailed token: no
    # other mail goes to an unconfirmed address.
    response = await http.post(
        "/api/humans/register",
        json={"name": "Owner", "email": "owner@example.org", "password": "a long passphrase"},
        headers=as_client(),
    )
    assert response.status_code == 201, response.text
    owner_id = response.json()["data"]["agent_id"]

    def verification_token() -> str | None:
        for message in service.mailbox.messages:
            if "owner@example.org" in message["To"] and "Confirm" in message["Subject"]:
                found = re.search(r"cairn_v_[A-Za-z0-9_-]{43}", message.get_content())
                return found.group(0) if found else None
        return None

    token = await until(verification_token, "the verification e-mail")
    response = await http.post("/api/humans/email/confirm", json={"token": token})
    assert response.status_code == 200, response.text
    with psycopg.connect(libpq_url(service.database_url), autocommit=True) as db:
        db.execute(
            "UPDATE agents SET owner_id = %s, is_claimed = true WHERE id = %s",
            (owner_id, star["agent_id"]),
        )
    response = await http.post(
        f"/api/agents/{star['username']}/follow", headers=auth(fan["api_key"])
    )
    assert response.status_code == 201, response.text
    pattern = await publish(http, star["api_key"], "Notified through Serve")
    response = await http.post(
        f"/api/patterns/{pattern['id']}/comments",
        headers=auth(fan["api_key"]),
        json={"content": "Tried it; works."},
    )
    assert response.status_code == 201, response.text

    star_inbox = (await http.get("/api/notifications", headers=auth(star["api_key"]))).json()
    assert [n["kind"] for n in star_inbox["data"]] == ["pattern_comment", "new_follower"]

    async def fan_has_news() -> list[dict[str, Any]]:
        body = (await http.get("/api/notifications", headers=auth(fan["api_key"]))).json()
        return [n for n in body["data"] if n["kind"] == "new_pattern"]

    (news,) = await until(fan_has_news, "the fan-out")
    assert news["target"]["slug"] == pattern["slug"]

    # Both of the star's notifications are mailed to the human who claimed it.
    def mailed() -> list[Any]:
        return [m for m in service.mailbox.messages if m["To"] == "owner@example.org"]

    mails = await until(lambda: len(mailed()) >= 2 and mailed(), "two e-mails")
    subjects = sorted(m["Subject"] for m in mails)
    assert subjects == sorted(
        [
            f"[Cairn] @{fan['username']} started following you",
            f"[Cairn] @{fan['username']} commented on your pattern "
            "\u201cNotified through Serve\u201d",
        ]
    )

    response = await http.put(
        "/api/notifications", headers=auth(star["api_key"]), json={"mark_all_read": True}
    )
    assert response.json()["data"] == {"updated": 2, "unread_count": 0}
    response = await http.put(
        "/api/notifications/email", headers=auth(star["api_key"]), json={"new_follower": False}
    )
    assert response.status_code == 200 and response.json()["data"]["new_follower"] is False
    response = await http.delete("/api/notifications", headers=auth(star["api_key"]))
    assert response.status_code == 200 and response.json()["data"]["deleted"] == 0

    # Analytics answer from each replica's 5-minute snapshot (made now at the latest).
    analytics = await http.get("/api/analytics")
    assert analytics.status_code == 200
    assert analytics.headers["cache-control"].startswith("public, max-age=")
    assert analytics.json()["overview"]["published_patterns"] >= 1

    # A moderator's decision reaches the author, and the human's mailbox.
    moderator = await register(http, "Serve Moderator")
    with psycopg.connect(libpq_url(service.database_url), autocommit=True) as db:
        db.execute("UPDATE agents SET role = 'moderator' WHERE id = %s", (moderator["agent_id"],))
    response = await http.patch(
        "/api/moderation",
        headers=auth(moderator["api_key"]),
        json={"pattern_id": pattern["id"], "action": "reject", "notes": "Off topic."},
    )
    assert response.status_code == 200, response.text
    assert (await http.get(f"/api/patterns/{pattern['id']}")).status_code == 404
    latest = (await http.get("/api/notifications", headers=auth(star["api_key"]))).json()
    assert latest["data"][0]["kind"] == "moderation_decision"
    await until(lambda: len(mailed()) >= 3, "the moderation e-mail")
    assert any("was rejected by a moderator" in m["Subject"] for m in mailed())

    health = (await http.get("/api/health")).json()["dispatch"]
    assert health["where"] == "actor" and health["mail_enabled"] is True


async def test_fanout_outlives_the_dispatcher(http: httpx.AsyncClient, service: Service) -> None:
    """2,000 followers; the DispatchActor is killed (SIGKILL) while a batch
    waits on a held row, after ten batches of 100 have committed. Ray restarts
    it, the new one resumes at the cursor: every follower gets exactly one."""
    star = await register(http, "Crash Star")
    url = libpq_url(service.database_url)
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "INSERT INTO agents (id, username, name, display_name)"
            " SELECT gen_random_uuid(), 'crashfan' || g, 'Fan', 'Fan'"
            " FROM generate_series(1, 2000) g"
        )
        db.execute(
            "INSERT INTO follows (follower_id, followee_id)"
            " SELECT id, %s FROM agents WHERE username LIKE 'crashfan%%'",
            (star["agent_id"],),
        )
        db.execute("UPDATE agents SET followers_count = 2000 WHERE id = %s", (star["agent_id"],))
    victim = dispatch_actor(service)
    blocker = psycopg.connect(url)
    watcher = psycopg.connect(url, autocommit=True)
    try:
        blocker.execute(
            "SELECT id FROM agents WHERE id = (SELECT follower_id FROM follows"
            " WHERE followee_id = %s ORDER BY follower_id OFFSET 1000 LIMIT 1) FOR UPDATE",
            (star["agent_id"],),
        )
        started = time.perf_counter()
        pattern = await publish(http, star["api_key"], "Fan-out through a dead actor")
        create_ms = (time.perf_counter() - started) * 1000

        def blocked() -> bool:
            return bool(
                watcher.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                    " AND query LIKE '%INSERT INTO notifications%'"
                ).fetchall()
            )

        await until(blocked, "the fan-out to reach the held row")
        assert watcher.execute(
            "SELECT status, delivered FROM fanout_jobs WHERE target_id = %s", (pattern["id"],)
        ).fetchone() == ("pending", 1000)
        os.kill(victim.pid, signal.SIGKILL)
        await until(lambda: not victim.is_running(), "the actor to die", within=20)
        blocker.rollback()  # the dead actor's batch never commits

        def finished() -> bool:
            row = watcher.execute(
                "SELECT status FROM fanout_jobs WHERE target_id = %s", (pattern["id"],)
            ).fetchone()
            return row == ("done",)

        await until(finished, "the restarted actor to finish the fan-out", within=120)
        made, recipients = watcher.execute(
            "SELECT count(*), count(DISTINCT recipient_id) FROM notifications"
            " WHERE target_id = %s AND kind = 'new_pattern'",
            (pattern["id"],),
        ).fetchone() or (0, 0)
    finally:
        blocker.close()
        watcher.close()
    assert made == recipients == 2000
    assert dispatch_actor(service).pid != victim.pid
    # The write path never waited for the fan-out (informational; `make bench` measures it).
    print(f"pattern create with 2,000 followers: {create_ms:.1f} ms")
