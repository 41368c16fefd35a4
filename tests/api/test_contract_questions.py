"""The contract of questions, answers, moderation, admin and uploads: every
operation declares a response schema and its own error statuses, creates link
to what takes the new id or slug, and every answer of a full walk through
these routes matches /openapi.json (checked here whatever CAIRN_CONTRACT_CHECK
says)."""

from __future__ import annotations

import io
import uuid
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.api.conftest import Registered, StoreProbe, register
from tests.api.test_patterns import publish, sql
from tests.api.test_questions import make_role
from tests.contract_check import Contract, no_validation_422, resolve, spec

IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp", "image/svg+xml"}

# (method, path, success status, the errors the route's own rules add).
OPERATIONS: list[tuple[str, str, int, set[int]]] = [
    ("get", "/api/questions", 200, {400}),
    ("post", "/api/questions", 201, {400, 503}),
    ("get", "/api/questions/{slug}", 200, {404}),
    ("patch", "/api/questions/{slug}", 200, {400, 403, 404}),
    ("delete", "/api/questions/{slug}", 200, {403, 404}),
    ("post", "/api/questions/{slug}/vote", 200, {403, 404}),
    ("delete", "/api/questions/{slug}/vote", 200, {404}),
    ("get", "/api/questions/{slug}/vote", 200, {404}),
    ("get", "/api/questions/{slug}/answers", 200, {404}),
    ("post", "/api/questions/{slug}/answers", 201, {403, 404}),
    ("patch", "/api/answers/{answer_id}", 200, {403, 404}),
    ("delete", "/api/answers/{answer_id}", 200, {403, 404}),
    ("post", "/api/answers/{answer_id}/accept", 200, {403, 404}),
    ("post", "/api/answers/{answer_id}/vote", 200, {403, 404}),
    ("delete", "/api/answers/{answer_id}/vote", 200, {404}),
    ("get", "/api/answers/{answer_id}/vote", 200, {404}),
    ("get", "/api/answers/{answer_id}/comments", 200, {404}),
    ("post", "/api/answers/{answer_id}/comments", 201, {400, 404}),
    ("get", "/api/answers/{answer_id}/revisions", 200, {404}),
    ("get", "/api/answers/{answer_id}/revisions/{number}", 200, {404}),
    ("get", "/api/answers/{answer_id}/revisions/{number}/diff/{other}", 200, {404, 503}),
    ("post", "/api/answers/{answer_id}/revisions/{number}/rollback", 200, {403, 404, 409}),
    ("post", "/api/answers/{answer_id}/revisions/{number}/redact", 200, {400, 403, 404, 409}),
    ("post", "/api/answers/{answer_id}/verifications", 201, {400, 401, 404, 429}),
    ("get", "/api/answers/{answer_id}/verifications", 200, {404}),
    ("get", "/api/moderation", 200, {400, 403}),
    ("patch", "/api/moderation", 200, {400, 403, 404, 409}),
    ("get", "/api/admin", 200, {400, 403}),
    ("patch", "/api/admin", 200, {400, 403, 404, 409}),
    ("post", "/api/upload", 201, {400, 401, 403, 413, 415, 429, 503}),
    ("delete", "/api/upload", 200, {400, 403, 404}),
]

# Create routes: the operations their 201 links to.
LINKS: dict[tuple[str, str], set[str]] = {
    ("post", "/api/questions"): {
        "questions_read_question",
        "questions_update_question",
        "questions_delete_question",
        "questions_vote_question",
        "questions_question_vote_state",
        "questions_list_answers",
        "questions_answer_question",
    },
    ("post", "/api/questions/{slug}/answers"): {
        "answers_edit_answer",
        "answers_delete_answer",
        "answers_accept_answer",
        "answers_vote_answer",
        "answers_answer_vote_state",
        "answers_list_comments",
        "answers_create_comment",
        "answers_verify_answer",
        "answers_list_answer_verifications",
        "answers_list_answer_revisions",
    },
    ("post", "/api/answers/{answer_id}/comments"): {
        "comments_edit_comment",
        "comments_delete_comment",
        "comments_vote_comment",
    },
    ("post", "/api/upload"): {"uploads_delete_upload"},
}


def described(schema: dict[str, Any], node: dict[str, Any]) -> bool:
    """Not a bare object: properties, or a choice of described objects."""
    node = resolve(schema, node)
    if "properties" in node:
        return True
    choices = node.get("oneOf") or node.get("anyOf")
    return bool(choices) and all(described(schema, c) for c in choices)


@pytest.mark.parametrize(("method", "path", "status", "declared"), OPERATIONS)
async def test_each_operation_documents_its_body_and_errors(
    client: httpx.AsyncClient, method: str, path: str, status: int, declared: set[int]
) -> None:
    schema = await spec(client)
    responses = schema["paths"][path][method]["responses"]
    success = responses[str(status)]["content"]["application/json"]["schema"]
    assert described(schema, success), (method, path, success)
    assert {str(s) for s in declared} <= set(responses), (method, path, sorted(responses))
    assert no_validation_422(responses)
    for error in declared:
        ref = responses[str(error)]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorOut")


async def test_uploaded_images_document_their_types(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    responses = schema["paths"]["/uploads/{agent_id}/{name}"]["get"]["responses"]
    assert set(responses["200"]["content"]) == IMAGE_TYPES
    assert responses["200"]["content"]["image/png"]["schema"]["format"] == "binary"
    assert "404" in responses
    upload = schema["paths"]["/api/upload"]["post"]
    assert upload["requestBody"]["content"]["multipart/form-data"]["schema"]["required"] == ["file"]


async def test_creates_link_to_what_takes_the_new_id(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    by_id = {op["operationId"]: op for item in schema["paths"].values() for op in item.values()}
    for (method, path), targets in LINKS.items():
        links = schema["paths"][path][method]["responses"]["201"]["links"]
        assert {link["operationId"] for link in links.values()} == targets, path
        for link in links.values():
            target = by_id[link["operationId"]]
            path_params = {p["name"] for p in target.get("parameters", []) if p["in"] == "path"}
            assert set(link.get("parameters", {})) == path_params, link
            for expression in [*link.get("parameters", {}).values()]:
                assert expression.startswith("$response.body#/data/")


async def test_input_schemas_say_what_validation_enforces(client: httpx.AsyncClient) -> None:
    components = (await spec(client))["components"]["schemas"]
    create = components["QuestionCreate"]["properties"]
    assert create["title"]["minLength"] == 10 and create["body"]["minLength"] == 20
    assert create["tags"]["maxItems"] == 5
    assert components["AnswerCreate"]["properties"]["body"]["minLength"] == 10
    admin = (await spec(client))["paths"]["/api/admin"]["get"]["parameters"]
    status = next(p for p in admin if p["name"] == "status")["schema"]["anyOf"][0]
    assert set(status["enum"]) == {
        "active",
        "inactive",
        "published",
        "archived",
        "open",
        "closed",
        "deleted",
    }


# Every answer of a walk through the routes, against the contract -------------------


class Checked:
    """Requests whose answers must have the expected status and match the contract."""

    def __init__(self, client: httpx.AsyncClient, contract: Contract) -> None:
        self.client = client
        self.contract = contract

    async def __call__(
        self,
        method: str,
        url: str,
        who: Registered | None,
        status: int,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        sent = {**(who.auth if who is not None else {}), **(headers or {})}
        response = await self.client.request(method, url, headers=sent, **kwargs)
        assert response.status_code == status, (method, url, response.text)
        assert self.contract.problems(response) == [], (method, url)
        body: dict[str, Any] = response.json()
        return body


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


async def test_questions_and_answers_match_the_contract(
    client: httpx.AsyncClient, contract: Contract
) -> None:
    call = Checked(client, contract)
    asker, helper, voter = [await register(client, n) for n in ("Asker", "Helper", "Voter")]
    text = {
        "title": "How do I retry flaky webhook deliveries safely?",
        "body": "Webhook deliveries fail now and then; how should retries be scheduled?",
        "tags": ["webhooks", "retries"],
    }
    first = (await call("post", "/api/questions", asker, 201, json=text))["data"]
    again = await call("post", "/api/questions", voter, 201, json=text)
    assert any(hit["type"] == "question" for hit in again["similar"]), again["similar"]
    slug = first["slug"]
    await call("get", "/api/questions?status=all&sort_by=votes", None, 200)
    await call("patch", f"/api/questions/{slug}", asker, 200, json={"tags": None})
    await call("patch", f"/api/questions/{slug}", helper, 403, json={"tags": None})
    await call("post", f"/api/questions/{slug}/vote", voter, 200, json={"vote_type": "upvote"})
    await call("post", f"/api/questions/{slug}/vote", asker, 403, json={"vote_type": "upvote"})
    await call("get", f"/api/questions/{slug}/vote", voter, 200)
    await call("delete", f"/api/questions/{slug}/vote", voter, 200)
    await call("delete", f"/api/questions/{slug}/vote", voter, 200)  # nothing to remove

    given = await call(
        "post",
        f"/api/questions/{slug}/answers",
        helper,
        201,
        json={"body": "Back off exponentially."},
    )
    answer_id = given["data"]["id"]
    await call("patch", f"/api/answers/{answer_id}", helper, 200, json={"body": "Back off more."})
    await call("patch", f"/api/answers/{answer_id}", voter, 403, json={"body": "Mine now!!"})
    await call("post", f"/api/answers/{answer_id}/vote", voter, 200, json={"vote_type": "downvote"})
    await call("get", f"/api/answers/{answer_id}/vote", voter, 200)
    read = await call("get", f"/api/questions/{slug}", voter, 200)
    assert read["data"]["answers"][0]["user_vote"]["vote_type"] == "downvote"
    await call("get", f"/api/questions/{slug}", None, 200)
    await call("get", f"/api/questions/{slug}/answers", voter, 200)
    await call("get", f"/api/questions/{slug}/answers?limit=1&page=2", None, 200)
    await call("delete", f"/api/answers/{answer_id}/vote", voter, 200)
    await call("post", f"/api/answers/{answer_id}/accept", voter, 403)
    await call("post", f"/api/answers/{answer_id}/accept", asker, 200)
    await call("post", f"/api/answers/{answer_id}/accept", asker, 200)  # taken back

    # Trust by use: revisions and verifications of the answer.
    env = {"runtime": "node", "runtime_version": "22", "os": "linux", "packages": {"got": "14"}}
    report = {"outcome": "worked_with_changes", "environment": env, "changes": "longer waits"}
    await call("post", f"/api/answers/{answer_id}/verifications", voter, 201, json=report)
    await call("post", f"/api/answers/{answer_id}/verifications", voter, 400, json={"x": 1})
    await call("get", f"/api/answers/{answer_id}/verifications?revision=2", None, 200)
    await call("get", f"/api/answers/{answer_id}/revisions", None, 200)
    await call("get", f"/api/answers/{answer_id}/revisions/1", None, 200)
    await call("get", f"/api/answers/{answer_id}/revisions/1/diff/2", None, 200)
    await call("post", f"/api/answers/{answer_id}/revisions/1/rollback", voter, 403, json={})
    await call("post", f"/api/answers/{answer_id}/revisions/1/rollback", helper, 200, json={})
    redaction = {"fields": ["body"], "reason": "a leaked key"}
    await call("post", f"/api/answers/{answer_id}/revisions/1/redact", voter, 403, json=redaction)
    await call("post", f"/api/answers/{answer_id}/revisions/1/redact", helper, 200, json=redaction)
    await call("get", f"/api/questions/{slug}/answers?sort=trusted", None, 200)
    await call("get", "/api/questions?sort_by=trusted", None, 200)
    await call("get", f"/api/agents/{voter.username}/verifications", None, 200)

    comments = f"/api/answers/{answer_id}/comments"
    parent = (await call("post", comments, asker, 201, json={"content": "Which backoff?"}))["data"]
    reply = {"content": "Exponential.", "parent_id": parent["id"]}
    await call("post", comments, helper, 201, json=reply)
    await call("post", comments, helper, 400, json={**reply, "parent_id": str(uuid.uuid4())})
    deleted = await client.delete(f"/api/comments/{parent['id']}", headers=asker.auth)
    assert deleted.status_code == 200, deleted.text
    thread = await call("get", comments, None, 200)
    assert thread["data"][0]["author"] is None and thread["data"][0]["replies"]

    missing = str(uuid.uuid4())
    await call("get", "/api/questions/no-such-question", None, 404)
    await call("get", f"/api/answers/{missing}/comments", None, 404)
    await call("post", f"/api/answers/{missing}/vote", voter, 404, json={"vote_type": "upvote"})
    await call("delete", f"/api/answers/{answer_id}", voter, 403)
    await call("delete", f"/api/answers/{answer_id}", helper, 200)
    await call("delete", f"/api/questions/{slug}", voter, 403)
    await call("delete", f"/api/questions/{slug}", asker, 200)
    await call(
        "post",
        f"/api/questions/{slug}/answers",
        helper,
        404,
        json={"body": "Too late, it is gone."},
    )


async def test_moderation_and_admin_match_the_contract(
    client: httpx.AsyncClient, contract: Contract, database: str
) -> None:
    call = Checked(client, contract)
    author, flagger = await register(client, "Author"), await register(client, "Flagger")
    mod, admin = await register(client, "Moderator"), await register(client, "Admin")
    make_role(database, mod, "moderator")
    make_role(database, admin, "admin")
    pattern = await publish(client, author, title="Pending pattern for review")
    sql(database, "UPDATE patterns SET moderation_status = 'pending' WHERE id = %s", pattern["id"])
    flagged = await publish(client, author, title="A pattern somebody reported")
    response = await client.post(
        f"/api/patterns/{flagged['id']}/flag", headers=flagger.auth, json={"reason": "spam"}
    )
    assert response.status_code in (200, 201), response.text
    text = {"title": "Is this question fine?", "body": "A question waiting for review."}
    question = (await call("post", "/api/questions", author, 201, json=text))["data"]
    given = await call(
        "post",
        f"/api/questions/{question['slug']}/answers",
        flagger,
        201,
        json={"body": "Yes." * 5},
    )
    sql(
        database, "UPDATE questions SET moderation_status = 'pending' WHERE id = %s", question["id"]
    )
    sql(
        database,
        "UPDATE answers SET moderation_status = 'pending' WHERE id = %s",
        given["data"]["id"],
    )

    tabs = (
        "pending",
        "flagged",
        "rejected",
        "edited",
        "verified_edits",
        "flags",
        "pending_questions",
        "pending_answers",
    )
    for tab in (*tabs, "appeals"):
        await call("get", f"/api/moderation?tab={tab}", mod, 200)
    await call("get", "/api/moderation", author, 403)
    for kind, target in (
        ("pattern_id", pattern["id"]),
        ("question_id", question["id"]),
        ("answer_id", given["data"]["id"]),
    ):
        decided = await call(
            "patch", "/api/moderation", mod, 200, json={kind: target, "action": "approve"}
        )
        assert decided["data"]["moderation_status"] == "approved"
    await call(
        "patch",
        "/api/moderation",
        mod,
        200,
        json={"pattern_id": flagged["id"], "action": "reject", "notes": "Spam."},
    )
    await call(
        "patch",
        "/api/moderation",
        mod,
        404,
        json={"appeal_id": str(uuid.uuid4()), "action": "reject"},
    )
    await call("get", "/api/moderation?tab=logs", mod, 200)

    for tab in ("overview", "users", "patterns", "questions"):
        await call("get", f"/api/admin?tab={tab}", admin, 200)
    await call(
        "get", "/api/admin?tab=patterns&status=archived&moderation_status=rejected", admin, 200
    )
    await call("get", "/api/admin?tab=users&status=closed", admin, 400)
    await call("get", "/api/admin", mod, 403)
    changes = [
        {"type": "user", "id": author.agent_id, "verification_level": "verified"},
        {"type": "user", "id": mod.agent_id, "role": None},
        {"type": "pattern", "id": pattern["id"], "status": "archived"},
        {"type": "question", "id": question["id"], "moderation_status": "rejected"},
        {"type": "question", "id": question["id"], "status": "deleted"},
    ]
    for change in changes:
        await call("patch", "/api/admin", admin, 200, json=change)
    await call(
        "patch",
        "/api/admin",
        admin,
        404,
        json={"type": "pattern", "id": str(uuid.uuid4()), "status": "archived"},
    )
    await call(
        "patch",
        "/api/admin",
        admin,
        409,
        json={"type": "question", "id": question["id"], "moderation_status": "approved"},
    )


async def test_uploads_match_the_contract(
    client: httpx.AsyncClient, contract: Contract, store: StoreProbe
) -> None:
    call = Checked(client, contract)
    owner, other = await register(client, "Uploader"), await register(client, "Other")
    files = {"file": ("dot.png", png(), "image/png")}
    uploaded = (await call("post", "/api/upload", owner, 201, files=files))["data"]
    assert uploaded["contentType"] == "image/png"
    served = await client.get(f"/uploads/{uploaded['path']}")
    assert served.status_code == 200 and served.headers["content-type"] == "image/png"
    await call(
        "post", "/api/upload", owner, 415, content=b"x", headers={"Content-Type": "text/plain"}
    )
    await call("post", "/api/upload", None, 401, files=files)
    await call("delete", "/api/upload", owner, 400, json={"path": "../etc/passwd"})
    await call("delete", "/api/upload", other, 403, json={"path": uploaded["path"]})
    await call("delete", "/api/upload", owner, 200, json={"path": uploaded["path"]})
    await call("delete", "/api/upload", owner, 404, json={"path": uploaded["path"]})
