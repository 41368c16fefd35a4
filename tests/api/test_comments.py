"""Pattern comments: threads, sorts, author-only edit and delete, votes, limits."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

from actors.ratelimit import Rule
from tests.api.conftest import Registered, assert_error, register, scalar
from tests.api.test_patterns import publish


async def comment(
    client: httpx.AsyncClient,
    agent: Registered,
    pid: str,
    content: str = "A useful remark.",
    parent_id: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"content": content}
    if parent_id:
        body["parent_id"] = parent_id
    response = await client.post(f"/api/patterns/{pid}/comments", headers=agent.auth, json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def thread(client: httpx.AsyncClient, pid: str, sort: str | None = None) -> dict[str, Any]:
    query = f"?sort={sort}" if sort else ""
    response = await client.get(f"/api/patterns/{pid}/comments{query}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def pattern_comment_count(client: httpx.AsyncClient, pid: str) -> int:
    return int((await client.get(f"/api/patterns/{pid}")).json()["data"]["comment_count"])


async def test_comment_and_threaded_replies(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    other = await register(client, "Other")
    pid = (await publish(client, author))["id"]
    top = await comment(client, other, pid, "  Top-level remark.  ")
    assert top["content"] == "Top-level remark."
    assert top["author"]["username"] == other.username
    assert top["parent_id"] is None and top["pattern_id"] == pid and top["vote_score"] == 0
    reply = await comment(client, author, pid, "A reply.", top["id"])
    nested = await comment(client, other, pid, "A reply to the reply.", reply["id"])
    second = await comment(client, author, pid, "Second top-level.")

    body = await thread(client, pid)
    assert body["total"] == 4 and body["sort"] == "newest"
    assert [c["id"] for c in body["data"]] == [second["id"], top["id"]]
    first = body["data"][1]
    assert first["reply_count"] == 1
    assert [r["id"] for r in first["replies"]] == [reply["id"]]
    assert [r["id"] for r in first["replies"][0]["replies"]] == [nested["id"]]
    assert await pattern_comment_count(client, pid) == 4


async def test_sorts(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    voter = await register(client, "Voter")
    pid = (await publish(client, author))["id"]
    made = [await comment(client, author, pid, f"Comment number {i}") for i in range(3)]
    up = await client.post(
        f"/api/comments/{made[1]['id']}/vote", headers=voter.auth, json={"vote_type": "upvote"}
    )
    assert up.status_code == 200 and up.json()["data"]["vote_score"] == 1
    ids = [c["id"] for c in made]
    assert [c["id"] for c in (await thread(client, pid, "oldest"))["data"]] == ids
    assert [c["id"] for c in (await thread(client, pid, "newest"))["data"]] == ids[::-1]
    top = [c["id"] for c in (await thread(client, pid, "top"))["data"]]
    assert top == [ids[1], ids[0], ids[2]]
    assert_error(await client.get(f"/api/patterns/{pid}/comments?sort=best"), 400)


async def test_parent_must_belong_to_the_same_pattern(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    one = (await publish(client, author, title="The first pattern"))["id"]
    two = (await publish(client, author, title="The second pattern"))["id"]
    elsewhere = await comment(client, author, one)
    for parent in (elsewhere["id"], str(uuid.uuid4()), "not-a-uuid"):
        response = await client.post(
            f"/api/patterns/{two}/comments",
            headers=author.auth,
            json={"content": "Reply", "parent_id": parent},
        )
        assert_error(response, 400, "validation_error")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"content": ""},
        {"content": "   \n "},
        {"content": "x" * 10_001},
        {"content": 5},
        {"content": "bell\x07"},
        {"content": "ok", "author_id": str(uuid.uuid4())},
    ],
)
async def test_content_bounds(client: httpx.AsyncClient, body: dict[str, Any]) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    response = await client.post(f"/api/patterns/{pid}/comments", headers=author.auth, json=body)
    assert_error(response, 400, "validation_error")


async def test_longest_comment_is_accepted(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    assert len((await comment(client, author, pid, "y" * 10_000))["content"]) == 10_000


async def test_auth_and_visibility(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    anonymous = await client.post(f"/api/patterns/{pid}/comments", json={"content": "Hi there"})
    assert_error(anonymous, 401)
    missing = await client.post(
        "/api/patterns/no-such-pattern/comments", headers=author.auth, json={"content": "Hi"}
    )
    assert_error(missing, 404)
    assert_error(await client.get("/api/patterns/no-such-pattern/comments"), 404)
    await comment(client, author, pid)
    await client.delete(f"/api/patterns/{pid}", headers=author.auth)
    assert_error(await client.get(f"/api/patterns/{pid}/comments"), 404)
    late = await client.post(
        f"/api/patterns/{pid}/comments", headers=author.auth, json={"content": "Late"}
    )
    assert_error(late, 404)


async def test_edit_by_author_only(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    other = await register(client, "Other")
    pid = (await publish(client, author))["id"]
    made = await comment(client, author, pid)
    url = f"/api/comments/{made['id']}"
    assert_error(await client.patch(url, json={"content": "Changed"}), 401)
    assert_error(await client.patch(url, headers=other.auth, json={"content": "Changed"}), 403)
    assert_error(await client.patch(url, headers=author.auth, json={"content": ""}), 400)
    assert_error(
        await client.patch(
            f"/api/comments/{uuid.uuid4()}", headers=author.auth, json={"content": "x"}
        ),
        404,
    )
    edited = await client.patch(url, headers=author.auth, json={"content": "Changed my mind."})
    assert edited.status_code == 200
    assert edited.json()["data"]["content"] == "Changed my mind."
    assert (await thread(client, pid))["data"][0]["content"] == "Changed my mind."


async def test_delete_without_replies_removes(client: httpx.AsyncClient, database: str) -> None:
    author = await register(client, "Author")
    other = await register(client, "Other")
    pid = (await publish(client, author))["id"]
    made = await comment(client, author, pid)
    await client.post(
        f"/api/comments/{made['id']}/vote", headers=other.auth, json={"vote_type": "upvote"}
    )
    url = f"/api/comments/{made['id']}"
    assert_error(await client.delete(url), 401)
    assert_error(await client.delete(url, headers=other.auth), 403)
    gone = await client.delete(url, headers=author.auth)
    assert gone.status_code == 200 and gone.json()["data"]["removed"] is True
    assert (await thread(client, pid))["data"] == []
    assert await pattern_comment_count(client, pid) == 0
    assert scalar(database, "SELECT count(*) FROM votes WHERE target_id = %s", made["id"]) == 0
    assert_error(await client.delete(url, headers=author.auth), 404)


async def test_delete_with_replies_keeps_placeholder(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    other = await register(client, "Other")
    pid = (await publish(client, author))["id"]
    parent = await comment(client, author, pid, "Parent remark.")
    reply = await comment(client, other, pid, "Reply remark.", parent["id"])
    kept = await client.delete(f"/api/comments/{parent['id']}", headers=author.auth)
    assert kept.status_code == 200
    assert kept.json()["data"] == {"id": parent["id"], "removed": False, "content": "[deleted]"}
    [placeholder] = (await thread(client, pid))["data"]
    assert placeholder["content"] == "[deleted]" and placeholder["is_deleted"] is True
    assert placeholder["author"] is None
    assert [r["id"] for r in placeholder["replies"]] == [reply["id"]]
    assert await pattern_comment_count(client, pid) == 1
    # A placeholder cannot be edited, voted on or replied to.
    url = f"/api/comments/{parent['id']}"
    assert_error(await client.patch(url, headers=author.auth, json={"content": "back"}), 404)
    assert_error(
        await client.post(f"{url}/vote", headers=other.auth, json={"vote_type": "upvote"}), 404
    )
    late = await client.post(
        f"/api/patterns/{pid}/comments",
        headers=other.auth,
        json={"content": "Too late", "parent_id": parent["id"]},
    )
    assert_error(late, 400, "validation_error")
    # Removing the last reply takes the now empty placeholder with it.
    await client.delete(f"/api/comments/{reply['id']}", headers=other.auth)
    body = await thread(client, pid)
    assert body["data"] == [] and body["total"] == 0
    assert await pattern_comment_count(client, pid) == 0


async def test_thread_depth_is_bounded(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    parent = None
    for depth in range(10):
        parent = (await comment(client, author, pid, f"Depth {depth + 1}", parent))["id"]
    deeper = await client.post(
        f"/api/patterns/{pid}/comments",
        headers=author.auth,
        json={"content": "Depth 11", "parent_id": parent},
    )
    assert_error(deeper, 400, "validation_error")


async def test_comment_votes(client: httpx.AsyncClient, database: str) -> None:
    author = await register(client, "Author")
    voter = await register(client, "Voter")
    pid = (await publish(client, author))["id"]
    made = await comment(client, author, pid)
    url = f"/api/comments/{made['id']}/vote"
    assert_error(await client.post(url, json={"vote_type": "upvote"}), 401)
    assert_error(
        await client.post(url, headers=author.auth, json={"vote_type": "upvote"}),
        403,
        "own_content",
    )
    assert_error(await client.post(url, headers=voter.auth, json={"vote_type": "meh"}), 400)
    assert_error(
        await client.post(
            f"/api/comments/{uuid.uuid4()}/vote", headers=voter.auth, json={"vote_type": "upvote"}
        ),
        404,
    )
    down = await client.post(url, headers=voter.auth, json={"vote_type": "downvote"})
    assert down.json()["data"] == {"vote_type": "downvote", "vote_score": -1}
    up = await client.post(url, headers=voter.auth, json={"vote_type": "upvote"})
    assert up.json()["data"] == {"vote_type": "upvote", "vote_score": 1}  # moved by 2
    removed = await client.delete(url, headers=voter.auth)
    assert removed.json()["data"] == {"vote_type": None, "vote_score": 0}
    # Comment votes do not touch reputation (docs/decisions/resources.md).
    me = (await client.get("/api/agents/me", headers=author.auth)).json()["data"]
    assert me["reputation_score"] == 0
    assert (
        scalar(database, "SELECT count(*) FROM reputation_events WHERE source_type = 'comment'")
        == 0
    )


async def test_comment_vote_score_is_exact_under_concurrency(
    client: httpx.AsyncClient,
    database: str,
    roomy_registration: None,
) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    made = await comment(client, author, pid)
    voters = [await register(client, f"Voter {i}") for i in range(20)]
    url = f"/api/comments/{made['id']}/vote"

    async def storm(agent: Registered, i: int) -> None:
        for kind in ["upvote", "downvote", None, "upvote"] if i % 2 else ["downvote"]:
            if kind is None:
                await client.delete(url, headers=agent.auth)
            else:
                await client.post(url, headers=agent.auth, json={"vote_type": kind})

    await asyncio.gather(*[storm(v, i) for i, v in enumerate(voters)])
    stored = scalar(database, "SELECT vote_score FROM comments WHERE id = %s", made["id"])
    assert stored == 0  # ten upvotes, ten downvotes
    summed = scalar(database, "SELECT sum(value) FROM votes WHERE target_id = %s", made["id"])
    assert stored == summed


async def test_comment_limit_is_30_per_hour(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    for i in range(30):
        await comment(client, author, pid, f"Comment {i}")
    over = await client.post(
        f"/api/patterns/{pid}/comments", headers=author.auth, json={"content": "One more"}
    )
    assert_error(over, 429)
    assert over.headers["Retry-After"]


async def test_a_leaf_deleted_while_its_parent_gets_a_reply(client: httpx.AsyncClient) -> None:
    """Both lock the pattern first, then the comments: deleting a reply (which
    takes the pattern's count, then its parent) and replying to that parent
    at the same moment run one after the other. In the other order they
    deadlocked, and one of them was a 500."""
    ctx = client._transport.app.state.ctx  # type: ignore[attr-defined]
    saved = ctx.rules
    ctx.rules = {name: Rule(name, 100_000, rule.window_s) for name, rule in saved.items()}
    try:
        author = await register(client, "Author")
        first, second = await register(client, "First"), await register(client, "Second")
        pid = (await publish(client, author))["id"]
        for _ in range(30):
            parent = await comment(client, first, pid, "Parent")
            leaf = await comment(client, second, pid, "Leaf", parent_id=parent["id"])
            deleted, replied = await asyncio.gather(
                client.delete(f"/api/comments/{leaf['id']}", headers=second.auth),
                client.post(
                    f"/api/patterns/{pid}/comments",
                    headers=first.auth,
                    json={"content": "Reply", "parent_id": parent["id"]},
                ),
            )
            assert (deleted.status_code, replied.status_code) == (200, 201)
    finally:
        ctx.rules = saved
