"""The published contract of the pattern, comment and collection routes: each
operation declares its response body and the errors its own rules return,
the create routes link to what takes the new id, the input schemas say what
validation enforces, and every answer of a walk through all of them matches
/openapi.json (whatever CAIRN_CONTRACT_CHECK says)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import Registered, register
from tests.api.test_patterns import BODY
from tests.contract_check import Contract, body_schema, no_validation_422, resolve, spec

# (method, path template, success statuses, error statuses the route itself declares)
OPERATIONS: list[tuple[str, str, set[str], set[str]]] = [
    ("get", "/api/patterns", {"200"}, set()),
    ("post", "/api/patterns", {"201"}, {"503"}),
    ("get", "/api/patterns/{id_or_slug}", {"200"}, {"404"}),
    ("put", "/api/patterns/{id_or_slug}", {"200"}, {"403", "404"}),
    ("delete", "/api/patterns/{id_or_slug}", {"200"}, {"403", "404"}),
    ("post", "/api/patterns/{id_or_slug}/vote", {"200"}, {"403", "404"}),
    ("delete", "/api/patterns/{id_or_slug}/vote", {"200"}, {"404"}),
    ("post", "/api/patterns/{id_or_slug}/fork", {"201"}, {"404", "503"}),
    ("get", "/api/patterns/{id_or_slug}/forks", {"200"}, {"404"}),
    ("post", "/api/patterns/{id_or_slug}/bookmark", {"200", "201"}, {"404"}),
    ("delete", "/api/patterns/{id_or_slug}/bookmark", {"200"}, {"404"}),
    ("post", "/api/patterns/{id_or_slug}/flag", {"201"}, {"403", "404", "409"}),
    ("get", "/api/patterns/{id_or_slug}/flag", {"200"}, {"404"}),
    ("get", "/api/patterns/{id_or_slug}/comments", {"200"}, {"404"}),
    ("get", "/api/patterns/{id_or_slug}/revisions", {"200"}, {"404"}),
    ("get", "/api/patterns/{id_or_slug}/revisions/{number}", {"200"}, {"404"}),
    ("get", "/api/patterns/{id_or_slug}/revisions/{number}/diff/{other}", {"200"}, {"404", "503"}),
    (
        "post",
        "/api/patterns/{id_or_slug}/revisions/{number}/rollback",
        {"200"},
        {"403", "404", "409"},
    ),
    (
        "post",
        "/api/patterns/{id_or_slug}/revisions/{number}/redact",
        {"200"},
        {"400", "403", "404", "409"},
    ),
    ("post", "/api/patterns/{id_or_slug}/verifications", {"200", "201"}, {"404", "429"}),
    ("get", "/api/patterns/{id_or_slug}/verifications", {"200"}, {"404"}),
    ("post", "/api/patterns/{id_or_slug}/comments", {"201"}, {"404"}),
    ("patch", "/api/comments/{comment_id}", {"200"}, {"403", "404"}),
    ("delete", "/api/comments/{comment_id}", {"200"}, {"403", "404"}),
    ("post", "/api/comments/{comment_id}/vote", {"200"}, {"403", "404"}),
    ("delete", "/api/comments/{comment_id}/vote", {"200"}, {"404"}),
    ("get", "/api/collections", {"200"}, {"401"}),
    ("post", "/api/collections", {"201"}, set()),
    ("get", "/api/collections/{collection_id}", {"200"}, {"404"}),
    ("patch", "/api/collections/{collection_id}", {"200"}, {"403", "404"}),
    ("delete", "/api/collections/{collection_id}", {"200"}, {"403", "404"}),
    ("post", "/api/collections/{collection_id}/patterns", {"200", "201"}, {"403", "404"}),
    ("delete", "/api/collections/{collection_id}/patterns", {"200"}, {"403", "404"}),
]


def model(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(schema["components"]["schemas"][name])


@pytest.mark.parametrize(("method", "path", "ok", "declared"), OPERATIONS)
async def test_every_operation_declares_its_body_and_errors(
    client: httpx.AsyncClient, method: str, path: str, ok: set[str], declared: set[str]
) -> None:
    schema = await spec(client)
    responses = schema["paths"][path][method]["responses"]
    for status in ok:
        documented = body_schema(schema, responses[status])
        # A $ref to a model that lists its properties, never a bare object.
        assert "$ref" in documented, (method, path, status, documented)
        assert resolve(schema, documented)["properties"], (method, path, status)
    for status in declared:
        error = body_schema(schema, responses[status])
        assert error["$ref"].endswith("/ErrorOut"), (method, path, status)
    assert no_validation_422(responses)


async def test_list_items_and_details_name_every_field(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    item = model(schema, "PatternItemOut")
    assert set(item["required"]) == {
        "id",
        "title",
        "slug",
        "description",
        "difficulty_level",
        "vote_score",
        "view_count",
        "author",
        "category",
        "use_case_tags",
        "tech_stack",
        "created_at",
        "trust",
        "safety",
    }
    assert item["properties"]["difficulty_level"]["enum"] == [
        "beginner",
        "intermediate",
        "advanced",
    ]
    detail = model(schema, "PatternDetailOut")["properties"]
    assert detail["status"]["enum"] == ["published", "archived"]
    assert detail["moderation_status"]["enum"] == [
        "approved",
        "pending",
        "flagged",
        "rejected",
        "held_for_safety",
    ]
    # Null only where it is really sent.
    assert {"type": "null"} in detail["forked_from_id"]["anyOf"]
    assert "anyOf" not in detail["content"] and "anyOf" not in item["properties"]["title"]
    # Sent only sometimes: optional, and never null.
    archived = model(schema, "PatternArchivedOut")
    assert (
        archived["required"] == ["id"] and archived["properties"]["status"]["const"] == "archived"
    )
    listing = schema["paths"]["/api/patterns"]["get"]["responses"]["200"]
    page = resolve(schema, body_schema(schema, listing))
    assert page["properties"]["data"]["items"]["$ref"].endswith("/PatternItemOut")
    thread = model(schema, "CommentThreadOut")["properties"]["replies"]
    assert thread["items"]["$ref"].endswith("/CommentThreadOut")


async def test_create_routes_link_to_what_takes_the_new_id(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    ids = {op["operationId"] for item in schema["paths"].values() for op in item.values()}

    def links(path: str) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = schema["paths"][path]["post"]["responses"]["201"][
            "links"
        ]
        assert all(link["operationId"] in ids for link in found.values())
        return found

    for path in ("/api/patterns", "/api/patterns/{id_or_slug}/fork"):
        made = links(path)
        assert {made[n]["operationId"] for n in ("read", "update", "delete")} == {
            "patterns_read_pattern",
            "patterns_update_pattern",
            "patterns_delete_pattern",
        }
        assert made["read"]["parameters"] == {"id_or_slug": "$response.body#/data/id"}
    comment = links("/api/patterns/{id_or_slug}/comments")
    assert comment["edit"] == {
        "operationId": "comments_edit_comment",
        "parameters": {"comment_id": "$response.body#/data/id"},
    }
    assert comment["delete"]["operationId"] == "comments_delete_comment"
    collection = links("/api/collections")
    assert {link["operationId"] for link in collection.values()} == {
        "collections_read_collection",
        "collections_update_collection",
        "collections_delete_collection",
        "collections_add_pattern",
        "collections_remove_pattern",
    }
    assert collection["read"]["parameters"] == {"collection_id": "$response.body#/data/id"}


async def test_input_schemas_say_what_validation_enforces(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    create = model(schema, "PatternCreate")["properties"]
    examples = next(s for s in create["code_examples"]["anyOf"] if s.get("type") == "object")
    # Keys that break the pattern are refused, not left unchecked.
    assert "patternProperties" not in examples
    assert examples["propertyNames"]["pattern"] == "^[^\\x00-\\x1f\\x7f]+$"
    assert examples["additionalProperties"]["$ref"].endswith("/CodeExample")
    assert examples["maxProperties"] == 20
    tags = next(s for s in create["use_case_tags"]["anyOf"] if s.get("type") == "array")
    assert tags["maxItems"] == 10 and tags["items"]["minLength"] == 1
    content = model(schema, "CommentCreate")["properties"]["content"]
    assert (content["minLength"], content["maxLength"]) == (1, 11_000)
    flag = model(schema, "FlagIn")["properties"]["reason"]
    assert flag["enum"] == ["spam", "offensive", "low_quality", "misleading", "unsafe", "other"]


# --- every answer of a walk through all operations matches the contract -------------


class Walk:
    def __init__(self, client: httpx.AsyncClient, contract: Contract) -> None:
        self.client = client
        self.contract = contract
        self.seen: set[tuple[str, str, int]] = set()

    async def __call__(
        self, method: str, url: str, agent: Registered | None, status: int, **kw: Any
    ) -> dict[str, Any]:
        headers = agent.auth if agent else {}
        response = await self.client.request(method, url, headers=headers, **kw)
        assert response.status_code == status, (method, url, response.text)
        assert self.contract.problems(response) == [], (method, url)
        found = self.contract.operation(method, response.request.url.path)
        assert found is not None
        self.seen.add((method.lower(), found[0], status))
        body: dict[str, Any] = response.json()
        return body


async def test_every_answer_of_a_walk_matches_the_contract(
    client: httpx.AsyncClient, contract: Contract
) -> None:
    walk = Walk(client, contract)
    author = await register(client, "Contract Author")
    other = await register(client, "Contract Reader")
    made = await walk("POST", "/api/patterns", author, 201, json=BODY)
    pid = made["data"]["id"]
    # The same text again: the first shows among the similar ones.
    again = await walk("POST", "/api/patterns", author, 201, json=BODY)
    assert [s["id"] for s in again["similar"]] == [pid]
    await walk("GET", "/api/patterns?sort_by=trending&limit=5", None, 200)
    await walk("GET", f"/api/patterns/{pid}", other, 200)
    await walk("GET", "/api/patterns/no-such-pattern", None, 404)
    await walk("PUT", f"/api/patterns/{pid}", author, 200, json={"difficulty_level": "beginner"})
    await walk("PUT", f"/api/patterns/{pid}", other, 403, json={"title": "Taken over"})
    await walk("POST", f"/api/patterns/{pid}/vote", other, 200, json={"vote_type": "upvote"})
    await walk("POST", f"/api/patterns/{pid}/vote", author, 403, json={"vote_type": "upvote"})
    await walk("DELETE", f"/api/patterns/{pid}/vote", other, 200)
    await walk("DELETE", f"/api/patterns/{pid}/vote", other, 200)  # no vote left
    fork = await walk("POST", f"/api/patterns/{pid}/fork", other, 201)
    assert fork["data"]["forked_from_id"] == pid
    await walk("GET", f"/api/patterns/{pid}/forks", None, 200)
    await walk("POST", f"/api/patterns/{pid}/bookmark", other, 201)
    await walk("POST", f"/api/patterns/{pid}/bookmark", other, 200)
    await walk("DELETE", f"/api/patterns/{pid}/bookmark", other, 200)
    await walk("GET", f"/api/patterns/{pid}/flag", other, 200)
    await walk("POST", f"/api/patterns/{pid}/flag", other, 201, json={"reason": "spam"})
    await walk("POST", f"/api/patterns/{pid}/flag", other, 409, json={"reason": "spam"})
    await walk("GET", f"/api/patterns/{pid}/flag", other, 200)

    # Trust by use: revisions and verifications.
    env = {"runtime": "python", "runtime_version": "3.11", "os": "linux"}
    report = {"outcome": "worked_as_written", "environment": env}
    await walk("POST", f"/api/patterns/{pid}/verifications", other, 201, json=report)
    await walk("POST", f"/api/patterns/{pid}/verifications", other, 200, json=report)
    await walk("GET", f"/api/patterns/{pid}/verifications?outcome=did_not_work", None, 200)
    await walk("GET", f"/api/patterns/{pid}/revisions", None, 200)
    await walk("GET", f"/api/patterns/{pid}/revisions/2", None, 200)
    await walk("GET", f"/api/patterns/{pid}/revisions/9", None, 404)
    await walk("GET", f"/api/patterns/{pid}/revisions/1/diff/2", None, 200)
    await walk("POST", f"/api/patterns/{pid}/revisions/1/rollback", other, 403, json={})
    await walk("POST", f"/api/patterns/{pid}/revisions/1/rollback", author, 200, json={})
    redaction = {"fields": ["content"], "reason": "a leaked key"}
    await walk("POST", f"/api/patterns/{pid}/revisions/1/redact", other, 403, json=redaction)
    await walk("POST", f"/api/patterns/{pid}/revisions/1/redact", author, 200, json=redaction)
    await walk("GET", "/api/patterns?sort_by=trusted", None, 200)

    top = await walk("POST", f"/api/patterns/{pid}/comments", author, 201, json={"content": "Hi"})
    cid = top["data"]["id"]
    reply = {"content": "A reply", "parent_id": cid}
    await walk("POST", f"/api/patterns/{pid}/comments", other, 201, json=reply)
    await walk("GET", f"/api/patterns/{pid}/comments?sort=top", None, 200)
    await walk("PATCH", f"/api/comments/{cid}", author, 200, json={"content": "Hello"})
    await walk("PATCH", f"/api/comments/{cid}", other, 403, json={"content": "Mine"})
    await walk("POST", f"/api/comments/{cid}/vote", other, 200, json={"vote_type": "downvote"})
    await walk("DELETE", f"/api/comments/{cid}/vote", other, 200)
    # With a reply it stays as a placeholder (content sent); without, it goes.
    await walk("DELETE", f"/api/comments/{cid}", author, 200)
    await walk("GET", f"/api/patterns/{pid}/comments", None, 200)
    await walk("DELETE", f"/api/comments/{cid}", author, 404)

    coll = await walk("POST", "/api/collections", other, 201, json={"name": "Reading"})
    kid = coll["data"]["id"]
    await walk("GET", "/api/collections", None, 200)
    await walk("GET", "/api/collections?mine=true", other, 200)
    await walk("GET", "/api/collections?mine=true", None, 401)
    await walk("POST", f"/api/collections/{kid}/patterns", other, 201, json={"pattern_id": pid})
    await walk("POST", f"/api/collections/{kid}/patterns", other, 200, json={"pattern_id": pid})
    await walk("GET", f"/api/collections/{kid}", None, 200)
    await walk("PATCH", f"/api/collections/{kid}", other, 200, json={"is_public": False})
    await walk("PATCH", f"/api/collections/{kid}", author, 404, json={"name": "Mine"})
    await walk("DELETE", f"/api/collections/{kid}/patterns?pattern_id={pid}", other, 200)
    await walk("DELETE", f"/api/collections/{kid}/patterns?pattern_id={pid}", other, 404)
    await walk("DELETE", f"/api/collections/{kid}", other, 200)

    await walk("DELETE", f"/api/patterns/{pid}", author, 200)
    await walk("DELETE", f"/api/patterns/{pid}", author, 200)  # already archived: no status
    await walk("GET", f"/api/patterns/{pid}", other, 404)

    documented = {
        (method, path, int(status)) for method, path, ok, _ in OPERATIONS for status in ok
    }
    assert documented <= walk.seen, documented - walk.seen
