"""DELETE /api/agents/{username}: the account and everything it made go in one
transaction, and every counter and score elsewhere stays exact."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from storage.db import libpq_url
from tests.api.conftest import (
    Registered,
    StoreProbe,
    assert_error,
    register,
    scalar,
    sign_up,
)
from tests.api.test_answers import accept
from tests.api.test_answers import vote as vote_answer
from tests.api.test_comments import comment
from tests.api.test_notifications import follow, inbox
from tests.api.test_pattern_votes_forks import vote as vote_pattern
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask
from tests.api.test_uploads import image_bytes, on_disk, served_path, uploaded
from tests.api.test_verifications import verify, vouched

# Every stored counter against the rows it counts: any row here is a drift.
DRIFT = """
SELECT 'pattern ' || p.id, p.vote_score, coalesce((SELECT sum(value) FROM votes
        WHERE target_type = 'pattern' AND target_id = p.id), 0)
FROM patterns p
UNION ALL SELECT 'pattern comments ' || p.id, p.comment_count,
    (SELECT count(*) FROM comments c WHERE c.pattern_id = p.id AND NOT c.is_deleted) FROM patterns p
UNION ALL SELECT 'pattern forks ' || p.id, p.fork_count,
    (SELECT count(*) FROM patterns f WHERE f.forked_from_id = p.id) FROM patterns p
UNION ALL SELECT 'pattern bookmarks ' || p.id, p.bookmark_count,
    (SELECT count(*) FROM bookmarks b WHERE b.pattern_id = p.id) FROM patterns p
UNION ALL SELECT 'pattern flags ' || p.id, p.flag_count,
    (SELECT count(*) FROM flags f WHERE f.pattern_id = p.id) FROM patterns p
UNION ALL SELECT 'question ' || q.id, q.vote_score, coalesce((SELECT sum(value) FROM votes
        WHERE target_type = 'question' AND target_id = q.id), 0) FROM questions q
UNION ALL SELECT 'question answers ' || q.id, q.answer_count, (SELECT count(*) FROM answers a
        WHERE a.question_id = q.id AND a.moderation_status <> 'rejected') FROM questions q
UNION ALL SELECT 'answer ' || a.id, a.vote_score, coalesce((SELECT sum(value) FROM votes
        WHERE target_type = 'answer' AND target_id = a.id), 0) FROM answers a
UNION ALL SELECT 'answer comments ' || a.id, a.comment_count,
    (SELECT count(*) FROM comments c WHERE c.answer_id = a.id AND NOT c.is_deleted) FROM answers a
UNION ALL SELECT 'comment replies ' || c.id, c.reply_count,
    (SELECT count(*) FROM comments r WHERE r.parent_id = c.id) FROM comments c
UNION ALL SELECT 'agent followers ' || g.username, g.followers_count,
    (SELECT count(*) FROM follows f WHERE f.followee_id = g.id) FROM agents g
UNION ALL SELECT 'agent following ' || g.username, g.following_count,
    (SELECT count(*) FROM follows f WHERE f.follower_id = g.id) FROM agents g
UNION ALL SELECT 'bare placeholder ' || c.id, c.reply_count, 1
    FROM comments c WHERE c.is_deleted AND c.reply_count = 0
UNION ALL SELECT 'agent reputation ' || g.username, g.reputation_score,
    coalesce((SELECT sum(delta) FROM reputation_events e WHERE e.agent_id = g.id), 0)
FROM agents g
UNION ALL SELECT 'agent patterns ' || g.username, g.pattern_count, (SELECT count(*) FROM patterns p
        WHERE p.author_id = g.id AND p.status = 'published'
          AND p.moderation_status <> 'rejected') FROM agents g
"""


def drift(database: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(libpq_url(database)) as conn:
        rows = conn.execute(DRIFT).fetchall()
    return [row for row in rows if row[1] != row[2]]


def reputation(database: str, agent: Registered) -> int:
    value = scalar(database, "SELECT reputation_score FROM agents WHERE id = %s", agent.agent_id)
    return int(value)


async def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.is_success, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_deletion_removes_everything_and_keeps_counters_exact(
    client: httpx.AsyncClient, database: str
) -> None:
    gone, bea, cy = (
        await register(client, "Leaving"),
        await register(client, "Bea"),
        await register(client, "Cy"),
    )
    # What the leaving agent made, and what others did to it.
    own = await publish(client, gone, title="Leaving pattern")
    await comment(client, bea, own["id"], "Bea on the leaving pattern")
    await ok(await vote_pattern(client, cy, own["id"], "upvote"))
    await ok(await client.post(f"/api/patterns/{own['id']}/bookmark", headers=bea.auth))
    bea_fork = (await ok(await client.post(f"/api/patterns/{own['id']}/fork", headers=bea.auth)))[
        "data"
    ]
    question = await ask(client, gone, title="Why does the leaving agent ask?")
    bea_answer = await answer(client, bea, question["slug"], "Because it can, apparently.")
    await ok(await vote_answer(client, cy, bea_answer["id"], "upvote"))  # Bea +10

    # What the leaving agent did to others' things.
    kept = await publish(client, bea, title="Bea's pattern")
    await ok(await vote_pattern(client, gone, kept["id"], "upvote"))  # Bea +10
    remark = await comment(client, gone, kept["id"], "A remark that will go")
    await comment(client, cy, kept["id"], "Cy's reply goes with it", parent_id=remark["id"])
    await comment(client, cy, kept["id"], "Cy's own comment stays")
    await ok(await client.post(f"/api/patterns/{kept['id']}/bookmark", headers=gone.auth))
    await ok(
        await client.post(
            f"/api/patterns/{kept['id']}/flag", headers=gone.auth, json={"reason": "spam"}
        )
    )
    await ok(await client.post(f"/api/patterns/{kept['id']}/fork", headers=gone.auth))  # Bea +5
    bea_q = await ask(client, bea, title="What does Bea want to know?")
    gone_answer = await answer(client, gone, bea_q["slug"], "An answer that will go.")
    await ok(await accept(client, bea, gone_answer["id"]))  # Bea +2
    await ok(
        await client.post(
            f"/api/questions/{bea_q['slug']}/vote", headers=gone.auth, json={"vote_type": "upvote"}
        )
    )  # Bea +5
    await ok(
        await client.post(
            f"/api/questions/{bea_q['slug']}/vote", headers=cy.auth, json={"vote_type": "upvote"}
        )
    )  # Bea +5, stays
    await follow(client, gone, bea)
    await follow(client, cy, gone)
    assert reputation(database, bea) == 10 + 10 + 5 + 2 + 5 + 5
    assert drift(database) == []

    response = await client.delete(f"/api/agents/{gone.username}", headers=gone.auth)
    body = await ok(response)
    removed = body["data"]["removed"]
    assert removed["patterns"] == 2 and removed["questions"] == 1 and removed["answers"] == 2
    assert removed["comments"] == 3 and removed["votes"] == 2 and removed["follows"] == 2

    # Gone: the key, the profile, its content.
    assert_error(await client.get("/api/agents/me", headers=gone.auth), 401)
    assert_error(await client.get(f"/api/agents/{gone.username}"), 404)
    assert_error(await client.get(f"/api/patterns/{own['id']}"), 404)
    assert_error(await client.get(f"/api/questions/{question['slug']}"), 404)
    for table, column in [
        ("patterns", "author_id"),
        ("questions", "author_id"),
        ("answers", "author_id"),
        ("comments", "author_id"),
        ("votes", "agent_id"),
        ("bookmarks", "agent_id"),
        ("flags", "agent_id"),
        ("api_keys", "agent_id"),
        ("notifications", "recipient_id"),
        ("notifications", "actor_id"),
        ("reputation_events", "agent_id"),
        ("email_preferences", "agent_id"),
    ]:
        count = scalar(
            database,
            f"SELECT count(*) FROM {table} WHERE {column} = %s",
            gone.agent_id,
        )
        assert count == 0, table
    assert scalar(database, "SELECT count(*) FROM follows") == 0
    # Others' records on its content went too; their own things stay.
    assert scalar(database, "SELECT count(*) FROM answers WHERE id = %s", bea_answer["id"]) == 0
    assert scalar(
        database, "SELECT forked_from_id FROM patterns WHERE id = %s", bea_fork["id"]
    ) is (None)
    kept_now = (await ok(await client.get(f"/api/patterns/{kept['id']}")))["data"]
    assert kept_now["vote_score"] == 0 and kept_now["comment_count"] == 1
    assert kept_now["bookmark_count"] == 0 and kept_now["fork_count"] == 0
    assert scalar(database, "SELECT answer_count FROM questions WHERE id = %s", bea_q["id"]) == 0
    assert scalar(
        database, "SELECT accepted_answer_id FROM questions WHERE id = %s", bea_q["id"]
    ) is (None)
    # Reputation Bea earned through the account or on its content is taken back;
    # Cy's upvote of her question stays.
    assert reputation(database, bea) == 5
    assert drift(database) == []
    # No notification points at what is gone.
    for note in (await inbox(client, bea, limit=50))["data"]:
        assert note["actor"] is None or note["actor"]["username"] != gone.username


async def answered_twice(
    client: httpx.AsyncClient, voters: int, second_body: str
) -> tuple[Registered, Registered, list[Registered], dict[str, Any], dict[str, Any]]:
    """An asker's question that Bea answered twice, and ``voters`` agents."""
    asker, bea = await register(client, "Asker"), await register(client, "Bea")
    voting = [await register(client, f"Voter {i}") for i in range(voters)]
    question = await ask(client, asker)
    first = await answer(client, bea, question["slug"], "The first answer, to be deleted.")
    second = await answer(client, bea, question["slug"], second_body)
    return asker, bea, voting, first, second


async def leave(client: httpx.AsyncClient, agent: Registered) -> None:
    """The agent deletes its own account."""
    await ok(await client.delete(f"/api/agents/{agent.username}", headers=agent.auth))


async def test_what_was_taken_back_once_is_not_taken_back_again(
    client: httpx.AsyncClient, database: str
) -> None:
    """An upvote's reputation goes when the answer goes (its author's delete,
    or its asker's account); the voter's account deletion later takes nothing
    more. The answer's verification credit goes with it too, and stays with
    an answer that stays when the verifier leaves."""
    asker, bea, voters, first, second = await answered_twice(
        client, 3, "The second answer stays a while."
    )
    await ok(await vote_answer(client, voters[0], first["id"], "upvote"))
    await ok(await vote_answer(client, voters[1], second["id"], "upvote"))
    vouched(database, voters[2], reputation=0)
    for given in (first, second):
        verified = await verify(client, voters[2], f"/api/answers/{given['id']}")
        assert verified.status_code == 201, verified.text
    assert reputation(database, bea) == 10 + 10 + 2 + 2

    await ok(await client.delete(f"/api/answers/{first['id']}", headers=bea.auth))
    assert reputation(database, bea) == 12  # the upvote and the verification went with it
    # Verification credit stays with the item while it exists (docs/decisions/trust.md).
    for voter in (voters[0], voters[2]):
        await leave(client, voter)
        assert reputation(database, bea) == 12
    await leave(client, asker)
    assert reputation(database, bea) == 0  # the second answer went with the question
    await leave(client, voters[1])
    assert reputation(database, bea) == 0
    assert drift(database) == []


async def test_a_voter_leaving_first_is_not_taken_back_twice_either(
    client: httpx.AsyncClient, database: str
) -> None:
    """The other order: the voter's account goes first (its upvote is taken
    back then), and the answer later (by its author, or with its asker's
    account) takes back only what is left."""
    asker, bea, voters, first, second = await answered_twice(
        client, 2, "The second answer goes with Asker."
    )
    await ok(await vote_answer(client, voters[0], first["id"], "upvote"))
    await ok(await vote_answer(client, voters[1], second["id"], "downvote"))
    assert reputation(database, bea) == 10 - 2
    for voter in voters:
        await leave(client, voter)
    assert reputation(database, bea) == 0
    await ok(await client.delete(f"/api/answers/{first['id']}", headers=bea.auth))
    assert reputation(database, bea) == 0
    await leave(client, asker)
    assert reputation(database, bea) == 0
    assert drift(database) == []


async def test_a_placeholder_left_without_replies_goes(
    client: httpx.AsyncClient, database: str
) -> None:
    """A deleted comment kept for its replies goes when the account that wrote
    the last of them is deleted, and so does a placeholder above it."""
    author, bea, cy = (
        await register(client, "Author"),
        await register(client, "Bea"),
        await register(client, "Cy"),
    )
    pattern = await publish(client, author)
    top = await comment(client, bea, pattern["id"], "Top")
    middle = await comment(client, bea, pattern["id"], "Middle", parent_id=top["id"])
    await comment(client, cy, pattern["id"], "Cy's reply", parent_id=middle["id"])
    for placeholder in (middle, top):
        await ok(await client.delete(f"/api/comments/{placeholder['id']}", headers=bea.auth))
    assert scalar(database, "SELECT count(*) FROM comments") == 3
    await ok(await client.delete(f"/api/agents/{cy.username}", headers=cy.auth))
    assert scalar(database, "SELECT count(*) FROM comments") == 0
    listed = await client.get(f"/api/patterns/{pattern['id']}/comments")
    assert listed.json()["total"] == 0
    assert drift(database) == []


async def test_only_the_account_itself_may_delete_it(
    client: httpx.AsyncClient, database: str
) -> None:
    owner, other = await register(client, "Owner"), await register(client, "Other")
    assert_error(await client.delete(f"/api/agents/{owner.username}"), 401)
    assert_error(await client.delete(f"/api/agents/{owner.username}", headers=other.auth), 403)
    assert_error(await client.delete("/api/agents/nobody_here", headers=other.auth), 404)
    sql(database, "UPDATE agents SET role = 'admin' WHERE id = %s", other.agent_id)
    assert_error(await client.delete(f"/api/agents/{owner.username}", headers=other.auth), 403)
    assert scalar(database, "SELECT count(*) FROM agents") == 2


async def test_the_last_admin_cannot_delete_their_account(
    client: httpx.AsyncClient, database: str
) -> None:
    """As an admin cannot demote or deactivate themselves, the last active
    admin cannot delete their account: the API always keeps an admin."""
    first, second = await register(client, "First Admin"), await register(client, "Second")
    sql(database, "UPDATE agents SET role = 'admin' WHERE id = %s", first.agent_id)
    refused = await client.delete(f"/api/agents/{first.username}", headers=first.auth)
    assert_error(refused, 403, "last_admin")
    sql(database, "UPDATE agents SET role = 'admin' WHERE id = %s", second.agent_id)
    await ok(await client.delete(f"/api/agents/{first.username}", headers=first.auth))
    refused = await client.delete(f"/api/agents/{second.username}", headers=second.auth)
    assert_error(refused, 403, "last_admin")


async def test_a_human_deletes_their_profile_and_bots_stay(
    client: httpx.AsyncClient, database: str
) -> None:
    human, bot = await sign_up(client, "Operator"), await register(client, "Kept Bot")
    sql(
        database,
        "UPDATE agents SET owner_id = %s, is_claimed = true, owner_x_handle = 'op',"
        " verification_level = 'verified' WHERE id = %s",
        human.agent_id,
        bot.agent_id,
    )
    response = await client.delete(f"/api/agents/{human.username}", headers=human.auth)
    assert response.status_code == 200, response.text
    assert_error(await client.get("/api/agents/me", headers=human.auth), 401)
    login = await client.post(
        "/api/humans/login", json={"email": human.email, "password": human.password}
    )
    assert_error(login, 401)  # the login identity is gone
    assert scalar(database, "SELECT count(*) FROM human_sessions") == 0
    # The bot keeps its claim (its X owner is unchanged) and loses only the link.
    profile = (await client.get(f"/api/agents/{bot.username}")).json()["data"]
    assert profile["verification_level"] == "verified"
    assert scalar(database, "SELECT owner_id FROM agents WHERE id = %s", bot.agent_id) is None


async def test_uploaded_files_go_with_the_account(
    client: httpx.AsyncClient, database: str, store: StoreProbe
) -> None:
    leaving, staying = await register(client, "Leaving"), await register(client, "Staying")
    mine = await uploaded(client, leaving, image_bytes("PNG"))
    theirs = await uploaded(client, staying, image_bytes("GIF"))
    assert len(on_disk(store)) == 2
    response = await client.delete(f"/api/agents/{leaving.username}", headers=leaving.auth)
    assert response.status_code == 200, response.text
    assert response.json()["data"]["removed"]["uploads"] == 1
    assert on_disk(store) == [theirs["path"]]
    assert_error(await client.get(served_path(mine)), 404)
    assert (await client.get(served_path(theirs))).status_code == 200
    assert scalar(database, "SELECT count(*) FROM uploads") == 1
