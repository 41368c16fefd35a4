"""GET and PATCH /api/admin: the admin view and the admin's changes (real Postgres)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from tests.api.conftest import Registered, assert_error, register, scalar
from tests.api.test_notifications import inbox, one
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask, make_role


async def admin_of(
    client: httpx.AsyncClient, database: str, name: str = "Site Admin"
) -> Registered:
    agent = await register(client, name)
    make_role(database, agent, "admin")
    return agent


async def view(
    client: httpx.AsyncClient, who: Registered, tab: str | None = None, **params: Any
) -> dict[str, Any]:
    query = {**({"tab": tab} if tab else {}), **params}
    response = await client.get("/api/admin", headers=who.auth, params=query)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["tab"] == (tab or "overview")
    return body


async def change(client: httpx.AsyncClient, who: Registered, **body: Any) -> dict[str, Any]:
    """A PATCH /api/admin that must succeed."""
    response = await client.patch("/api/admin", headers=who.auth, json=body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def pattern_count(database: str, agent: Registered) -> int:
    return int(scalar(database, "SELECT pattern_count FROM agents WHERE id = %s", agent.agent_id))


def ids(body: dict[str, Any]) -> list[str]:
    return [row["id"] for row in body["data"]]


# Who may -------------------------------------------------------------------------


async def test_admins_only(client: httpx.AsyncClient, database: str) -> None:
    someone = await register(client, "Someone")
    mod = await register(client, "Moderator")
    make_role(database, mod, "moderator")
    admin = await admin_of(client, database)
    target = {"type": "user", "id": someone.agent_id, "verification_level": "verified"}

    assert_error(await client.get("/api/admin"), 401, "missing_api_key")
    assert_error(await client.patch("/api/admin", json=target), 401, "missing_api_key")
    bad_key = {"Authorization": "Bearer cairn_nope_nope"}
    assert_error(await client.get("/api/admin", headers=bad_key), 401)
    for who in (someone, mod):
        assert_error(await client.get("/api/admin", headers=who.auth), 403, "forbidden")
        for tab in ("users", "patterns", "questions"):
            response = await client.get(f"/api/admin?tab={tab}", headers=who.auth)
            assert_error(response, 403, "forbidden")
        assert_error(await client.patch("/api/admin", headers=who.auth, json=target), 403)
    level = scalar(
        database, "SELECT verification_level FROM agents WHERE id = %s", someone.agent_id
    )
    assert level == "unverified"

    await view(client, admin)
    # An inactive admin's key is refused before anything else.
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", admin.agent_id)
    assert_error(await client.get("/api/admin", headers=admin.auth), 403, "account_inactive")
    assert_error(await client.patch("/api/admin", headers=admin.auth, json=target), 403)


# GET: the overview ---------------------------------------------------------------


async def test_overview_counts(
    client: httpx.AsyncClient, database: str, roomy_registration: None
) -> None:
    admin = await admin_of(client, database)
    mod = await register(client, "Moderator")
    make_role(database, mod, "moderator")
    author, other, human = (
        await register(client, "Author"),
        await register(client, "Other"),
        await register(client, "Human Op"),
    )
    sql(
        database,
        "UPDATE agents SET is_human = true, email = 'op@example.com' WHERE id = %s",
        human.agent_id,
    )
    sql(
        database,
        "UPDATE agents SET is_claimed = true, verification_level = 'verified' WHERE id = %s",
        author.agent_id,
    )
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", other.agent_id)
    kept, archived, rejected, pending = [
        await publish(client, author, title=f"Pattern number {i}") for i in range(4)
    ]
    sql(database, "UPDATE patterns SET status = 'archived' WHERE id = %s", archived["id"])
    sql(
        database, "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s", rejected["id"]
    )
    sql(database, "UPDATE patterns SET moderation_status = 'pending' WHERE id = %s", pending["id"])
    response = await client.post(
        f"/api/patterns/{kept['id']}/flag", headers=mod.auth, json={"reason": "spam"}
    )
    assert response.status_code in (200, 201), response.text
    response = await client.post(
        f"/api/patterns/{kept['id']}/comments", headers=mod.auth, json={"content": "Nice."}
    )
    assert response.status_code == 201, response.text
    open_q, closed_q, deleted_q = [
        await ask(client, author, title=f"Question number {i} about retries") for i in range(3)
    ]
    await answer(client, mod, open_q["slug"])
    sql(database, "UPDATE questions SET status = 'closed' WHERE id = %s", closed_q["id"])
    sql(
        database,
        "UPDATE questions SET status = 'deleted', moderation_status = 'rejected' WHERE id = %s",
        deleted_q["id"],
    )
    sql(
        database,
        "INSERT INTO appeals (id, agent_id, appeal_reason) VALUES (%s, %s, %s)",
        uuid.uuid4(),
        author.agent_id,
        "This bot is mine, I lost access.",
    )

    body = await view(client, admin)
    assert "pagination" not in body
    assert body["data"] == {
        "agents": {
            "total": 5,
            "humans": 1,
            "bots": 4,
            "active": 4,
            "inactive": 1,
            "verified": 1,
            "claimed": 1,
        },
        "staff": {"moderators": 1, "admins": 1},
        "patterns": {
            "total": 4,
            "public": 2,
            "by_status": {"published": 3, "archived": 1},
            "by_moderation_status": {"approved": 2, "pending": 1, "flagged": 0, "rejected": 1},
        },
        "questions": {
            "total": 3,
            "visible": 2,
            "by_status": {"open": 1, "closed": 1, "deleted": 1},
            "by_moderation_status": {"approved": 2, "pending": 0, "flagged": 0, "rejected": 1},
        },
        "answers": {
            "total": 1,
            "by_moderation_status": {"approved": 1, "pending": 0, "flagged": 0, "rejected": 0},
        },
        "comments": {"total": 1},
        "flags": {"open": 1},
        "appeals": {"pending_review": 1},
    }
    assert (await view(client, admin, "overview"))["data"] == body["data"]


# GET: the lists ------------------------------------------------------------------


async def test_users_tab(
    client: httpx.AsyncClient, database: str, roomy_registration: None
) -> None:
    admin = await admin_of(client, database)
    bots = [await register(client, f"Crawler {i}") for i in range(3)]
    human = await register(client, "Operator Olga")
    sql(
        database,
        "UPDATE agents SET is_human = true, email = 'Olga.Ops@Example.com', claim_code = NULL"
        " WHERE id = %s",
        human.agent_id,
    )
    sql(
        database,
        "UPDATE agents SET is_claimed = true, claimed_at = now(), owner_x_handle = 'olga',"
        " owner_id = %s, verification_level = 'verified' WHERE id = %s",
        human.agent_id,
        bots[0].agent_id,
    )
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", bots[1].agent_id)

    everyone = await view(client, admin, "users")
    assert everyone["pagination"] == {
        "page": 1,
        "limit": 20,
        "total": 5,
        "total_pages": 1,
        "has_more": False,
    }
    # Newest first.
    newest_first = [human, bots[2], bots[1], bots[0], admin]
    assert ids(everyone) == [a.agent_id for a in newest_first]
    rows = {row["id"]: row for row in everyone["data"]}
    olga = rows[human.agent_id]
    assert olga["is_human"] is True and olga["email"] == "Olga.Ops@Example.com"
    assert [b["username"] for b in olga["linked_bots"]] == [bots[0].username]
    claimed = rows[bots[0].agent_id]
    assert claimed["is_claimed"] is True and claimed["owner_x_handle"] == "olga"
    assert claimed["claimed_at"] is not None and claimed["claim_code"] is None
    assert rows[bots[2].agent_id]["claim_code"] == bots[2].claim_code
    assert rows[bots[1].agent_id]["is_active"] is False
    assert rows[admin.agent_id]["role"] == "admin" and rows[bots[2].agent_id]["role"] is None
    for row in everyone["data"]:
        assert {"password_hash", "key_hash", "api_key"}.isdisjoint(row)
        assert {"reputation_score", "pattern_count", "followers_count", "created_at"} <= set(row)
        assert {"is_active", "role", "email", "verification_level", "updated_at"} <= set(row)

    second = await view(client, admin, "users", page=2, limit=2)
    assert ids(second) == [bots[1].agent_id, bots[0].agent_id]
    assert second["pagination"] == {
        "page": 2,
        "limit": 2,
        "total": 5,
        "total_pages": 3,
        "has_more": True,
    }
    past = await view(client, admin, "users", page=9, limit=2)
    assert past["data"] == [] and past["pagination"]["total"] == 5

    assert ids(await view(client, admin, "users", search="CRAWLER")) == [
        bots[2].agent_id,
        bots[1].agent_id,
        bots[0].agent_id,
    ]
    assert ids(await view(client, admin, "users", search="olga.ops@example")) == [human.agent_id]
    assert ids(await view(client, admin, "users", search=bots[2].username.upper())) == [
        bots[2].agent_id
    ]
    assert ids(await view(client, admin, "users", search="operator o")) == [human.agent_id]
    # LIKE wildcards in the search are literal characters.
    assert (await view(client, admin, "users", search="%"))["data"] == []
    assert ids(await view(client, admin, "users", search="   ")) == ids(everyone)
    assert ids(await view(client, admin, "users", status="inactive")) == [bots[1].agent_id]
    assert len((await view(client, admin, "users", status="active"))["data"]) == 4
    hits = await view(client, admin, "users", search="crawler", status="active")
    assert ids(hits) == [bots[2].agent_id, bots[0].agent_id]


async def test_patterns_tab_shows_hidden_ones(client: httpx.AsyncClient, database: str) -> None:
    admin, author = await admin_of(client, database), await register(client, "Author")
    first = await publish(client, author, title="Retry with jitter")
    archived = await publish(client, author, title="Old caching trick")
    rejected = await publish(client, author, title="Spammy retry scheme")
    sql(
        database,
        "UPDATE patterns SET status = 'archived', archived_at = now() WHERE id = %s",
        archived["id"],
    )
    sql(
        database, "UPDATE patterns SET moderation_status = 'rejected' WHERE id = %s", rejected["id"]
    )

    listed = await view(client, admin, "patterns")
    assert ids(listed) == [rejected["id"], archived["id"], first["id"]]
    assert listed["pagination"]["total"] == 3
    row = listed["data"][1]
    assert row["status"] == "archived" and row["moderation_status"] == "approved"
    assert row["archived_at"] is not None and row["author"]["username"] == author.username
    for field in ("comment_count", "flag_count", "fork_count", "bookmark_count", "vote_score"):
        assert row[field] == 0
    assert {"created_at", "updated_at", "category", "slug", "view_count"} <= set(row)
    assert "content" not in row

    assert ids(await view(client, admin, "patterns", status="archived")) == [archived["id"]]
    assert ids(await view(client, admin, "patterns", status="published")) == [
        rejected["id"],
        first["id"],
    ]
    assert ids(await view(client, admin, "patterns", moderation_status="rejected")) == [
        rejected["id"]
    ]
    assert (await view(client, admin, "patterns", moderation_status="flagged"))["data"] == []
    assert ids(await view(client, admin, "patterns", search="RETRY")) == [
        rejected["id"],
        first["id"],
    ]
    found = await view(client, admin, "patterns", search="retry", moderation_status="approved")
    assert ids(found) == [first["id"]]
    paged = await view(client, admin, "patterns", limit=1, page=2)
    assert ids(paged) == [archived["id"]] and paged["pagination"]["total_pages"] == 3


async def test_questions_tab_shows_hidden_ones(client: httpx.AsyncClient, database: str) -> None:
    admin, author = await admin_of(client, database), await register(client, "Asker")
    first = await ask(client, author, title="How to back off politely?")
    closed = await ask(client, author, title="Which cache for embeddings?")
    gone = await ask(client, author, title="How to back off forever?")
    sql(database, "UPDATE questions SET status = 'closed' WHERE id = %s", closed["id"])
    sql(
        database,
        "UPDATE questions SET status = 'deleted', moderation_status = 'rejected' WHERE id = %s",
        gone["id"],
    )
    listed = await view(client, admin, "questions")
    assert ids(listed) == [gone["id"], closed["id"], first["id"]]
    row = listed["data"][0]
    assert (row["status"], row["moderation_status"]) == ("deleted", "rejected")
    assert row["author"]["username"] == author.username and row["answer_count"] == 0
    assert ids(await view(client, admin, "questions", status="deleted")) == [gone["id"]]
    assert ids(await view(client, admin, "questions", status="closed")) == [closed["id"]]
    assert ids(await view(client, admin, "questions", moderation_status="approved")) == [
        closed["id"],
        first["id"],
    ]
    assert ids(await view(client, admin, "questions", search="back off")) == [
        gone["id"],
        first["id"],
    ]
    assert ids(await view(client, admin, "questions", search="back off", status="open")) == [
        first["id"]
    ]


@pytest.mark.parametrize(
    "query",
    [
        "tab=everything",
        "tab=",
        "tab=logs",
        "page=0",
        "limit=0",
        "limit=51",
        "page=abc",
        "tab=users&status=published",
        "tab=users&moderation_status=approved",
        "tab=patterns&status=open",
        "tab=patterns&status=deleted",
        "tab=patterns&moderation_status=approve",
        "tab=questions&status=archived",
        "tab=questions&moderation_status=hidden",
        "tab=overview&search=x",
        "status=published",
        "moderation_status=approved",
        "tab=users&search=" + "x" * 201,
    ],
)
async def test_bad_queries(client: httpx.AsyncClient, database: str, query: str) -> None:
    admin = await admin_of(client, database)
    assert_error(await client.get(f"/api/admin?{query}", headers=admin.auth), 400)


async def test_limit_50_is_allowed(client: httpx.AsyncClient, database: str) -> None:
    admin = await admin_of(client, database)
    body = await view(client, admin, "users", limit=50)
    assert body["pagination"]["limit"] == 50 and ids(body) == [admin.agent_id]


# PATCH: users --------------------------------------------------------------------


async def test_verification_and_roles(client: httpx.AsyncClient, database: str) -> None:
    admin, bot = await admin_of(client, database), await register(client, "Helper Bot")

    body = await change(client, admin, type="user", id=bot.agent_id, verification_level="verified")
    assert body["data"]["verification_level"] == "verified" and body["data"]["role"] is None
    assert body["data"]["id"] == bot.agent_id and "verification_level" in body["message"]
    profile = (await client.get(f"/api/agents/{bot.username}")).json()["data"]
    assert profile["verification_level"] == "verified"

    assert_error(await client.get("/api/moderation", headers=bot.auth), 403)
    body = await change(client, admin, type="user", id=bot.agent_id, role="moderator")
    assert body["data"]["role"] == "moderator"
    assert (await client.get("/api/moderation", headers=bot.auth)).status_code == 200
    assert_error(await client.get("/api/admin", headers=bot.auth), 403, "forbidden")

    # Leaving role out keeps it; null makes the agent a regular user.
    body = await change(
        client, admin, type="user", id=bot.agent_id, verification_level="unverified"
    )
    assert body["data"]["role"] == "moderator"
    body = await change(client, admin, type="user", id=bot.agent_id, role=None)
    assert body["data"]["role"] is None
    assert scalar(database, "SELECT role FROM agents WHERE id = %s", bot.agent_id) is None
    assert_error(await client.get("/api/moderation", headers=bot.auth), 403)

    body = await change(client, admin, type="user", id=bot.agent_id, role="admin")
    assert body["data"]["role"] == "admin"
    assert (await client.get("/api/admin?tab=users", headers=bot.auth)).status_code == 200
    # Another admin may demote this one (only changing one's own role is refused).
    body = await change(client, bot, type="user", id=admin.agent_id, role="moderator")
    assert body["data"]["role"] == "moderator"
    assert_error(await client.get("/api/admin", headers=admin.auth), 403, "forbidden")

    same = await change(client, bot, type="user", id=admin.agent_id, role="moderator")
    assert same["message"].startswith("Nothing to change")


async def test_deactivate_and_reactivate(client: httpx.AsyncClient, database: str) -> None:
    admin, bot = await admin_of(client, database), await register(client, "Wayward Bot")
    pattern = await publish(client, bot)
    assert (await client.get("/api/agents/me", headers=bot.auth)).status_code == 200

    body = await change(client, admin, type="user", id=bot.agent_id, is_active=False)
    assert body["data"]["is_active"] is False
    assert_error(await client.get("/api/agents/me", headers=bot.auth), 403, "account_inactive")
    response = await client.post("/api/patterns", headers=bot.auth, json={"title": "x"})
    assert_error(response, 403, "account_inactive")
    assert_error(await client.get(f"/api/agents/{bot.username}"), 404)
    # Still in the admin's list, so it can be found and restored.
    assert ids(await view(client, admin, "users", status="inactive")) == [bot.agent_id]

    body = await change(client, admin, type="user", id=bot.agent_id, is_active=True)
    assert body["data"]["is_active"] is True
    assert (await client.get("/api/agents/me", headers=bot.auth)).status_code == 200
    assert (await client.get(f"/api/agents/{bot.username}")).status_code == 200
    assert (await client.get(f"/api/patterns/{pattern['id']}")).status_code == 200


async def test_admins_cannot_lock_themselves_out(client: httpx.AsyncClient, database: str) -> None:
    admin = await admin_of(client, database)
    for fields in ({"role": None}, {"role": "moderator"}, {"is_active": False}):
        response = await client.patch(
            "/api/admin", headers=admin.auth, json={"type": "user", "id": admin.agent_id, **fields}
        )
        assert_error(response, 403, "forbidden")
    response = await client.patch(
        "/api/admin",
        headers=admin.auth,
        json={"type": "user", "id": admin.agent_id, "verification_level": "verified", "role": None},
    )
    assert_error(response, 403, "forbidden")
    assert one(
        database,
        "SELECT role, is_active, verification_level FROM agents WHERE id = %s",
        admin.agent_id,
    ) == ("admin", True, "unverified")
    # What keeps them in is allowed: unchanged role, staying active, own verification.
    body = await change(
        client,
        admin,
        type="user",
        id=admin.agent_id,
        role="admin",
        is_active=True,
        verification_level="verified",
    )
    assert body["data"]["verification_level"] == "verified" and body["data"]["role"] == "admin"


async def test_two_admins_demoting_each_other_at_once(
    client: httpx.AsyncClient, database: str
) -> None:
    first, second = (
        await admin_of(client, database, "Admin A"),
        await admin_of(client, database, "Admin B"),
    )
    responses = await asyncio.gather(
        client.patch(
            "/api/admin",
            headers=first.auth,
            json={"type": "user", "id": second.agent_id, "role": None},
        ),
        client.patch(
            "/api/admin",
            headers=second.auth,
            json={"type": "user", "id": first.agent_id, "role": None},
        ),
    )
    assert sorted(r.status_code for r in responses) == [200, 403]
    assert scalar(database, "SELECT count(*) FROM agents WHERE role = 'admin'") == 1


# PATCH: patterns -----------------------------------------------------------------


async def test_rejecting_a_pattern(client: httpx.AsyncClient, database: str) -> None:
    admin, author = await admin_of(client, database), await register(client, "Author")
    flagger = await register(client, "Flagger")
    pattern = await publish(client, author, title="Dubious shortcut")
    response = await client.post(
        f"/api/patterns/{pattern['id']}/flag", headers=flagger.auth, json={"reason": "misleading"}
    )
    assert response.status_code in (200, 201), response.text
    assert pattern_count(database, author) == 1

    body = await change(
        client, admin, type="pattern", id=pattern["id"], moderation_status="rejected"
    )
    assert body["data"]["moderation_status"] == "rejected" and body["data"]["status"] == "published"
    assert body["data"]["id"] == pattern["id"]
    assert (await client.get(f"/api/patterns/{pattern['id']}")).status_code == 404
    assert (await client.get("/api/patterns")).json()["data"] == []
    assert pattern_count(database, author) == 0
    assert scalar(database, "SELECT status FROM flags") == "resolved"
    # Logged as the admin's decision, and the author is told.
    mod = await register(client, "Moderator")
    make_role(database, mod, "moderator")
    logs = (await client.get("/api/moderation?tab=logs", headers=mod.auth)).json()["data"]
    assert [(e["moderator"]["username"], e["target_type"], e["action"]) for e in logs] == [
        (admin.username, "pattern", "reject")
    ]
    assert logs[0]["target_id"] == pattern["id"] and logs[0]["previous_status"] == "approved"
    note = (await inbox(client, author))["data"][0]
    assert note["kind"] == "moderation_decision" and note["data"] == {"action": "reject"}

    # Rejected → pending re-enters the public set (no decision to log).
    await change(client, admin, type="pattern", id=pattern["id"], moderation_status="pending")
    assert (await client.get(f"/api/patterns/{pattern['id']}")).status_code == 200
    assert pattern_count(database, author) == 1
    assert scalar(database, "SELECT count(*) FROM moderation_decisions") == 1

    await change(client, admin, type="pattern", id=pattern["id"], moderation_status="approved")
    assert pattern_count(database, author) == 1
    assert scalar(database, "SELECT count(*) FROM moderation_decisions") == 2
    # The same value again is no decision.
    body = await change(
        client, admin, type="pattern", id=pattern["id"], moderation_status="approved"
    )
    assert body["message"].startswith("Nothing to change")
    assert scalar(database, "SELECT count(*) FROM moderation_decisions") == 2


async def test_archiving_and_republishing_a_pattern(
    client: httpx.AsyncClient, database: str
) -> None:
    admin, author = await admin_of(client, database), await register(client, "Author")
    pattern = await publish(client, author)
    body = await change(client, admin, type="pattern", id=pattern["id"], status="archived")
    assert body["data"]["status"] == "archived" and body["data"]["archived_at"] is not None
    assert (await client.get(f"/api/patterns/{pattern['id']}")).status_code == 404
    assert pattern_count(database, author) == 0

    # Rejecting an archived pattern does not count it out twice.
    await change(client, admin, type="pattern", id=pattern["id"], moderation_status="rejected")
    assert pattern_count(database, author) == 0
    body = await change(client, admin, type="pattern", id=pattern["id"], status="published")
    assert body["data"]["archived_at"] is None
    assert pattern_count(database, author) == 0  # still rejected
    assert (await client.get(f"/api/patterns/{pattern['id']}")).status_code == 404

    # Both at once: approved and archived, then published again.
    body = await change(
        client,
        admin,
        type="pattern",
        id=pattern["id"],
        moderation_status="approved",
        status="archived",
    )
    assert (body["data"]["moderation_status"], body["data"]["status"]) == ("approved", "archived")
    assert pattern_count(database, author) == 0
    await change(client, admin, type="pattern", id=pattern["id"], status="published")
    assert pattern_count(database, author) == 1
    assert (await client.get(f"/api/patterns/{pattern['id']}")).status_code == 200
    listed = await view(client, admin, "patterns")
    assert listed["data"][0]["status"] == "published"


# PATCH: questions ----------------------------------------------------------------


async def test_question_status_and_moderation(client: httpx.AsyncClient, database: str) -> None:
    admin, asker = await admin_of(client, database), await register(client, "Asker")
    helper = await register(client, "Helper")
    question = await ask(client, asker)
    await answer(client, helper, question["slug"])

    body = await change(client, admin, type="question", id=question["id"], status="closed")
    assert body["data"]["status"] == "closed" and body["data"]["closed_at"] is not None
    response = await client.post(
        f"/api/questions/{question['slug']}/answers",
        headers=helper.auth,
        json={"body": "A late answer."},
    )
    assert_error(response, 403, "question_closed")
    body = await change(client, admin, type="question", id=question["id"], status="open")
    assert body["data"]["closed_at"] is None

    body = await change(
        client, admin, type="question", id=question["id"], moderation_status="rejected"
    )
    assert body["data"]["moderation_status"] == "rejected" and body["data"]["answer_count"] == 1
    assert (await client.get(f"/api/questions/{question['slug']}")).status_code == 404
    note = (await inbox(client, asker))["data"][0]
    assert note["kind"] == "moderation_decision" and note["data"] == {"action": "reject"}
    assert scalar(database, "SELECT target_type FROM moderation_decisions") == "question"
    await change(client, admin, type="question", id=question["id"], moderation_status="approved")
    assert (await client.get(f"/api/questions/{question['slug']}")).status_code == 200

    body = await change(client, admin, type="question", id=question["id"], status="deleted")
    assert body["data"]["status"] == "deleted"
    assert (await client.get(f"/api/questions/{question['slug']}")).status_code == 404
    assert ids(await view(client, admin, "questions", status="deleted")) == [question["id"]]

    # A deleted question is not moderated unless it is restored in the same change.
    response = await client.patch(
        "/api/admin",
        headers=admin.auth,
        json={"type": "question", "id": question["id"], "moderation_status": "rejected"},
    )
    assert_error(response, 409, "question_deleted")
    body = await change(
        client,
        admin,
        type="question",
        id=question["id"],
        status="open",
        moderation_status="rejected",
    )
    assert (body["data"]["status"], body["data"]["moderation_status"]) == ("open", "rejected")
    # Deleting and approving at once: the decision is taken before the delete.
    body = await change(
        client,
        admin,
        type="question",
        id=question["id"],
        status="deleted",
        moderation_status="approved",
    )
    assert (body["data"]["status"], body["data"]["moderation_status"]) == ("deleted", "approved")
    assert scalar(database, "SELECT count(*) FROM moderation_decisions") == 4
    # pending / flagged are set without a decision.
    body = await change(
        client, admin, type="question", id=question["id"], moderation_status="pending"
    )
    assert body["data"]["moderation_status"] == "pending"
    assert scalar(database, "SELECT count(*) FROM moderation_decisions") == 4


# PATCH: validation ---------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"id": "U", "verification_level": "verified"},
        {"type": "comment", "id": "U", "status": "open"},
        {"type": "user"},
        {"type": "user", "id": "U"},
        {"type": "user", "id": "not-a-uuid", "is_active": True},
        {"type": "user", "id": "U", "is_active": "false"},
        {"type": "user", "id": "U", "is_active": 0},
        {"type": "user", "id": "U", "is_active": None},
        {"type": "user", "id": "U", "verification_level": None},
        {"type": "user", "id": "U", "verification_level": "gold"},
        {"type": "user", "id": "U", "role": "superuser"},
        {"type": "user", "id": "U", "role": ""},
        {"type": "user", "id": "U", "status": "archived"},
        {"type": "user", "id": "U", "reputation_score": 1000},
        {"type": "user", "id": "U", "is_active": True, "password_hash": "x"},
        {"type": "pattern", "id": "P"},
        {"type": "pattern", "id": "P", "status": "deleted"},
        {"type": "pattern", "id": "P", "status": None},
        {"type": "pattern", "id": "P", "moderation_status": "approve"},
        {"type": "pattern", "id": "P", "is_active": False},
        {"type": "pattern", "id": "P", "status": "archived", "vote_score": 5},
        {"type": "question", "id": "Q", "status": "archived"},
        {"type": "question", "id": "Q", "moderation_status": None},
        {"type": "question", "id": "Q", "role": "admin"},
        {"type": "question", "id": "Q"},
    ],
)
async def test_change_validation(
    client: httpx.AsyncClient, database: str, body: dict[str, Any]
) -> None:
    admin, author = await admin_of(client, database), await register(client, "Author")
    pattern, question = await publish(client, author), await ask(client, author)
    values = {"U": author.agent_id, "P": pattern["id"], "Q": question["id"]}
    filled = {k: values.get(v, v) if isinstance(v, str) else v for k, v in body.items()}
    assert_error(await client.patch("/api/admin", headers=admin.auth, json=filled), 400)
    assert_error(
        await client.patch(
            "/api/admin", headers={**admin.auth, "content-type": "application/json"}, content="{"
        ),
        400,
    )
    assert (
        scalar(
            database,
            "SELECT is_active::text || verification_level FROM agents WHERE id = %s",
            author.agent_id,
        )
        == "trueunverified"
    )
    assert scalar(database, "SELECT status || moderation_status FROM patterns") == (
        "publishedapproved"
    )
    assert scalar(database, "SELECT status || moderation_status FROM questions") == "openapproved"


@pytest.mark.parametrize(
    "body",
    [
        {"type": "user", "is_active": False},
        {"type": "pattern", "status": "archived"},
        {"type": "question", "moderation_status": "rejected"},
    ],
)
async def test_unknown_id(client: httpx.AsyncClient, database: str, body: dict[str, Any]) -> None:
    admin = await admin_of(client, database)
    response = await client.patch(
        "/api/admin", headers=admin.auth, json={**body, "id": str(uuid.uuid4())}
    )
    assert_error(response, 404, "not_found")
