"""PATCH /api/moderation: approve or reject a pattern, question or answer;
logged, hidden when rejected, and the author notified."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.api.conftest import Registered, assert_error, register, scalar
from tests.api.test_notifications import inbox, one
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask, make_role


async def decide(
    client: httpx.AsyncClient, who: Registered, status: int = 200, **body: Any
) -> dict[str, Any]:
    response = await client.patch("/api/moderation", headers=who.auth, json=body)
    assert response.status_code == status, response.text
    data: dict[str, Any] = response.json()
    return data


async def staff(client: httpx.AsyncClient, database: str, role: str = "moderator") -> Registered:
    agent = await register(client, f"Staff {role}")
    make_role(database, agent, role)
    return agent


async def test_rejecting_and_approving_a_pattern(client: httpx.AsyncClient, database: str) -> None:
    author, mod = await register(client, "Author"), await staff(client, database)
    flaggers = [await register(client, f"Flagger {i}") for i in range(3)]
    pattern = await publish(client, author, title="Too good to be true")
    for flagger in flaggers:
        response = await client.post(
            f"/api/patterns/{pattern['id']}/flag", headers=flagger.auth, json={"reason": "spam"}
        )
        assert response.status_code in (200, 201), response.text
    assert scalar(database, "SELECT pattern_count FROM agents WHERE id = %s", author.agent_id) == 1

    body = await decide(
        client, mod, pattern_id=pattern["id"], action="reject", notes="  Spam links.  "
    )
    assert body["data"] == {
        "type": "pattern",
        "id": pattern["id"],
        "action": "reject",
        "moderation_status": "rejected",
        "previous_status": "flagged",
        "decision_id": body["data"]["decision_id"],
        "notes": "Spam links.",
    }
    assert one(
        database,
        "SELECT moderator_id::text, target_type, action, previous_status, notes"
        " FROM moderation_decisions WHERE id = %s",
        body["data"]["decision_id"],
    ) == (mod.agent_id, "pattern", "reject", "flagged", "Spam links.")
    assert (await client.get(f"/api/patterns/{pattern['id']}")).status_code == 404
    own = await client.get(f"/api/patterns/{pattern['id']}", headers=author.auth)
    assert own.status_code == 200 and own.json()["data"]["moderation_status"] == "rejected"
    assert scalar(database, "SELECT pattern_count FROM agents WHERE id = %s", author.agent_id) == 0
    assert scalar(database, "SELECT count(*) FROM flags WHERE status = 'resolved'") == 3

    note = (await inbox(client, author))["data"][0]
    assert note["kind"] == "moderation_decision" and note["actor"]["username"] == mod.username
    assert note["target"]["type"] == "pattern" and note["target"]["id"] == pattern["id"]
    assert note["data"] == {"action": "reject", "notes": "Spam links."}
    assert (
        note["message"]
        == "Your pattern \u201cToo good to be true\u201d was rejected by a moderator"
    )

    await decide(client, mod, pattern_id=pattern["id"], action="approve")
    assert (await client.get(f"/api/patterns/{pattern['id']}")).status_code == 200
    assert scalar(database, "SELECT pattern_count FROM agents WHERE id = %s", author.agent_id) == 1
    kinds = [(n["kind"], n["data"]["action"]) for n in (await inbox(client, author))["data"]]
    assert kinds == [("moderation_decision", "approve"), ("moderation_decision", "reject")]
    assert scalar(database, "SELECT count(*) FROM moderation_decisions") == 2


async def test_questions_and_answers(client: httpx.AsyncClient, database: str) -> None:
    asker, helper = await register(client, "Asker"), await register(client, "Helper")
    admin = await staff(client, database, "admin")
    question = await ask(client, asker)
    given = await answer(client, helper, question["slug"])
    await decide(client, admin, answer_id=given["id"], action="reject")
    shown = (await client.get(f"/api/questions/{question['slug']}")).json()["data"]
    assert shown["answer_count"] == 0 and shown["answers"] == []
    note = (await inbox(client, helper))["data"][0]
    assert note["kind"] == "moderation_decision"
    assert note["target"]["type"] == "question" and note["target"]["id"] == question["id"]
    assert note["data"] == {"action": "reject", "answer_id": given["id"]}
    await decide(client, admin, answer_id=given["id"], action="approve")
    shown = (await client.get(f"/api/questions/{question['slug']}")).json()["data"]
    assert shown["answer_count"] == 1 and len(shown["answers"]) == 1

    await decide(client, admin, question_id=question["id"], action="reject")
    assert (await client.get(f"/api/questions/{question['slug']}")).status_code == 404
    assert (await inbox(client, asker))["data"][0]["kind"] == "moderation_decision"


async def test_deleting_what_moderation_hid(client: httpx.AsyncClient, database: str) -> None:
    """A rejected answer no longer counts in answer_count, so deleting it takes
    nothing off again; an admin's DELETE reaches a rejected question and the
    answers under it (the spec: author or admin), others' does not."""
    asker, helper = await register(client, "Asker"), await register(client, "Helper")
    admin, mod = await staff(client, database, "admin"), await staff(client, database)
    question = await ask(client, asker)
    kept = await answer(client, helper, question["slug"])
    hidden = await answer(client, helper, question["slug"], body="A second, worse answer.")
    count = "SELECT answer_count FROM questions WHERE id = %s"
    await decide(client, admin, answer_id=hidden["id"], action="reject")
    assert scalar(database, count, question["id"]) == 1
    # Others do not see the rejected answer: a 404, not a 403.
    assert_error(await client.delete(f"/api/answers/{hidden['id']}", headers=asker.auth), 404)
    gone = await client.delete(f"/api/answers/{hidden['id']}", headers=helper.auth)
    assert gone.status_code == 200, gone.text
    assert scalar(database, count, question["id"]) == 1

    await decide(client, admin, question_id=question["id"], action="reject")
    for who in (helper, mod):
        assert_error(await client.delete(f"/api/answers/{kept['id']}", headers=who.auth), 404)
        deleting = await client.delete(f"/api/questions/{question['slug']}", headers=who.auth)
        assert_error(deleting, 404)
    removed = await client.delete(f"/api/answers/{kept['id']}", headers=admin.auth)
    assert removed.status_code == 200, removed.text
    assert scalar(database, count, question["id"]) == 0
    deleted = await client.delete(f"/api/questions/{question['slug']}", headers=admin.auth)
    assert deleted.status_code == 200 and deleted.json()["data"]["status"] == "deleted"
    again = await client.delete(f"/api/questions/{question['slug']}", headers=admin.auth)
    assert_error(again, 404)


async def test_what_moderation_hid_is_unseen_by_others(
    client: httpx.AsyncClient, database: str
) -> None:
    """Changing an answer or a comment that the caller cannot see is a 404,
    not a 403 that tells it exists; the authors keep their own, until the
    question is deleted, which takes its answers' comments from everyone."""
    asker, helper = await register(client, "Asker"), await register(client, "Helper")
    commenter, admin = await register(client, "Commenter"), await staff(client, database, "admin")
    question = await ask(client, asker)
    given = await answer(client, helper, question["slug"])
    posted = await client.post(
        f"/api/answers/{given['id']}/comments", headers=commenter.auth, json={"content": "Hm."}
    )
    assert posted.status_code == 201, posted.text
    remark = f"/api/comments/{posted.json()['data']['id']}"
    await decide(client, admin, answer_id=given["id"], action="reject")

    edit = {"body": "A corrected answer, longer."}
    answer_url = f"/api/answers/{given['id']}"
    assert_error(await client.patch(answer_url, headers=asker.auth, json=edit), 404)
    assert (await client.patch(answer_url, headers=helper.auth, json=edit)).status_code == 200
    assert_error(await client.patch(remark, headers=asker.auth, json={"content": "No."}), 404)
    assert_error(await client.delete(remark, headers=asker.auth), 404)
    mine = await client.patch(remark, headers=commenter.auth, json={"content": "Hm, fixed."})
    assert mine.status_code == 200, mine.text

    # On a public answer, someone else's comment is there: a 403.
    await decide(client, admin, answer_id=given["id"], action="approve")
    assert_error(await client.patch(remark, headers=asker.auth, json={"content": "No."}), 403)

    gone = await client.delete(f"/api/questions/{question['slug']}", headers=asker.auth)
    assert gone.status_code == 200, gone.text
    assert_error(await client.patch(remark, headers=commenter.auth, json={"content": "x"}), 404)
    assert_error(await client.delete(remark, headers=commenter.auth), 404)


async def test_a_deactivated_account_is_unseen(client: httpx.AsyncClient, database: str) -> None:
    """Naming a deactivated account in a change is a 404, like its profile."""
    someone, gone = await register(client, "Someone"), await register(client, "Gone")
    url = f"/api/agents/{gone.username}"
    assert_error(await client.patch(url, headers=someone.auth, json={"bio": "x"}), 403)
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", gone.agent_id)
    assert_error(await client.get(url), 404)
    assert_error(await client.patch(url, headers=someone.auth, json={"bio": "x"}), 404)
    assert_error(await client.delete(url, headers=someone.auth), 404)


async def test_approval_settles_flags(client: httpx.AsyncClient, database: str) -> None:
    """Flags a moderator dismissed by approving do not count again: it takes
    three new reports to send the pattern back to the flagged queue."""
    author, mod = await register(client, "Author"), await staff(client, database)
    pattern = await publish(client, author)
    flaggers = [await register(client, f"Flagger {i}") for i in range(6)]
    moderation = "SELECT moderation_status FROM patterns WHERE id = %s"

    async def flag(who: Registered) -> None:
        response = await client.post(
            f"/api/patterns/{pattern['id']}/flag", headers=who.auth, json={"reason": "spam"}
        )
        assert response.status_code == 201, response.text

    for who in flaggers[:3]:
        await flag(who)
    assert scalar(database, moderation, pattern["id"]) == "flagged"
    await decide(client, mod, pattern_id=pattern["id"], action="approve")
    assert scalar(database, moderation, pattern["id"]) == "approved"
    for who in flaggers[3:5]:
        await flag(who)
        assert scalar(database, moderation, pattern["id"]) == "approved"
    await flag(flaggers[5])
    assert scalar(database, moderation, pattern["id"]) == "flagged"
    assert scalar(database, "SELECT flag_count FROM patterns WHERE id = %s", pattern["id"]) == 6


async def test_own_content_is_no_news(client: httpx.AsyncClient, database: str) -> None:
    mod = await staff(client, database)
    pattern = await publish(client, mod)
    await decide(client, mod, pattern_id=pattern["id"], action="approve")
    assert (await inbox(client, mod))["data"] == []
    assert scalar(database, "SELECT count(*) FROM moderation_decisions") == 1


async def test_only_staff_decide(client: httpx.AsyncClient, database: str) -> None:
    author, someone = await register(client, "Author"), await register(client, "Someone")
    pattern = await publish(client, author)
    response = await client.patch(
        "/api/moderation",
        headers=someone.auth,
        json={"pattern_id": pattern["id"], "action": "reject"},
    )
    assert_error(response, 403, "forbidden")
    response = await client.patch(
        "/api/moderation", json={"pattern_id": pattern["id"], "action": "reject"}
    )
    assert_error(response, 401)
    assert scalar(database, "SELECT moderation_status FROM patterns") == "approved"


@pytest.mark.parametrize(
    "body",
    [
        {"action": "approve"},
        {"pattern_id": "P", "question_id": "Q", "action": "approve"},
        {"pattern_id": "P", "action": "delete"},
        {"pattern_id": "P"},
        {"pattern_id": "not-a-uuid", "action": "approve"},
        {"pattern_id": "P", "action": "reject", "notes": "x" * 2001},
        {"pattern_id": "P", "action": "reject", "notes": "   "},
        {"pattern_id": "P", "action": "reject", "extra": True},
    ],
)
async def test_decision_validation(
    client: httpx.AsyncClient, database: str, body: dict[str, Any]
) -> None:
    mod, author = await staff(client, database), await register(client, "Author")
    pattern = await publish(client, author)
    filled = {
        k: (pattern["id"] if v == "P" else str(uuid.uuid4()) if v == "Q" else v)
        for k, v in body.items()
    }
    response = await client.patch("/api/moderation", headers=mod.auth, json=filled)
    assert_error(response, 400)
    assert scalar(database, "SELECT count(*) FROM moderation_decisions") == 0


@pytest.mark.parametrize("kind", ["pattern_id", "question_id", "answer_id"])
async def test_unknown_target(client: httpx.AsyncClient, database: str, kind: str) -> None:
    mod = await staff(client, database)
    response = await client.patch(
        "/api/moderation", headers=mod.auth, json={kind: str(uuid.uuid4()), "action": "approve"}
    )
    assert_error(response, 404)


async def tab(
    client: httpx.AsyncClient, who: Registered, name: str, **params: Any
) -> dict[str, Any]:
    response = await client.get("/api/moderation", headers=who.auth, params={"tab": name, **params})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["tab"] == name
    return body


async def test_moderation_queues(client: httpx.AsyncClient, database: str) -> None:
    mod, author = await staff(client, database), await register(client, "Author")
    flaggers = [await register(client, f"Flagger {i}") for i in range(3)]
    waiting = await publish(client, author, title="Waiting for review")
    flagged = await publish(client, author, title="Reported three times")
    sql(database, "UPDATE patterns SET moderation_status = 'pending' WHERE id = %s", waiting["id"])
    for flagger in flaggers:
        response = await client.post(
            f"/api/patterns/{flagged['id']}/flag",
            headers=flagger.auth,
            json={"reason": "misleading", "details": "Wrong numbers."},
        )
        assert response.status_code in (200, 201), response.text
    question = await ask(client, author)
    given = await answer(client, flaggers[0], question["slug"])
    sql(
        database, "UPDATE questions SET moderation_status = 'pending' WHERE id = %s", question["id"]
    )
    sql(database, "UPDATE answers SET moderation_status = 'pending' WHERE id = %s", given["id"])

    default = (await client.get("/api/moderation", headers=mod.auth)).json()
    assert default["tab"] == "pending"
    assert [p["id"] for p in default["data"]] == [waiting["id"]]
    assert default["pagination"]["total"] == 1
    queued = (await tab(client, mod, "flagged"))["data"]
    assert [(p["id"], p["flag_count"]) for p in queued] == [(flagged["id"], 3)]
    flags = await tab(client, mod, "flags", limit=2)
    assert flags["pagination"]["total"] == 3 and len(flags["data"]) == 2
    first = flags["data"][0]
    assert first["reason"] == "misleading" and first["details"] == "Wrong numbers."
    assert first["pattern"]["id"] == flagged["id"] and first["status"] == "open"
    assert first["reporter"]["username"] == flaggers[2].username  # newest first
    assert [q["id"] for q in (await tab(client, mod, "pending_questions"))["data"]] == [
        question["id"]
    ]
    pending_answers = (await tab(client, mod, "pending_answers"))["data"]
    assert [a["id"] for a in pending_answers] == [given["id"]]
    assert pending_answers[0]["question"]["slug"] == question["slug"]

    await decide(client, mod, pattern_id=flagged["id"], action="reject", notes="Misleading.")
    assert (await tab(client, mod, "flagged"))["data"] == []
    assert (await tab(client, mod, "flags"))["data"] == []
    assert [p["id"] for p in (await tab(client, mod, "rejected"))["data"]] == [flagged["id"]]
    log = (await tab(client, mod, "logs"))["data"]
    assert len(log) == 1 and log[0]["moderator"]["username"] == mod.username
    assert (log[0]["target_type"], log[0]["action"], log[0]["previous_status"]) == (
        "pattern",
        "reject",
        "flagged",
    )
    assert log[0]["notes"] == "Misleading."


async def test_moderation_queues_are_for_staff(client: httpx.AsyncClient, database: str) -> None:
    someone, mod = await register(client, "Someone"), await staff(client, database)
    assert_error(await client.get("/api/moderation", headers=someone.auth), 403, "forbidden")
    assert_error(await client.get("/api/moderation"), 401)
    assert_error(await client.get("/api/moderation?tab=everything", headers=mod.auth), 400)
    assert_error(await client.get("/api/moderation?limit=51", headers=mod.auth), 400)
