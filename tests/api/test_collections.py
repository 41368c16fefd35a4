"""Collections: owner-only changes, private visibility, pattern counts, paging."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.api.conftest import Registered, assert_error, register
from tests.api.test_patterns import publish, sql


async def create(client: httpx.AsyncClient, agent: Registered, **fields: Any) -> dict[str, Any]:
    body = {"name": "Useful recipes", "description": "Things I reuse.", **fields}
    response = await client.post("/api/collections", headers=agent.auth, json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def add(client: httpx.AsyncClient, agent: Registered, cid: str, pid: str) -> httpx.Response:
    return await client.post(
        f"/api/collections/{cid}/patterns", headers=agent.auth, json={"pattern_id": pid}
    )


async def test_create_read_and_patterns(client: httpx.AsyncClient) -> None:
    owner = await register(client, "Owner")
    author = await register(client, "Author")
    first = await publish(client, author, title="First useful pattern")
    second = await publish(client, author, title="Second useful pattern")
    made = await create(client, owner)
    assert made["name"] == "Useful recipes" and made["is_public"] is True
    assert made["pattern_count"] == 0 and made["owner"]["username"] == owner.username
    cid = made["id"]
    added = await add(client, owner, cid, first["id"])
    assert added.status_code == 201 and added.json()["data"]["pattern_count"] == 1
    again = await add(client, owner, cid, first["id"])
    assert again.status_code == 200 and again.json()["data"]["pattern_count"] == 1
    assert (await add(client, owner, cid, second["id"])).status_code == 201

    detail = (await client.get(f"/api/collections/{cid}")).json()["data"]
    assert detail["pattern_count"] == 2
    assert [p["id"] for p in detail["patterns"]] == [first["id"], second["id"]]
    assert detail["patterns"][0]["author"]["username"] == author.username
    assert detail["patterns"][0]["added_at"]

    removed = await client.delete(
        f"/api/collections/{cid}/patterns",
        params={"pattern_id": first["id"]},
        headers=owner.auth,
    )
    assert removed.status_code == 200 and removed.json()["data"]["pattern_count"] == 1
    not_there = await client.delete(
        f"/api/collections/{cid}/patterns",
        params={"pattern_id": first["id"]},
        headers=owner.auth,
    )
    assert_error(not_there, 404)
    no_query = await client.delete(f"/api/collections/{cid}/patterns", headers=owner.auth)
    assert_error(no_query, 400)


async def test_hidden_patterns_are_not_shown_or_counted(client: httpx.AsyncClient) -> None:
    owner = await register(client, "Owner")
    author = await register(client, "Author")
    pattern = await publish(client, author)
    cid = (await create(client, owner))["id"]
    await add(client, owner, cid, pattern["id"])
    await client.delete(f"/api/patterns/{pattern['id']}", headers=author.auth)
    detail = (await client.get(f"/api/collections/{cid}")).json()["data"]
    assert detail["patterns"] == [] and detail["pattern_count"] == 0
    assert_error(await add(client, owner, cid, pattern["id"]), 404)  # archived
    assert_error(await add(client, owner, cid, str(uuid.uuid4())), 404)
    bad = await client.post(
        f"/api/collections/{cid}/patterns", headers=owner.auth, json={"pattern_id": "nope"}
    )
    assert_error(bad, 400, "validation_error")


async def test_owner_only(client: httpx.AsyncClient) -> None:
    owner = await register(client, "Owner")
    other = await register(client, "Other")
    pattern = await publish(client, other)
    cid = (await create(client, owner))["id"]
    url = f"/api/collections/{cid}"
    assert_error(await client.post("/api/collections", json={"name": "x"}), 401)
    assert_error(await client.patch(url, json={"name": "Mine now"}), 401)
    assert_error(await client.patch(url, headers=other.auth, json={"name": "Mine now"}), 403)
    assert_error(await client.delete(url, headers=other.auth), 403)
    assert_error(await add(client, other, cid, pattern["id"]), 403)
    taken = await client.delete(
        f"{url}/patterns", params={"pattern_id": pattern["id"]}, headers=other.auth
    )
    assert_error(taken, 403)
    missing = f"/api/collections/{uuid.uuid4()}"
    assert_error(await client.get(missing), 404)
    assert_error(await client.patch(missing, headers=owner.auth, json={"name": "x"}), 404)
    assert_error(await client.get("/api/collections/not-a-uuid"), 400)


async def test_update_and_delete(client: httpx.AsyncClient) -> None:
    owner = await register(client, "Owner")
    pattern = await publish(client, owner)
    cid = (await create(client, owner))["id"]
    await add(client, owner, cid, pattern["id"])
    url = f"/api/collections/{cid}"
    changed = await client.patch(
        url, headers=owner.auth, json={"name": "  Renamed  ", "description": None}
    )
    assert changed.status_code == 200
    data = changed.json()["data"]
    assert data["name"] == "Renamed" and data["description"] == "" and data["is_public"] is True
    assert data["pattern_count"] == 1
    for body in ({"name": None}, {"is_public": None}, {"name": ""}, {"is_public": "yes"}):
        assert_error(await client.patch(url, headers=owner.auth, json=body), 400)
    gone = await client.delete(url, headers=owner.auth)
    assert gone.status_code == 200
    assert_error(await client.get(url), 404)
    # The pattern itself stays.
    assert (await client.get(f"/api/patterns/{pattern['id']}")).status_code == 200


async def test_private_collections(client: httpx.AsyncClient) -> None:
    owner = await register(client, "Owner")
    other = await register(client, "Other")
    public = await create(client, owner, name="Shared list")
    private = await create(client, owner, name="Secret list", is_public=False)
    url = f"/api/collections/{private['id']}"
    assert (await client.get(url, headers=owner.auth)).status_code == 200
    assert_error(await client.get(url), 404)
    assert_error(await client.get(url, headers=other.auth), 404)
    assert_error(await client.patch(url, headers=other.auth, json={"name": "x"}), 404)
    listed = (await client.get("/api/collections")).json()["data"]
    assert [c["id"] for c in listed] == [public["id"]]
    mine = await client.get("/api/collections?mine=true", headers=owner.auth)
    assert [c["id"] for c in mine.json()["data"]] == [private["id"], public["id"]]
    assert_error(await client.get("/api/collections?mine=true"), 401)
    # Making it public lists it.
    await client.patch(url, headers=owner.auth, json={"is_public": True})
    listed = (await client.get("/api/collections")).json()["data"]
    assert {c["id"] for c in listed} == {public["id"], private["id"]}


async def test_list_pagination_and_counts(client: httpx.AsyncClient) -> None:
    owner = await register(client, "Owner")
    pattern = await publish(client, owner)
    made = [await create(client, owner, name=f"List {i}") for i in range(23)]
    await add(client, owner, made[-1]["id"], pattern["id"])
    body = (await client.get("/api/collections")).json()
    assert body["pagination"] == {
        "page": 1,
        "limit": 20,
        "total": 23,
        "total_pages": 2,
        "has_more": True,
    }
    assert body["data"][0]["id"] == made[-1]["id"] and body["data"][0]["pattern_count"] == 1
    assert body["data"][1]["pattern_count"] == 0
    last = (await client.get("/api/collections?page=2")).json()
    assert len(last["data"]) == 3 and last["pagination"]["has_more"] is False
    assert_error(await client.get("/api/collections?limit=51"), 400)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "   "},
        {"name": "x" * 101},
        {"name": "two\nlines"},
        {"name": "ok", "description": "d" * 1001},
        {"name": "ok", "is_public": "true"},
        {"name": "ok", "owner_id": str(uuid.uuid4())},
    ],
)
async def test_create_validation(client: httpx.AsyncClient, body: dict[str, Any]) -> None:
    owner = await register(client, "Owner")
    response = await client.post("/api/collections", headers=owner.auth, json=body)
    assert_error(response, 400, "validation_error")


async def test_a_collection_holds_at_most_1000_patterns(
    client: httpx.AsyncClient, database: str
) -> None:
    owner = await register(client, "Owner")
    extra = await publish(client, owner)
    cid = (await create(client, owner))["id"]
    sql(
        database,
        "WITH made AS ("
        " INSERT INTO patterns (id, author_id, title, slug, description, content)"
        " SELECT gen_random_uuid(), %s, 'Bulk pattern ' || n, 'bulk-' || n,"
        " 'A bulk description', 'Body' FROM generate_series(1, 1000) AS n RETURNING id)"
        " INSERT INTO collection_patterns (collection_id, pattern_id) SELECT %s, id FROM made",
        owner.agent_id,
        cid,
    )
    detail = (await client.get(f"/api/collections/{cid}")).json()["data"]
    assert detail["pattern_count"] == 1000 and len(detail["patterns"]) == 1000
    assert_error(await add(client, owner, cid, extra["id"]), 400, "collection_full")
    # One already there is still a harmless repeat.
    held = detail["patterns"][0]["id"]
    again = await add(client, owner, cid, held)
    assert again.status_code == 200 and again.json()["message"] == "Already in the collection."
