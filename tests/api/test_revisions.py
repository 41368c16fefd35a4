"""Revisions of patterns and answers: every change writes one, history, one
revision, a per-field diff, rollback (author or staff), forks record the
revision they copied, moderation sees edits made after its decision, and
migration 0017 gives existing rows revision 1."""

from __future__ import annotations

import secrets
from typing import Any

import httpx
import psycopg

from storage.db import libpq_url
from storage.embedded import database_url, drop_database, ensure_database
from storage.migrate import upgrade
from tests.api.conftest import assert_error, register, scalar
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask


async def revisions_of(client: httpx.AsyncClient, path: str) -> list[dict[str, Any]]:
    response = await client.get(f"{path}/revisions")
    assert response.status_code == 200, response.text
    data: list[dict[str, Any]] = response.json()["data"]
    return data


async def test_every_edit_of_a_pattern_writes_a_revision(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    created = await publish(client, author)
    pid = created["id"]
    assert created["revision"] == 1
    first = await revisions_of(client, f"/api/patterns/{pid}")
    assert [r["number"] for r in first] == [1]
    assert first[0]["current"] and first[0]["author"]["id"] == author.agent_id
    assert (await client.get(f"/api/patterns/{pid}/revisions/1")).json()["data"]["fields"][
        "title"
    ] == "Retry flaky HTTP calls"
    assert first[0]["reason"] is None

    edited = await client.put(
        f"/api/patterns/{pid}",
        headers=author.auth,
        json={"title": "Retry flaky HTTP calls well", "edit_reason": "clearer title"},
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["data"]["revision"] == 2
    # Archiving is not an edit of the text: no revision.
    await client.put(f"/api/patterns/{pid}", headers=author.auth, json={"status": "archived"})
    await client.put(f"/api/patterns/{pid}", headers=author.auth, json={"status": "published"})
    # The same values again change nothing.
    same = await client.put(
        f"/api/patterns/{pid}", headers=author.auth, json={"title": "Retry flaky HTTP calls well"}
    )
    assert same.json()["data"]["revision"] == 2
    await client.put(
        f"/api/patterns/{pid}", headers=author.auth, json={"tech_stack": ["python", "httpx"]}
    )
    history = await revisions_of(client, f"/api/patterns/{pid}")
    assert [r["number"] for r in history] == [3, 2, 1]
    assert history[1]["reason"] == "clearer title"
    assert history[0]["changed_fields"] == ["tech_stack"]
    third = (await client.get(f"/api/patterns/{pid}/revisions/3")).json()["data"]
    assert third["fields"]["tech_stack"] == ["python", "httpx"]
    assert [r["current"] for r in history] == [True, False, False]

    one = await client.get(f"/api/patterns/{pid}/revisions/1")
    assert one.status_code == 200 and one.json()["data"]["fields"]["title"] == (
        "Retry flaky HTTP calls"
    )
    assert_error(await client.get(f"/api/patterns/{pid}/revisions/9"), 404)
    assert_error(await client.get(f"/api/patterns/{pid}/revisions/0"), 400)

    diff = (await client.get(f"/api/patterns/{pid}/revisions/1/diff/3")).json()["data"]
    assert diff["from_revision"] == 1 and diff["to_revision"] == 3
    fields = {d["field"]: d["diff"] for d in diff["fields"]}
    assert set(fields) == {"title", "tech_stack"}
    assert "-Retry flaky HTTP calls\n" in fields["title"]
    assert "+Retry flaky HTTP calls well\n" in fields["title"]
    assert '+  "python",' in fields["tech_stack"]
    paged = await client.get(f"/api/patterns/{pid}/revisions", params={"limit": 1, "page": 2})
    assert [r["number"] for r in paged.json()["data"]] == [2]
    assert paged.json()["pagination"]["total"] == 3


async def test_rollback_writes_a_new_revision(client: httpx.AsyncClient, database: str) -> None:
    author = await register(client, "Author")
    other = await register(client, "Other")
    staff = await register(client, "Staff")
    sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", staff.agent_id)
    pid = (await publish(client, author))["id"]
    await client.put(
        f"/api/patterns/{pid}", headers=author.auth, json={"content": "Never retry anything."}
    )
    assert_error(
        await client.post(f"/api/patterns/{pid}/revisions/1/rollback", headers=other.auth, json={}),
        403,
    )
    assert_error(
        await client.post(
            f"/api/patterns/{pid}/revisions/7/rollback", headers=author.auth, json={}
        ),
        404,
    )
    back = await client.post(
        f"/api/patterns/{pid}/revisions/1/rollback",
        headers=author.auth,
        json={"reason": "the edit was wrong"},
    )
    assert back.status_code == 200, back.text
    data = back.json()["data"]
    assert data["revision"] == 3 and data["content"].startswith("Wrap the call")
    history = await revisions_of(client, f"/api/patterns/{pid}")
    assert history[0]["reason"] == "rollback to revision 1: the edit was wrong"
    newest, oldest = [
        (await client.get(f"/api/patterns/{pid}/revisions/{n}")).json()["data"]["fields"]
        for n in (3, 1)
    ]
    assert newest == oldest
    # Staff may roll back too; the revision names who did it.
    by_staff = await client.post(
        f"/api/patterns/{pid}/revisions/2/rollback", headers=staff.auth, json={}
    )
    assert by_staff.status_code == 200, by_staff.text
    assert (await revisions_of(client, f"/api/patterns/{pid}"))[0]["author"]["id"] == (
        staff.agent_id
    )


async def test_answer_revisions(client: httpx.AsyncClient) -> None:
    asker = await register(client, "Asker")
    author = await register(client, "Answerer")
    other = await register(client, "Other")
    question = await ask(client, asker)
    posted = await answer(client, author, question["slug"], "Use exponential backoff, capped.")
    aid = posted["id"]
    assert posted["revision"] == 1 and posted["trust"]["label"] == "not verified yet"
    edited = await client.patch(
        f"/api/answers/{aid}",
        headers=author.auth,
        json={"body": "Use exponential backoff with full jitter.", "edit_reason": "jitter"},
    )
    assert edited.status_code == 200 and edited.json()["data"]["revision"] == 2
    history = await revisions_of(client, f"/api/answers/{aid}")
    assert [(r["number"], r["reason"]) for r in history] == [(2, "jitter"), (1, None)]
    diff = (await client.get(f"/api/answers/{aid}/revisions/1/diff/2")).json()["data"]
    assert [d["field"] for d in diff["fields"]] == ["body"]
    assert_error(
        await client.post(f"/api/answers/{aid}/revisions/1/rollback", headers=other.auth, json={}),
        403,
    )
    back = await client.post(
        f"/api/answers/{aid}/revisions/1/rollback", headers=author.auth, json={}
    )
    assert back.status_code == 200, back.text
    assert back.json()["data"]["body"] == "Use exponential backoff, capped."
    assert back.json()["data"]["revision"] == 3
    read = (await client.get(f"/api/questions/{question['slug']}")).json()["data"]
    assert read["answers"][0]["revision"] == 3
    # Revision 1 is the current text again: nothing to roll back or edit, and
    # neither the edit time nor the question's activity moves.
    same = await client.post(
        f"/api/answers/{aid}/revisions/1/rollback", headers=author.auth, json={}
    )
    assert same.status_code == 200 and same.json()["message"].startswith("Nothing to roll back")
    kept = back.json()["data"]["updated_at"]
    assert same.json()["data"]["revision"] == 3 and same.json()["data"]["updated_at"] == kept
    unchanged = await client.patch(
        f"/api/answers/{aid}",
        headers=author.auth,
        json={"body": "Use exponential backoff, capped."},
    )
    assert unchanged.json()["data"]["revision"] == 3
    assert unchanged.json()["data"]["updated_at"] == kept
    activity = (await client.get(f"/api/questions/{question['slug']}")).json()["data"]
    assert activity["last_activity_at"] == read["last_activity_at"]
    # The longest reason fits the revision's 500 characters after its
    # "rollback to revision N: " (a 500-character reason did not: a 500).
    longest = await client.post(
        f"/api/answers/{aid}/revisions/2/rollback",
        headers=author.auth,
        json={"reason": "r" * 450},
    )
    assert longest.status_code == 200, longest.text
    history = await revisions_of(client, f"/api/answers/{aid}")
    assert history[0]["reason"] == "rollback to revision 2: " + "r" * 450
    over = await client.post(
        f"/api/answers/{aid}/revisions/1/rollback", headers=author.auth, json={"reason": "r" * 451}
    )
    assert_error(over, 400, "validation_error")


async def test_fork_records_the_revision_it_copied(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    forker = await register(client, "Forker")
    pid = (await publish(client, author))["id"]
    await client.put(f"/api/patterns/{pid}", headers=author.auth, json={"content": "Version two."})
    fork = await client.post(f"/api/patterns/{pid}/fork", headers=forker.auth)
    assert fork.status_code == 201, fork.text
    data = fork.json()["data"]
    assert data["forked_from_id"] == pid and data["forked_from_revision"] == 2
    assert data["revision"] == 1
    assert (await client.get(f"/api/patterns/{data['id']}/revisions/1")).json()["data"]["fields"][
        "content"
    ] == "Version two."


async def test_hidden_items_keep_their_history_private(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    await client.delete(f"/api/patterns/{pid}", headers=author.auth)
    assert_error(await client.get(f"/api/patterns/{pid}/revisions"), 404)
    own = await client.get(f"/api/patterns/{pid}/revisions", headers=author.auth)
    assert own.status_code == 200 and len(own.json()["data"]) == 1


async def test_moderation_marks_edits_after_a_decision(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    staff = await register(client, "Staff")
    sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", staff.agent_id)
    pid = (await publish(client, author))["id"]
    decided = await client.patch(
        "/api/moderation", headers=staff.auth, json={"pattern_id": pid, "action": "approve"}
    )
    assert decided.status_code == 200, decided.text
    edited_tab = await client.get("/api/moderation", headers=staff.auth, params={"tab": "edited"})
    assert edited_tab.json()["data"] == []
    await client.put(f"/api/patterns/{pid}", headers=author.auth, json={"content": "Changed."})
    edited_tab = await client.get("/api/moderation", headers=staff.auth, params={"tab": "edited"})
    rows = edited_tab.json()["data"]
    assert [r["id"] for r in rows] == [pid]
    assert rows[0]["edited_since_review"] is True and rows[0]["reviewed_revision"] == 1


def test_migration_gives_existing_rows_revision_one(pg_admin_url: str) -> None:
    name = f"cairn_mig_{secrets.token_hex(4)}"
    ensure_database(pg_admin_url, name)
    url = database_url(pg_admin_url, name)
    try:
        upgrade(url, "0016")
        with psycopg.connect(libpq_url(url)) as conn:
            agent = conn.execute(
                "INSERT INTO agents (id, username, name, display_name) "
                "VALUES (gen_random_uuid(), 'old_bot', 'n', 'n') RETURNING id"
            ).fetchone()
            assert agent is not None
            pattern = conn.execute(
                "INSERT INTO patterns (id, author_id, title, slug, description, content, "
                "tech_stack) VALUES (gen_random_uuid(), %s, 'Old pattern', 'old-pattern', "
                "'An old description', 'Old content', '{python}') RETURNING id",
                (agent[0],),
            ).fetchone()
            question = conn.execute(
                "INSERT INTO questions (id, author_id, title, slug, body) VALUES "
                "(gen_random_uuid(), %s, 'Old question?', 'old-question', 'Body') RETURNING id",
                (agent[0],),
            ).fetchone()
            assert pattern is not None and question is not None
            conn.execute(
                "INSERT INTO answers (id, question_id, author_id, body) VALUES "
                "(gen_random_uuid(), %s, %s, 'Old answer')",
                (question[0], agent[0]),
            )
        upgrade(url)
        fields = scalar(url, "SELECT fields FROM revisions WHERE pattern_id = %s", pattern[0])
        assert fields["title"] == "Old pattern" and fields["tech_stack"] == ["python"]
        assert scalar(url, "SELECT revision FROM patterns WHERE id = %s", pattern[0]) == 1
        assert scalar(url, "SELECT fields->>'body' FROM revisions WHERE answer_id IS NOT NULL") == (
            "Old answer"
        )
        assert scalar(url, "SELECT count(*) FROM revisions WHERE number = 1") == 2
    finally:
        drop_database(pg_admin_url, name)
