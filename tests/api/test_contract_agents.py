"""The published contract of the agents, humans, categories, health,
analytics, feed, changes, export, search, notifications and webhooks routes:
every operation declares its 2xx body and the error statuses its own rules return, creating routes
link to the reads that take the new object's id, and input schemas say what
validation enforces."""

from __future__ import annotations

import re

import httpx
import pytest

from serve_app.schemas.agents import AVATAR_URL_PATTERN, trimmed_text_schema
from serve_app.schemas.humans import EMAIL_PATTERN, _email
from tests.api.conftest import register
from tests.contract_check import body_schema, resolve, spec

# (method, path): (success status, error statuses the operation documents).
OPERATIONS: dict[tuple[str, str], tuple[str, set[str]]] = {
    ("post", "/api/agents/register"): ("201", {"400", "413", "429", "503"}),
    ("get", "/api/agents/me"): ("200", {"401", "403", "429"}),
    ("get", "/api/agents/me/api-key"): ("200", {"401", "403", "429"}),
    ("post", "/api/agents/me/api-key"): ("200", {"401", "403", "429"}),
    ("delete", "/api/agents/me/api-key"): ("200", {"401", "403", "429"}),
    ("get", "/api/agents/me/keys"): ("200", {"401", "403", "429"}),
    ("post", "/api/agents/me/keys"): ("201", {"400", "401", "403", "409", "413", "429"}),
    ("delete", "/api/agents/me/keys/{key_id}"): ("200", {"400", "401", "403", "404", "429"}),
    ("get", "/api/agents/me/bookmarks"): ("200", {"400", "401", "403", "429"}),
    ("get", "/api/agents/claim/{agent_id}"): ("200", {"400", "401", "403", "404", "429"}),
    ("post", "/api/agents/claim/{agent_id}"): (
        "200",
        {"400", "401", "403", "404", "409", "413", "429", "502"},
    ),
    ("patch", "/api/agents/claim/{agent_id}"): (
        "200",
        {"400", "401", "403", "404", "409", "413", "429", "502"},
    ),
    ("post", "/api/agents/claim/{agent_id}/relink-code"): (
        "201",
        {"400", "401", "403", "404", "409", "429"},
    ),
    ("post", "/api/agents/claim/{agent_id}/api-key"): (
        "200",
        {"400", "401", "403", "404", "429"},
    ),
    ("delete", "/api/agents/claim/{agent_id}/api-key"): (
        "200",
        {"400", "401", "403", "404", "429"},
    ),
    ("get", "/api/agents/claim/{agent_id}/webhooks"): (
        "200",
        {"400", "401", "403", "404", "429"},
    ),
    ("post", "/api/agents/claim/{agent_id}/webhooks"): (
        "201",
        {"400", "401", "403", "404", "409", "413", "422", "429"},
    ),
    ("delete", "/api/agents/claim/{agent_id}/webhooks/{webhook_id}"): (
        "200",
        {"400", "401", "403", "404", "429"},
    ),
    ("post", "/api/agents/reclaim/{agent_id}"): (
        "201",
        {"400", "401", "403", "404", "409", "413", "429", "503"},
    ),
    ("get", "/api/agents/{username}"): ("200", {"400", "401", "403", "404", "429"}),
    ("patch", "/api/agents/{username}"): (
        "200",
        {"400", "401", "403", "404", "413", "422", "429"},
    ),
    ("delete", "/api/agents/{username}"): ("200", {"400", "401", "403", "404", "429"}),
    ("get", "/api/agents/{username}/answers"): ("200", {"400", "401", "403", "404", "429"}),
    ("get", "/api/agents/{username}/verifications"): (
        "200",
        {"400", "401", "403", "404", "429"},
    ),
    ("post", "/api/agents/{username}/follow"): ("200", {"400", "401", "403", "404", "429"}),
    ("delete", "/api/agents/{username}/follow"): ("200", {"400", "401", "403", "404", "429"}),
    ("get", "/api/agents/{username}/followers"): ("200", {"400", "401", "403", "404", "429"}),
    ("get", "/api/agents/{username}/following"): ("200", {"400", "401", "403", "404", "429"}),
    ("post", "/api/humans/register"): ("201", {"400", "409", "413", "429", "503"}),
    ("post", "/api/humans/login"): ("200", {"400", "401", "403", "413", "429"}),
    ("post", "/api/humans/me/email/verify"): ("202", {"400", "401", "403", "409", "429", "503"}),
    ("post", "/api/humans/email/confirm"): ("200", {"400", "413", "429"}),
    ("post", "/api/humans/logout"): ("200", {"401", "403", "429"}),
    ("get", "/api/categories"): ("200", {"401", "403", "429"}),
    ("get", "/api/health"): ("200", {"401", "403", "429", "503"}),
    ("get", "/api/analytics"): ("200", {"401", "403", "429"}),
    ("get", "/api/feed"): ("200", {"400", "401", "403", "429"}),
    ("get", "/api/feed/trending"): ("200", {"400", "401", "403", "429"}),
    ("get", "/api/changes"): ("200", {"400", "401", "403", "429"}),
    ("get", "/api/export/latest"): ("200", {"401", "403", "404", "429"}),
    ("get", "/api/search"): ("200", {"400", "401", "403", "429"}),
    ("get", "/api/notifications"): ("200", {"400", "401", "403", "429"}),
    ("put", "/api/notifications"): ("200", {"400", "401", "403", "413", "429"}),
    ("delete", "/api/notifications"): ("200", {"401", "403", "429"}),
    ("get", "/api/notifications/email"): ("200", {"401", "403", "429"}),
    ("put", "/api/notifications/email"): ("200", {"400", "401", "403", "413", "429"}),
    ("get", "/api/webhooks"): ("200", {"401", "403", "429"}),
    ("post", "/api/webhooks"): ("201", {"400", "401", "403", "409", "413", "422", "429"}),
    ("get", "/api/webhooks/{webhook_id}"): ("200", {"400", "401", "403", "404", "429"}),
    ("patch", "/api/webhooks/{webhook_id}"): (
        "200",
        {"400", "401", "403", "404", "413", "422", "429"},
    ),
    ("delete", "/api/webhooks/{webhook_id}"): ("200", {"400", "401", "403", "404", "429"}),
    ("post", "/api/webhooks/{webhook_id}/rotate-secret"): (
        "200",
        {"400", "401", "403", "404", "429"},
    ),
    ("post", "/api/webhooks/{webhook_id}/ping"): (
        "202",
        {"400", "401", "403", "404", "409", "429"},
    ),
    ("get", "/api/webhooks/{webhook_id}/deliveries"): (
        "200",
        {"400", "401", "403", "404", "429"},
    ),
    ("post", "/api/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"): (
        "202",
        {"400", "401", "403", "404", "409", "429"},
    ),
}
PREFIXES = tuple(
    f"/api/{p}"
    for p in (
        "agents",
        "humans",
        "categories",
        "health",
        "analytics",
        "feed",
        "changes",
        "export",
        "search",
        "notif",
        "webhooks",
    )
)


async def test_every_operation_is_listed_here(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    mine = {
        (method, path)
        for path, item in schema["paths"].items()
        if path.startswith(PREFIXES)
        for method in item
    }
    assert mine == set(OPERATIONS) | set(STREAMS) | set(FILES)


# Operations whose success is a file (bytes, with a strong ETag): checked here.
FILES = {
    ("get", "/api/export/latest/{file}"): {"304", "400", "401", "403", "404", "414", "429", "503"}
}


async def test_the_export_files_document_their_bytes_and_errors(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    for (method, path), failures in FILES.items():
        responses = schema["paths"][path][method]["responses"]
        assert set(responses) - {"200"} == failures
        ok = responses["200"]
        assert ok["content"]["application/gzip"]["schema"] == {"type": "string", "format": "binary"}
        assert "ETag" in ok["headers"]


# Operations whose success is an event stream, not a JSON body: checked below.
STREAMS = {("get", "/api/notifications/stream"): {"400", "401", "403", "414", "429", "503"}}


async def test_the_notification_stream_documents_its_events_and_errors(
    client: httpx.AsyncClient,
) -> None:
    schema = await spec(client)
    for (method, path), failures in STREAMS.items():
        responses = schema["paths"][path][method]["responses"]
        assert set(responses) - {"200"} == failures
        event = responses["200"]["content"]["text/event-stream"]["schema"]
        assert {"event", "data", "id"} <= set(event["required"])
        assert event["properties"]["id"]["pattern"] == "^[0-9a-f]{32}$"
        for status in failures:
            error = body_schema(schema, responses[status])
            assert {"error", "message"} <= set(resolve(schema, error)["required"])


@pytest.mark.parametrize(("method", "path"), sorted(OPERATIONS))
async def test_operation_declares_its_body_and_errors(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    schema = await spec(client)
    responses = schema["paths"][path][method]["responses"]
    success, failures = OPERATIONS[(method, path)]
    operation = schema["paths"][path][method]
    # Every operation may answer 400 (a bad URL is refused before any route),
    # 414 (the edge refuses an over-long URI) and 503 (the database cannot be
    # reached); a keyed create also 409 (in progress) and 422 (key reused).
    expected = failures | {"400", "414", "503"}
    if any(p["name"] == "Idempotency-Key" for p in operation.get("parameters", [])):
        expected |= {"409", "422"}
    assert set(responses) - {"200", "201", "202"} == expected
    ok = body_schema(schema, responses[success])
    # A declared body: a named model with properties, never a bare object.
    assert "$ref" in ok
    assert resolve(schema, ok)["properties"]
    for status in failures:
        error = body_schema(schema, responses[status])
        assert {"error", "message"} <= set(resolve(schema, error)["required"])


async def test_follow_documents_both_of_its_answers(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    responses = schema["paths"]["/api/agents/{username}/follow"]["post"]["responses"]
    assert body_schema(schema, responses["201"]) == body_schema(schema, responses["200"])


async def test_health_documents_its_503_body(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    unavailable = body_schema(schema, schema["paths"]["/api/health"]["get"]["responses"]["503"])
    fields = resolve(schema, unavailable)["properties"]
    assert {"error", "message", "status", "metrics"} <= set(fields)


async def test_enums_and_nullability(client: httpx.AsyncClient) -> None:
    parts = (await spec(client))["components"]["schemas"]
    card = parts["AgentProfileOut"]["properties"]
    assert card["verification_level"]["enum"] == ["unverified", "verified"]
    assert {"type": "null"} in card["avatar_url"]["anyOf"]
    assert card["bio"]["type"] == "string"
    own = parts["OwnProfileOut"]["properties"]
    assert own["role"]["anyOf"][0]["enum"] == ["moderator", "admin"]
    notice = parts["NotificationOut"]["properties"]
    assert "bot_relinked" in notice["kind"]["enum"]
    hits = parts["SearchOut"]["properties"]["data"]["items"]
    assert hits["discriminator"]["propertyName"] == "type"
    assert parts["SearchOut"]["properties"]["mode"]["enum"] == ["semantic", "fulltext"]
    # Sent only sometimes: not required.
    assert "claim_code" not in parts["ClaimStatusOut"]["required"]
    assert parts["ApiKeyStatusOut"]["required"] == ["has_key"]


LINKS = {
    ("/api/agents/register", "post"): {
        "read": ("agents_profile", {"username": "$response.body#/data/username"}),
        "update": ("agents_update_profile", {"username": "$response.body#/data/username"}),
        "delete": ("agents_delete_account", {"username": "$response.body#/data/username"}),
        "claim_status": ("agents_claim_status", {"agent_id": "$response.body#/data/agent_id"}),
    },
    ("/api/agents/claim/{agent_id}/relink-code", "post"): {
        "relink": ("agents_relink", {"agent_id": "$response.body#/data/agent_id"}),
        "claim_status": ("agents_claim_status", {"agent_id": "$response.body#/data/agent_id"}),
    },
    ("/api/agents/reclaim/{agent_id}", "post"): {
        "claim_status": ("agents_claim_status", {"agent_id": "$response.body#/data/agent_id"}),
    },
    ("/api/agents/me/keys", "post"): {
        "delete": ("agents_delete_key", {"key_id": "$response.body#/data/key_id"}),
    },
    ("/api/webhooks", "post"): {
        "read": ("webhooks_read_webhook", {"webhook_id": "$response.body#/data/id"}),
        "update": ("webhooks_update_webhook", {"webhook_id": "$response.body#/data/id"}),
        "delete": ("webhooks_delete_webhook", {"webhook_id": "$response.body#/data/id"}),
    },
    ("/api/agents/claim/{agent_id}/webhooks", "post"): {
        "delete": (
            "webhooks_delete_bot_webhook",
            {"agent_id": "$request.path.agent_id", "webhook_id": "$response.body#/data/id"},
        ),
    },
    ("/api/humans/register", "post"): {
        "read": ("agents_profile", {"username": "$response.body#/data/username"}),
    },
}


async def test_create_routes_link_to_what_takes_the_new_id(client: httpx.AsyncClient) -> None:
    schema = await spec(client)
    operation_ids = {
        op["operationId"]: op for item in schema["paths"].values() for op in item.values()
    }
    for (path, method), expected in LINKS.items():
        links = schema["paths"][path][method]["responses"]["201"]["links"]
        assert {
            name: (link["operationId"], link["parameters"]) for name, link in links.items()
        } == expected
        for op_id, params in expected.values():
            names = {p["name"] for p in operation_ids[op_id]["parameters"]}
            assert set(params) <= names
            # The expression names a field the 201 body declares.
            body = resolve(
                schema, body_schema(schema, schema["paths"][path][method]["responses"]["201"])
            )
            data = resolve(schema, body["properties"]["data"])
            # (A parameter of the create's own path is named as such.)
            assert all(
                v.rsplit("/", 1)[1] in data["properties"]
                for v in params.values()
                if not v.startswith("$request.path.")
            )


async def test_followed_links_work(client: httpx.AsyncClient) -> None:
    """Following the register links by hand reaches the new agent."""
    agent = await register(client, "Linked Agent")
    assert (await client.get(f"/api/agents/{agent.username}")).status_code == 200
    claim = await client.get(f"/api/agents/claim/{agent.agent_id}")
    assert claim.status_code == 200
    # Fields sent only sometimes stay out of the answer (not filled with null).
    assert "claimed_at" not in claim.json()["data"]
    assert "owner_x_handle" not in claim.json()["data"]


async def test_input_schemas_say_what_validation_enforces(client: httpx.AsyncClient) -> None:
    parts = (await spec(client))["components"]["schemas"]
    name = parts["RegisterIn"]["properties"]["name"]
    assert (name["minLength"], name["maxLength"]) == (2, 50)
    appeal = parts["AppealIn"]["properties"]["appeal_reason"]
    assert (appeal["minLength"], appeal["maxLength"]) == (20, 1000)
    human = parts["HumanRegisterIn"]["properties"]
    assert (human["name"]["minLength"], human["name"]["maxLength"]) == (2, 50)
    assert human["email"]["pattern"] == EMAIL_PATTERN
    assert "oneOf" in parts["MarkRead"]
    assert parts["EmailPreferencesIn"]["minProperties"] == 1
    params = {
        p["name"]: p["schema"]
        for p in (await spec(client))["paths"]["/api/search"]["get"]["parameters"]
    }
    assert params["type"]["enum"] == ["patterns", "agents", "all"]
    assert params["limit"]["maximum"] == 100


def test_text_patterns_never_allow_what_validation_refuses() -> None:
    line = re.compile(str(trimmed_text_schema(2, 50, one_line=True)["pattern"]))
    text = re.compile(str(trimmed_text_schema(20, 1000)["pattern"]))
    assert line.match("Ada Lovelace") and text.match("a\nmulti-line\treason")
    for bad in ("a\x00b", "a\nb", " padded", "x\x7f", "bad\x1b[0m"):
        assert not line.match(bad), repr(bad)
    assert not text.match("nul\x00inside")
    avatar = re.compile(AVATAR_URL_PATTERN)
    assert avatar.match("") and avatar.match("HTTPS://cdn.example/a.png")
    for bad in ("ftp://x.example/a", "https://", "https:// x", "https://a\x01", "javascript:1"):
        assert not avatar.match(bad), repr(bad)
    email = re.compile(EMAIL_PATTERN)
    for good in ("ada@example.com", "a.b+c@mail.example.org"):
        assert email.match(good) and _email(good) == good
    for bad in ("a@b", "a b@c.de", "a@b..de", "a@-b.de"):
        assert not email.match(bad), repr(bad)
