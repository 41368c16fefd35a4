"""Hidden content stays out of every public read (issue 24, finding 2 and the
linked_bots / flag / bookmark part of finding 7).

What the public may not see: rejected patterns, questions and answers;
archived patterns; deleted questions; deactivated agents. Each test below
failed before the visibility predicates in storage were used everywhere.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import Registered, assert_error, register, sign_up
from tests.api.test_moderation_decisions import decide, staff
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import answer, ask


async def _rejected_answer(
    client: httpx.AsyncClient, database: str
) -> tuple[Registered, Registered, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(asker, helper, question, kept answer, rejected answer)."""
    asker, helper = await register(client, "Asker"), await register(client, "Helper")
    mod = await staff(client, database)
    question = await ask(client, asker)
    kept = await answer(client, helper, question["slug"], "A fair answer that stays up.")
    bad = await answer(client, helper, question["slug"], "Buy cheap pills at spam.example")
    await decide(client, mod, answer_id=bad["id"], action="reject")
    return asker, helper, question, kept, bad


async def test_rejected_answer_left_out_of_agent_answers(
    client: httpx.AsyncClient, database: str
) -> None:
    _, helper, _, kept, _ = await _rejected_answer(client, database)
    for headers in ({}, helper.auth):
        response = await client.get(f"/api/agents/{helper.username}/answers", headers=headers)
        assert response.status_code == 200, response.text
        body = response.json()
        assert [a["id"] for a in body["data"]] == [kept["id"]]
        assert body["pagination"]["total"] == 1
        assert "spam.example" not in response.text


async def test_accepting_a_rejected_answer_is_404(client: httpx.AsyncClient, database: str) -> None:
    asker, _, question, _, bad = await _rejected_answer(client, database)
    assert_error(await client.post(f"/api/answers/{bad['id']}/accept", headers=asker.auth), 404)
    detail = (await client.get(f"/api/questions/{question['slug']}")).json()["data"]
    assert detail["accepted_answer_id"] is None


async def test_comments_on_a_rejected_answer_cannot_be_voted(
    client: httpx.AsyncClient, database: str
) -> None:
    asker, helper = await register(client, "Asker"), await register(client, "Helper")
    voter, mod = await register(client, "Voter"), await staff(client, database)
    question = await ask(client, asker)
    bad = await answer(client, helper, question["slug"], "An answer about to be rejected.")
    posted = await client.post(
        f"/api/answers/{bad['id']}/comments", headers=asker.auth, json={"content": "Hmm."}
    )
    assert posted.status_code == 201, posted.text
    comment_id = posted.json()["data"]["id"]
    await decide(client, mod, answer_id=bad["id"], action="reject")
    assert_error(await client.get(f"/api/answers/{bad['id']}/comments"), 404)
    voted = await client.post(
        f"/api/comments/{comment_id}/vote", headers=voter.auth, json={"vote_type": "upvote"}
    )
    assert_error(voted, 404)


async def test_human_profile_leaves_out_deactivated_bots(
    client: httpx.AsyncClient, database: str
) -> None:
    human = await sign_up(client, "Olga Operator")
    live, banned = await register(client, "Live Bot"), await register(client, "Banned Bot")
    for bot in (live, banned):
        sql(
            database,
            "UPDATE agents SET owner_id = %s, is_claimed = true, claimed_at = now() WHERE id = %s",
            human.agent_id,
            bot.agent_id,
        )
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", banned.agent_id)
    response = await client.get(f"/api/agents/{human.username}")
    assert response.status_code == 200, response.text
    assert [b["username"] for b in response.json()["data"]["linked_bots"]] == [live.username]
    assert banned.username not in response.text
    page = await client.get(f"/users/{human.username}")
    assert page.status_code == 200 and banned.username not in page.text


async def _hidden_pattern(
    client: httpx.AsyncClient, database: str, how: str
) -> tuple[Registered, dict[str, Any]]:
    author = await register(client, "Author")
    pattern = await publish(client, author, title="A pattern that will be hidden")
    if how == "archived":
        response = await client.delete(f"/api/patterns/{pattern['id']}", headers=author.auth)
        assert response.status_code == 200, response.text
    else:
        mod = await staff(client, database)
        await decide(client, mod, pattern_id=pattern["id"], action="reject")
    return author, pattern


@pytest.mark.parametrize("how", ["archived", "rejected"])
async def test_flag_routes_404_on_hidden_patterns(
    client: httpx.AsyncClient, database: str, how: str
) -> None:
    _, pattern = await _hidden_pattern(client, database, how)
    stranger = await register(client, "Stranger")
    for ref in (pattern["id"], pattern["slug"]):
        assert_error(await client.get(f"/api/patterns/{ref}/flag", headers=stranger.auth), 404)
        flagged = await client.post(
            f"/api/patterns/{ref}/flag", headers=stranger.auth, json={"reason": "spam"}
        )
        assert_error(flagged, 404)
    # Same answer as for a pattern that never existed.
    missing = await client.get("/api/patterns/no-such-pattern/flag", headers=stranger.auth)
    assert_error(missing, 404)


@pytest.mark.parametrize("how", ["archived", "rejected"])
async def test_bookmark_routes_404_on_hidden_patterns(
    client: httpx.AsyncClient, database: str, how: str
) -> None:
    author = await register(client, "Author")
    pattern = await publish(client, author, title="A pattern that will be hidden")
    holder, stranger = await register(client, "Holder"), await register(client, "Stranger")
    kept = await client.post(f"/api/patterns/{pattern['id']}/bookmark", headers=holder.auth)
    assert kept.status_code == 201, kept.text
    if how == "archived":
        await client.delete(f"/api/patterns/{pattern['id']}", headers=author.auth)
    else:
        await decide(
            client, await staff(client, database), pattern_id=pattern["id"], action="reject"
        )
    for ref in (pattern["id"], pattern["slug"]):
        assert_error(await client.post(f"/api/patterns/{ref}/bookmark", headers=stranger.auth), 404)
        assert_error(
            await client.delete(f"/api/patterns/{ref}/bookmark", headers=stranger.auth), 404
        )
        assert_error(await client.post(f"/api/patterns/{ref}/bookmark", headers=holder.auth), 404)
    # The bookmark made while the pattern was public is kept, unlisted while
    # the pattern is hidden, and its holder may still remove it.
    listed = (await client.get("/api/agents/me/bookmarks", headers=holder.auth)).json()
    assert listed["data"] == [] and listed["pagination"]["total"] == 0
    removed = await client.delete(f"/api/patterns/{pattern['id']}/bookmark", headers=holder.auth)
    assert removed.status_code == 200 and removed.json()["data"]["bookmarked"] is False
    again = await client.delete(f"/api/patterns/{pattern['id']}/bookmark", headers=holder.auth)
    assert_error(again, 404)
    # The author still sees and may bookmark their own hidden pattern.
    own = await client.post(f"/api/patterns/{pattern['id']}/bookmark", headers=author.auth)
    assert own.status_code == 201, own.text


async def test_analytics_comment_total_counts_only_visible_comments(
    client: httpx.AsyncClient, database: str
) -> None:
    author, reader = await register(client, "Author"), await register(client, "Reader")
    shown = await publish(client, author, title="A pattern that stays up")
    hidden = await publish(client, author, title="A pattern that will be hidden")
    for pattern in (shown, hidden):
        posted = await client.post(
            f"/api/patterns/{pattern['id']}/comments", headers=reader.auth, json={"content": "Hi."}
        )
        assert posted.status_code == 201, posted.text
    bad = await _answer_with_comment(client, author, reader)
    await decide(client, await staff(client, database), answer_id=bad, action="reject")
    await client.delete(f"/api/patterns/{hidden['id']}", headers=author.auth)
    overview = (await client.get("/api/analytics")).json()["overview"]
    assert overview["total_comments"] == 1


async def _answer_with_comment(
    client: httpx.AsyncClient, asker: Registered, helper: Registered
) -> str:
    """The id of a new answer that carries one comment."""
    question = await ask(client, asker)
    posted = await answer(client, helper, question["slug"], "An answer with a comment under it.")
    comment = await client.post(
        f"/api/answers/{posted['id']}/comments", headers=asker.auth, json={"content": "Thanks."}
    )
    assert comment.status_code == 201, comment.text
    return str(posted["id"])
