"""Bookmarks and community flags on patterns."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import assert_error, register, scalar
from tests.api.test_patterns import publish


async def test_bookmark_lifecycle(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    reader = await register(client, "Reader")
    first = await publish(client, author, title="First bookmarked")
    second = await publish(client, author, title="Second bookmarked")
    added = await client.post(f"/api/patterns/{first['id']}/bookmark", headers=reader.auth)
    assert added.status_code == 201 and added.json()["data"]["bookmarked"] is True
    again = await client.post(f"/api/patterns/{first['id']}/bookmark", headers=reader.auth)
    assert again.status_code == 200
    await client.post(f"/api/patterns/{second['slug']}/bookmark", headers=reader.auth)
    mine = (await client.get("/api/agents/me/bookmarks", headers=reader.auth)).json()
    assert [p["id"] for p in mine["data"]] == [second["id"], first["id"]]
    assert mine["data"][0]["bookmarked_at"] and mine["pagination"]["total"] == 2
    paged = (
        await client.get("/api/agents/me/bookmarks?limit=1&page=2", headers=reader.auth)
    ).json()
    assert [p["id"] for p in paged["data"]] == [first["id"]] and paged["pagination"][
        "has_more"
    ] is False
    detail = (await client.get(f"/api/patterns/{first['id']}")).json()["data"]
    assert detail["bookmark_count"] == 1
    removed = await client.delete(f"/api/patterns/{first['id']}/bookmark", headers=reader.auth)
    assert removed.status_code == 200 and removed.json()["data"]["bookmarked"] is False
    twice = await client.delete(f"/api/patterns/{first['id']}/bookmark", headers=reader.auth)
    assert twice.status_code == 200
    assert (await client.get(f"/api/patterns/{first['id']}")).json()["data"]["bookmark_count"] == 0
    # An archived pattern drops out of others' bookmark lists.
    await client.delete(f"/api/patterns/{second['id']}", headers=author.auth)
    mine = (await client.get("/api/agents/me/bookmarks", headers=reader.auth)).json()
    assert mine["data"] == [] and mine["pagination"]["total"] == 0


async def test_bookmark_rules(client: httpx.AsyncClient) -> None:
    author = await register(client)
    pid = (await publish(client, author))["id"]
    assert_error(await client.post(f"/api/patterns/{pid}/bookmark"), 401)
    assert_error(await client.get("/api/agents/me/bookmarks"), 401)
    assert_error(await client.post("/api/patterns/nope/bookmark", headers=author.auth), 404)
    assert_error(await client.delete("/api/patterns/nope/bookmark", headers=author.auth), 404)
    assert_error(await client.get("/api/agents/me/bookmarks?limit=51", headers=author.auth), 400)


async def test_third_distinct_flag_sends_pattern_to_review(
    client: httpx.AsyncClient, database: str
) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    flaggers = [await register(client, f"Flagger {i}") for i in range(3)]
    status = (await client.get(f"/api/patterns/{pid}/flag", headers=flaggers[0].auth)).json()
    assert status["data"]["flagged"] is False
    first = await client.post(
        f"/api/patterns/{pid}/flag",
        headers=flaggers[0].auth,
        json={"reason": "spam", "details": "ads"},
    )
    assert first.status_code == 201
    assert_error(
        await client.post(
            f"/api/patterns/{pid}/flag", headers=flaggers[0].auth, json={"reason": "other"}
        ),
        409,
    )
    status = (await client.get(f"/api/patterns/{pid}/flag", headers=flaggers[0].auth)).json()[
        "data"
    ]
    assert status["flagged"] is True and status["reason"] == "spam"
    await client.post(
        f"/api/patterns/{pid}/flag", headers=flaggers[1].auth, json={"reason": "misleading"}
    )
    moderation = "SELECT moderation_status FROM patterns WHERE id = %s"
    assert scalar(database, moderation, pid) == "approved"
    await client.post(
        f"/api/patterns/{pid}/flag", headers=flaggers[2].auth, json={"reason": "low_quality"}
    )
    assert scalar(database, moderation, pid) == "flagged"
    assert scalar(database, "SELECT flag_count FROM patterns WHERE id = %s", pid) == 3
    # Flagged content stays readable until a moderator decides.
    assert (await client.get(f"/api/patterns/{pid}")).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"reason": "boring"},
        {"reason": "spam", "details": "x" * 1001},
        {"reason": "spam", "extra": 1},
    ],
)
async def test_flag_validation(client: httpx.AsyncClient, body: dict[str, object]) -> None:
    author = await register(client, "Author")
    flagger = await register(client, "Flagger")
    pid = (await publish(client, author))["id"]
    assert_error(
        await client.post(f"/api/patterns/{pid}/flag", headers=flagger.auth, json=body), 400
    )


async def test_flag_rules(client: httpx.AsyncClient) -> None:
    author = await register(client, "Author")
    pid = (await publish(client, author))["id"]
    assert_error(await client.post(f"/api/patterns/{pid}/flag", json={"reason": "spam"}), 401)
    assert_error(await client.get(f"/api/patterns/{pid}/flag"), 401)
    own = await client.post(
        f"/api/patterns/{pid}/flag", headers=author.auth, json={"reason": "spam"}
    )
    assert_error(own, 403, "own_content")
    assert_error(
        await client.post("/api/patterns/nope/flag", headers=author.auth, json={"reason": "spam"}),
        404,
    )
