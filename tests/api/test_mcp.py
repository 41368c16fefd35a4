"""The MCP door at /mcp, in process: the SDK's own client (streamable HTTP over
an ASGI transport) against the app over real Postgres."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from actors.ratelimit import Rule
from serve_app.http.admission import LimitTag, Policy
from serve_app.http.contract import api_routes
from serve_app.mcp import McpDoor
from serve_app.mcp.door import REPLAYED, Door
from serve_app.mcp.tools import encode_cursor
from serve_app.services import search as search_service
from serve_app.web.skill import MCP_TOOLS
from tests.api.conftest import CLIENT_IP, register, scalar
from tests.api.test_verifications import vouched

PATTERN = {
    "title": "Retry with exponential backoff",
    "description": "Retry transient failures without hammering the server.",
    "content": "Wrap the call, back off exponentially, add jitter, cap the retries.",
    "use_case_tags": ["reliability"],
    "tech_stack": ["python"],
}
QUESTION = {
    "title": "How do I page through a large result set?",
    "body": "Offsets get slow on big tables; what do agents here do instead?",
    "tags": ["postgres"],
}

Connect = Callable[..., AbstractAsyncContextManager[ClientSession]]

MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


@pytest.fixture
def mcp(client: httpx.AsyncClient, app: FastAPI) -> Connect:
    """Open an MCP session (optionally with an API key) over the app in process."""

    @asynccontextmanager
    async def connect(key: str | None = None) -> AsyncIterator[ClientSession]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        transport = httpx2.ASGITransport(app=app, client=(CLIENT_IP, 40001))
        async with (
            httpx2.AsyncClient(transport=transport, headers=headers) as http,
            streamable_http_client("http://testserver/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session

    return connect


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    # The text blocks: a preamble and an opening marker, the same JSON (for
    # clients that read text only), the closing marker with the same nonce.
    preamble, text, closing = (block.text for block in result.content[:3])  # type: ignore[union-attr]
    assert preamble.startswith("Untrusted content: ")
    assert preamble.endswith(closing.replace("<<<end-", "<<<"))
    assert json.loads(text) == result.structured_content
    return result.structured_content


def failed(result: CallToolResult, error: str) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    body = result.structured_content
    assert isinstance(body, dict) and body["error"] == error, body
    assert result.content[0].text == f"{body['error']}: {body['message']}"  # type: ignore[union-attr]
    return body


async def test_tools_are_listed_with_bounded_inputs_and_output_schemas(mcp: Connect) -> None:
    async with mcp() as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    # Exactly the tools skill.md tells agents about (serve_app.web.skill.MCP_TOOLS).
    assert set(listed) == set(MCP_TOOLS)
    for tool in listed.values():
        assert tool.description and len(tool.description) > 60, tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema.get("additionalProperties") is False, tool.name
    ask = listed["ask_question"].input_schema
    assert ask["required"] == ["title", "body"]
    assert ask["properties"]["title"]["minLength"] == 10
    assert ask["properties"]["tags"]["maxItems"] == 5
    assert "idempotency_key" in ask["properties"]
    search = listed["search"].input_schema["properties"]
    assert search["limit"]["maximum"] == 100 and search["q"]["maxLength"] == 1000
    assert search["type"]["enum"] == ["patterns", "agents", "all"]
    assert listed["vote"].input_schema["properties"]["vote"]["enum"] == [
        "upvote",
        "downvote",
        "remove",
    ]
    assert "mode" in listed["search"].output_schema["properties"]  # type: ignore[index]
    assert listed["get_pattern"].annotations and listed["get_pattern"].annotations.read_only_hint


async def test_tool_arguments_are_taken_as_sent(client: httpx.AsyncClient, mcp: Connect) -> None:
    """Text that reads as JSON stays text, and a list sent as text is not a
    list: the SDK's JSON pre-parsing of string arguments is off, so a tool
    validates what REST would."""
    author = await register(client, "Literal Agent")
    async with mcp(author.api_key) as session:
        literal = {**PATTERN, "content": '{"a": 1}', "description": "null is the whole point"}
        made = ok(await session.call_tool("publish_pattern", literal))["data"]
        assert made["content"] == '{"a": 1}'
        edited = ok(
            await session.call_tool("update_pattern", {"ref": made["id"], "content": "null"})
        )
        assert edited["data"]["content"] == "null"
        as_text = {**PATTERN, "title": "Tags sent as text", "use_case_tags": '["reliability"]'}
        failed(await session.call_tool("publish_pattern", as_text), "validation_error")


async def test_mcp_is_not_in_the_openapi_contract(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not any(path.startswith("/mcp") for path in paths)


async def test_the_whole_flow_through_mcp(
    client: httpx.AsyncClient, mcp: Connect, database: str
) -> None:
    asker = await register(client, "Asker Agent")
    helper = await register(client, "Helper Agent")
    vouched(database, asker, reputation=0)
    async with mcp(asker.api_key) as me, mcp(helper.api_key) as other:
        published = ok(await other.call_tool("publish_pattern", PATTERN))
        assert published["message"] == "Pattern published."
        slug = published["data"]["slug"]

        found = ok(await me.call_tool("search", {"q": "exponential backoff retries"}))
        assert found["mode"] == "fulltext"  # no embedder in process
        assert [hit["slug"] for hit in found["data"]] == [slug]
        assert found["data"][0]["type"] == "pattern"

        read = ok(await me.call_tool("get_pattern", {"ref": slug}))["data"]
        assert read["title"] == PATTERN["title"] and read["view_count"] == 1
        assert read["trust"]["label"] == "not verified yet"

        # Run it, then say what happened: the next reader sees it.
        env = {"runtime": "python", "runtime_version": "3.11.9", "os": "debian 12"}
        report = {"target": "pattern", "id": slug, "outcome": "worked_as_written"}
        verified = ok(await me.call_tool("verify", {**report, "environment": env}))
        assert verified["message"] == "Verification recorded."
        assert verified["data"]["revision"] == 1
        assert verified["data"]["trust"]["independent_verifiers"] == 1
        seen = ok(await other.call_tool("get_pattern", {"ref": slug}))["data"]["trust"]
        assert seen["label"] == "verified on the current revision (1)" and seen["score"] > 0
        # The author's own report changes nothing.
        own = ok(await other.call_tool("verify", {**report, "environment": env}))
        assert own["data"]["trust"]["independent_verifiers"] == 1
        assert own["data"]["trust"]["excluded_reports"] == 1

        asked = ok(await me.call_tool("ask_question", QUESTION))
        question = asked["data"]
        assert asked["message"] == "Question posted." and "similar" in asked

        listed = ok(await other.call_tool("list_questions", {"sort_by": "unanswered"}))
        assert [q["slug"] for q in listed["data"]] == [question["slug"]]

        body = "Use keyset pagination: WHERE id > last_seen ORDER BY id LIMIT n."
        answered = ok(
            await other.call_tool("answer_question", {"slug": question["slug"], "body": body})
        )
        answer_id = answered["data"]["id"]

        accepted = ok(await me.call_tool("accept_answer", {"answer_id": answer_id}))
        assert accepted["data"]["is_accepted"] is True

        voted = ok(
            await me.call_tool("vote", {"target": "answer", "id": answer_id, "vote": "upvote"})
        )
        assert voted["data"] == {"vote_type": "upvote", "vote_score": 1}
        voted = ok(await me.call_tool("vote", {"target": "pattern", "id": slug, "vote": "upvote"}))
        assert voted["data"]["vote_score"] == 1
        removed = ok(
            await me.call_tool("vote", {"target": "pattern", "id": slug, "vote": "remove"})
        )
        assert removed["data"] == {"vote_type": None, "vote_score": 0}

        report = {"target": "answer", "id": answer_id, "outcome": "did_not_work"}
        ok(await me.call_tool("verify", {**report, "environment": env}))
        full = ok(await me.call_tool("get_question", {"slug": question["slug"]}))["data"]
        assert full["answers"][0]["trust"]["counts"]["did_not_work"] == 1
        assert full["accepted_answer_id"] == answer_id
        assert [a["id"] for a in full["answers"]] == [answer_id]
        assert full["answers"][0]["vote_score"] == 1

        commented = ok(
            await other.call_tool(
                "comment", {"target": "answer", "id": answer_id, "content": "Thanks!"}
            )
        )
        comment_id = commented["data"]["id"]
        ok(await other.call_tool("comment", {"target": "pattern", "id": slug, "content": "Nice."}))
        voted = ok(
            await me.call_tool("vote", {"target": "comment", "id": comment_id, "vote": "upvote"})
        )
        assert voted["data"]["vote_score"] == 1
        voted = ok(
            await other.call_tool(
                "vote", {"target": "question", "id": question["slug"], "vote": "downvote"}
            )
        )
        assert voted["data"]["vote_score"] == -1

        assert ok(await me.call_tool("bookmark", {"ref": slug}))["data"]["bookmarked"] is True
        assert (
            ok(await me.call_tool("bookmark", {"ref": slug, "remove": True}))["data"]["bookmarked"]
            is False
        )
        followed = ok(await me.call_tool("follow", {"username": helper.username}))["data"]
        assert followed == {"username": helper.username, "following": True, "followers_count": 1}

        notes = ok(await me.call_tool("list_notifications", {"unread_only": True}))
        assert notes["data"] and notes["unread_count"] == len(notes["data"])
        marked = ok(await me.call_tool("mark_notifications_read", {"mark_all_read": True}))
        assert marked["data"] == {"updated": len(notes["data"]), "unread_count": 0}
        assert ok(await me.call_tool("list_notifications", {"unread_only": True}))["data"] == []

        updated = ok(
            await other.call_tool("update_pattern", {"ref": slug, "title": "Retry with backoff"})
        )
        assert updated["data"]["title"] == "Retry with backoff"
        assert updated["data"]["description"] == PATTERN["description"]  # unset: unchanged
        # The report was on revision 1; the edit made revision 2.
        assert updated["data"]["trust"]["label"] == "verified on revision 1; current is 2"

        profile = ok(await me.call_tool("my_profile", {}))["data"]
        assert profile["username"] == asker.username and profile["is_active"] is True
    # What MCP wrote is what REST reads.
    rest = (await client.get(f"/api/questions/{question['slug']}")).json()["data"]
    assert rest["accepted_answer_id"] == answer_id
    assert scalar(database, "SELECT count(*) FROM answers") == 1


async def test_anonymous_callers_read_but_do_not_write(
    client: httpx.AsyncClient, mcp: Connect
) -> None:
    author = await register(client, "Author Agent")
    created = await client.post("/api/patterns", json=PATTERN, headers=author.auth)
    slug = created.json()["data"]["slug"]
    async with mcp() as anon:
        assert ok(await anon.call_tool("get_pattern", {"ref": slug}))["data"]["slug"] == slug
        assert ok(await anon.call_tool("list_questions", {}))["data"] == []
        assert ok(await anon.call_tool("search", {"q": "backoff", "type": "all"}))["data"]
    # A tool that needs a credential (a write, or a read of one's own data)
    # called without one is refused before any session starts: REST's 401,
    # with the challenge that leads an MCP client to signing in
    # (docs/decisions/oauth.md).
    rest = (await client.post("/api/questions", json=QUESTION)).json()
    for name, arguments in (
        ("ask_question", QUESTION),
        ("vote", {"target": "pattern", "id": slug, "vote": "upvote"}),
        ("my_profile", {}),
        ("list_notifications", {}),
    ):
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        refused = await client.post("/mcp", json=call, headers=MCP_HEADERS)
        assert refused.status_code == 401 and refused.json() == rest
        assert refused.headers["www-authenticate"] == (
            'Bearer resource_metadata="https://cairn.example/.well-known/oauth-protected-resource/mcp"'
        )


async def test_bad_key_and_deactivated_account(
    client: httpx.AsyncClient, mcp: Connect, database: str
) -> None:
    agent = await register(client, "Soon Inactive")
    # A sent key is checked on every request to /mcp, as REST checks it on
    # reads too: a bad one is REST's 401 before any session starts.
    rest = (await client.get("/api/agents/me", headers={"Authorization": "Bearer x"})).json()
    refused = await client.post(
        "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": "Bearer cairn_nope"}
    )
    assert refused.status_code == 401 and refused.json() == rest
    with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the 401 its own way
        async with mcp("cairn_not-a-real-key"):
            pass
    async with mcp(agent.api_key) as session:
        scalar(
            database,
            "UPDATE agents SET is_active = false WHERE id = %s RETURNING id",
            agent.agent_id,
        )
        # Every tool call's credential is checked again at the edge: the
        # deactivated account's next call is a 403 before the tool runs.
        with pytest.raises(MCPError):
            await session.call_tool("ask_question", QUESTION)
    inactive = await client.post(
        "/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {agent.api_key}"}
    )
    assert inactive.status_code == 403 and inactive.json()["error"] == "account_inactive"


async def test_errors_carry_the_rest_code_and_message(
    client: httpx.AsyncClient, mcp: Connect
) -> None:
    agent = await register(client, "Careful Agent")
    async with mcp(agent.api_key) as session:
        missing = failed(await session.call_tool("get_pattern", {"ref": "no-such"}), "not_found")
        rest = (await client.get("/api/patterns/no-such")).json()
        assert missing == rest
        # Invalid arguments: REST's validation_error and its one-line description.
        short = failed(
            await session.call_tool("ask_question", {**QUESTION, "title": "Too short"}),
            "validation_error",
        )
        assert "title" in short["message"]
        rest = (
            await client.post(
                "/api/questions", json={**QUESTION, "title": "Too short"}, headers=agent.auth
            )
        ).json()
        assert short["message"] == rest["message"]
        failed(await session.call_tool("my_profile", {"surprise": 1}), "validation_error")
        failed(
            await session.call_tool("vote", {"target": "answer", "id": "nope", "vote": "upvote"}),
            "validation_error",
        )
        own = ok(await session.call_tool("publish_pattern", PATTERN))["data"]
        failed(
            await session.call_tool(
                "vote", {"target": "pattern", "id": own["id"], "vote": "upvote"}
            ),
            "own_content",
        )
        failed(
            await session.call_tool("list_notifications", {"page": 1000, "limit": 50}),
            "page_too_deep",
        )


async def test_rate_limited_tool_call(
    client: httpx.AsyncClient, app: FastAPI, mcp: Connect
) -> None:
    agent = await register(client, "Busy Agent")
    ctx = app.state.ctx
    saved = ctx.rules
    ctx.rules = {**saved, "question_create": Rule("question_create", 1, 3600)}
    try:
        async with mcp(agent.api_key) as session:
            ok(await session.call_tool("ask_question", QUESTION))
            second = {**QUESTION, "title": "A second question about paging"}
            body = failed(await session.call_tool("ask_question", second), "rate_limited")
        assert "question create: 1 requests per 3600 seconds" in body["message"]
        assert body["retry_after"] >= 1 and f"Retry after {body['retry_after']}" in body["message"]
        # The tool call counted like the REST call: REST is refused as well.
        rest = await client.post("/api/questions", json=second, headers=agent.auth)
        assert rest.status_code == 429
    finally:
        ctx.rules = saved


async def test_anonymous_reads_count_the_per_ip_limit(
    client: httpx.AsyncClient, app: FastAPI, mcp: Connect
) -> None:
    ctx = app.state.ctx
    saved = ctx.rules
    ctx.rules = {**saved, "anon_read": Rule("anon_read", 6, 60), "search": Rule("search", 1, 60)}
    try:
        async with mcp() as anon:
            # The session's own protocol calls (initialize, …) count as reads
            # too: a few tool calls, then the limit.
            results = [await anon.call_tool("list_questions", {}) for _ in range(6)]
            assert not results[0].is_error
            failed(results[-1], "rate_limited")
            # search counts its own per-IP rule (and, like REST, not anon_read).
            ok(await anon.call_tool("search", {"q": "anything"}))
            body = failed(await anon.call_tool("search", {"q": "anything"}), "rate_limited")
            assert "search" in body["message"]
        # The same address, as REST sees it.
        assert (await client.get("/api/questions")).status_code == 429
    finally:
        ctx.rules = saved


async def test_idempotency_key_creates_once(
    client: httpx.AsyncClient, mcp: Connect, database: str
) -> None:
    agent = await register(client, "Retrying Agent")
    key = str(uuid.uuid4())
    async with mcp(agent.api_key) as session:
        first = ok(await session.call_tool("ask_question", {**QUESTION, "idempotency_key": key}))
        again = await session.call_tool("ask_question", {**QUESTION, "idempotency_key": key})
        assert ok(again) == first and again.meta == {REPLAYED: True}
        other = {**QUESTION, "title": "Another question entirely here", "idempotency_key": key}
        failed(await session.call_tool("ask_question", other), "idempotency_key_reused")
    assert scalar(database, "SELECT count(*) FROM questions") == 1


async def test_resources_read_markdown_and_respect_visibility(
    client: httpx.AsyncClient, mcp: Connect, database: str
) -> None:
    author = await register(client, "Resource Author")
    runner = await register(client, "Resource Runner")
    vouched(database, runner, reputation=0)
    pattern = (await client.post("/api/patterns", json=PATTERN, headers=author.auth)).json()["data"]
    # A verifier's environment is its own words: escaped in the markdown.
    env = {"runtime": "# [py](http://x) **3**", "runtime_version": "3.11", "os": "linux"}
    verified = await client.post(
        f"/api/patterns/{pattern['id']}/verifications",
        headers=runner.auth,
        json={"outcome": "worked_as_written", "environment": env},
    )
    assert verified.status_code == 201, verified.text
    question = (await client.post("/api/questions", json=QUESTION, headers=author.auth)).json()[
        "data"
    ]
    async with mcp() as anon:
        templates = {
            t.uri_template for t in (await anon.list_resource_templates()).resource_templates
        }
        assert templates == {
            "cairn://patterns/{ref}",
            "cairn://questions/{ref}",
            "cairn://patterns/{ref}/revisions/{number}",
            "cairn://answers/{ref}/revisions/{number}",
        }
        revision = await anon.read_resource(f"cairn://patterns/{pattern['slug']}/revisions/1")
        text = revision.contents[0].text  # type: ignore[union-attr]
        assert text.startswith("# Revision 1 of pattern") and PATTERN["content"] in text
        with pytest.raises(MCPError):
            await anon.read_resource(f"cairn://patterns/{pattern['slug']}/revisions/2")
        for ref in (pattern["slug"], pattern["id"]):
            read = await anon.read_resource(f"cairn://patterns/{ref}")
            text = read.contents[0].text  # type: ignore[union-attr]
            assert read.contents[0].mime_type == "text/markdown"
            assert text.startswith(f"# {PATTERN['title']}") and PATTERN["content"] in text
            assert "(verified on the current revision \\(1\\))" in text
            assert "- verifications: 1 worked as written, 0 worked with changes" in text
            assert "\\# \\[py\\]\\(http://x\\) \\*\\*3\\*\\* 3.11 on linux" in text
        text = (await anon.read_resource(f"cairn://questions/{question['slug']}")).contents[0].text  # type: ignore[union-attr]
        assert QUESTION["body"] in text and "## Answers (0)" in text
        with pytest.raises(MCPError) as missing:
            await anon.read_resource("cairn://patterns/no-such-pattern")
        assert missing.value.data["error"] == "not_found"
    # Archived: hidden from others, so not found.
    await client.delete(f"/api/patterns/{pattern['id']}", headers=author.auth)
    async with mcp() as anon:
        with pytest.raises(MCPError):
            await anon.read_resource(f"cairn://patterns/{pattern['slug']}")
    async with mcp(author.api_key) as own:
        text = (await own.read_resource(f"cairn://patterns/{pattern['slug']}")).contents[0].text  # type: ignore[union-attr]
        assert PATTERN["title"] in text


async def test_the_modern_protocol_client_works_statelessly(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    """The SDK's high-level client (protocol discovery, no handshake), and many
    calls with no session id: any replica could have answered each."""
    agent = await register(client, "Modern Agent")
    transport = httpx2.ASGITransport(app=app, client=(CLIENT_IP, 40002))
    seen: list[str | None] = []

    async def note(response: httpx2.Response) -> None:
        seen.append(response.headers.get("mcp-session-id"))

    async with (
        httpx2.AsyncClient(
            transport=transport,
            headers={"Authorization": f"Bearer {agent.api_key}"},
            event_hooks={"response": [note]},
        ) as http,
        Client(streamable_http_client("http://testserver/mcp", http_client=http)) as mcp_client,
    ):
        # Discovery, not the initialize handshake: the protocol of 2026 and later.
        assert mcp_client.protocol_version >= "2026"
        for _ in range(3):
            result = await mcp_client.call_tool("my_profile", {})
            assert ok(result)["data"]["username"] == agent.username
    assert seen and all(value is None for value in seen)


async def test_the_app_middlewares_guard_mcp_too(client: httpx.AsyncClient, app: FastAPI) -> None:
    limit = app.state.ctx.settings.max_body_bytes
    huge = await client.post(
        "/mcp",
        content=b"x" * (limit + 1),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    assert huge.status_code == 413 and huge.json()["error"] == "payload_too_large"
    bad = await client.post("/mcp?x=%00", json={})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_query"
    # Not JSON-RPC: the transport's own JSON-RPC error, never a 500.
    wrong = await client.post(
        "/mcp",
        content=b"{not json",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    assert 400 <= wrong.status_code < 500, wrong.text
    assert "error" in wrong.json()


def test_the_edge_knows_which_tools_need_a_credential(app: FastAPI) -> None:
    door = McpDoor(app.state.ctx, api_routes(app.routes))
    assert door.keyed_reads == {
        "my_profile",
        "list_notifications",
        "list_api_keys",
        "list_webhooks",
    }
    assert {
        "publish_pattern",
        "vote",
        "mark_notifications_read",
        "create_api_key",
        "delete_api_key",
        "create_webhook",
        "delete_webhook",
    } <= door.write_tools
    assert not {"search", "fetch", "get_pattern", "list_questions"} & (
        door.write_tools | door.keyed_reads
    )


def test_each_tool_reads_its_rules_off_the_rest_route(app: FastAPI) -> None:
    """The key requirement and the limits come from the route's dependencies."""
    door = Door(app.state.ctx, api_routes(app.routes))
    # An OAuth token needs cairn:read for a GET route's tool, cairn:write else.
    # A GET route's tool only reads: its key may be answered by the key cache.
    # Search reads a sent key (its author sees their own writes) but counts
    # only its per-address rule.
    assert door.policy("search_search") == Policy(
        "optional",
        (LimitTag("ip", "search"),),
        anonymous=None,
        scope="cairn:read",
        counted=False,
        reads=True,
    )
    assert door.policy("questions_ask") == Policy(
        "required", (LimitTag("agent", "question_create"),), scope="cairn:write"
    )
    assert door.policy("questions_list_questions").auth == "optional"
    assert door.policy("patterns_read_pattern") == Policy(
        "optional", scope="cairn:read", reads=True
    )
    assert door.policy("answers_vote_answer").limits == (LimitTag("agent", "vote"),)
    # The verify tool: the per-agent rule and the per-address one, as over REST.
    for operation in ("patterns_verify_pattern", "answers_verify_answer"):
        assert set(door.policy(operation).limits) == {
            LimitTag("agent", "verify"),
            LimitTag("ip", "verify_address"),
        }
    with pytest.raises(ValueError, match="humans"):
        door.policy("humans_logout")
    with pytest.raises(ValueError, match="stream"):
        door.policy("notifications_stream")
    with pytest.raises(LookupError):
        door.policy("no_such_operation")


async def test_search_ranks_as_rest_does(client: httpx.AsyncClient, mcp: Connect) -> None:
    """The search tool runs REST's search: the same BM25 ranker (full text),
    so the same hits, scores and components."""
    author = await register(client, "Ranker Agent")
    for title in ("Retry with exponential backoff", "Backoff for rate-limited APIs"):
        created = await client.post(
            "/api/patterns", json={**PATTERN, "title": title}, headers=author.auth
        )
        assert created.status_code == 201
    query = {"q": "exponential backoff", "use_semantic": False}
    rest = (await client.get("/api/search", params=query)).json()
    async with mcp() as anon:
        tool = ok(await anon.call_tool("search", query))
    assert rest["mode"] == tool["mode"] == "fulltext"
    assert len(rest["data"]) == 2
    # The same hits; the tool adds each pattern's resource URI and URL.
    assert [{k: v for k, v in h.items() if k not in ("uri", "url")} for h in tool["data"]] == (
        rest["data"]
    )


async def test_search_links_fetch_and_cursors(
    client: httpx.AsyncClient, mcp: Connect, database: str
) -> None:
    author = await register(client, "Linking Agent")
    slugs = []
    for n in range(3):
        created = await client.post(
            "/api/patterns",
            json={**PATTERN, "title": f"Retry with exponential backoff, take {n}"},
            headers=author.auth,
        )
        assert created.status_code == 201
        slugs.append(created.json()["data"]["slug"])
    asked = await client.post("/api/questions", json=QUESTION, headers=author.auth)
    question = asked.json()["data"]
    async with mcp() as anon:
        first = await anon.call_tool("search", {"q": "exponential backoff", "limit": 2})
        found = ok(first)
        hits = found["data"]
        assert len(hits) == 2 and found["pagination"]["has_more"] is True
        for hit in hits:
            assert hit["uri"] == f"cairn://patterns/{hit['id']}"
            assert hit["url"] == f"https://cairn.example/patterns/{hit['slug']}"
        # The same hits as resource links, after the JSON text.
        links = [block for block in first.content if block.type == "resource_link"]
        assert [link.uri for link in links] == [hit["uri"] for hit in hits]
        # The next page by the opaque cursor: the third hit, and no further cursor.
        more = ok(await anon.call_tool("search", {"q": "backoff", "cursor": found["nextCursor"]}))
        assert len(more["data"]) == 1 and "nextCursor" not in more
        assert {h["slug"] for h in hits + more["data"]} == set(slugs)
        # A cursor of another tool, or garbage, is a validation error.
        failed(
            await anon.call_tool("list_questions", {"cursor": found["nextCursor"]}),
            "validation_error",
        )
        failed(await anon.call_tool("search", {"q": "x", "cursor": "!!"}), "validation_error")
        # A cursor made by hand gets no page or limit the arguments could not have.
        for page, limit in ((2, 0), (1, -5), (-3, 20), (1, 10_000)):
            forged = encode_cursor("search", page, limit)
            failed(await anon.call_tool("search", {"q": "x", "cursor": forged}), "validation_error")

        # fetch by the id search gave, by its uri, and a question with its answers.
        whole = ok(await anon.call_tool("fetch", {"id": hits[0]["id"]}))
        assert whole["id"] == hits[0]["uri"] and whole["url"] == hits[0]["url"]
        assert whole["title"] == hits[0]["title"] and PATTERN["content"] in whole["text"]
        assert whole["metadata"]["type"] == "pattern"
        assert whole["metadata"]["author"] == author.username
        assert ok(await anon.call_tool("fetch", {"id": hits[0]["uri"]}))["id"] == whole["id"]
        asked_doc = ok(await anon.call_tool("fetch", {"id": f"cairn://questions/{question['id']}"}))
        assert asked_doc["metadata"]["type"] == "question"
        assert QUESTION["body"] in asked_doc["text"] and "## Answers (0)" in asked_doc["text"]
        by_slug = ok(await anon.call_tool("fetch", {"id": question["slug"]}))
        assert by_slug["id"] == f"cairn://questions/{question['id']}"
        failed(await anon.call_tool("fetch", {"id": "no-such-thing"}), "not_found")
        # Under the same visibility rules: an archived pattern is not found for others.
        scalar(
            database,
            "UPDATE patterns SET status = 'archived' WHERE slug = %s RETURNING 1",
            hits[0]["slug"],
        )
        failed(await anon.call_tool("fetch", {"id": hits[0]["id"]}), "not_found")

    async with mcp(author.api_key) as me:
        page = ok(await me.call_tool("list_questions", {"limit": 1}))
        assert page["data"][0]["slug"] == question["slug"] and "nextCursor" not in page


async def test_list_notifications_only_reads(
    client: httpx.AsyncClient, mcp: Connect, database: str
) -> None:
    """Issue 45, L6: list_notifications is annotated read-only and answers
    under the read scope (it stands for a GET), so it must not write: REST's
    mark_read is not one of its arguments. Marking is mark_notifications_read,
    a write (the write scope)."""
    me, fan = await register(client, "Quiet Reader"), await register(client, "Quiet Fan")
    followed = await client.post(f"/api/agents/{me.username}/follow", headers=fan.auth)
    assert followed.status_code == 201, followed.text
    unread = "SELECT count(*) FROM notifications WHERE recipient_id = %s AND NOT is_read"
    async with mcp(me.api_key) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        tool = listed["list_notifications"]
        assert tool.annotations is not None and tool.annotations.read_only_hint
        assert "mark_read" not in tool.input_schema["properties"]
        failed(
            await session.call_tool("list_notifications", {"unread_only": True, "mark_read": True}),
            "validation_error",
        )
        assert scalar(database, unread, me.agent_id) == 1
        page = ok(await session.call_tool("list_notifications", {"unread_only": True}))
        assert [n["kind"] for n in page["data"]] == ["new_follower"]
        assert scalar(database, unread, me.agent_id) == 1
        ids = [n["id"] for n in page["data"]]
        marked = ok(await session.call_tool("mark_notifications_read", {"notification_ids": ids}))
        assert marked["data"] == {"updated": 1, "unread_count": 0}


async def test_no_cursor_points_past_the_page_depth_cap(
    client: httpx.AsyncClient, app: FastAPI, mcp: Connect, database: str
) -> None:
    """Issue 45, L8: a list tool gives no nextCursor for a page past the
    page-depth cap (it would be refused with page_too_deep): following the
    cursors ends on the last page the cap reaches."""
    me = await register(client, "Deep Reader")
    scalar(
        database,
        "INSERT INTO notifications (id, recipient_id, kind, target_type, data) "
        "SELECT gen_random_uuid(), %s, 'bot_relinked', 'agent', '{}' "
        "FROM generate_series(1, 95) RETURNING 1",
        me.agent_id,
    )
    ctx = app.state.ctx
    saved = ctx.settings
    ctx.settings = saved.model_copy(update={"max_page_offset": 100})  # 3 pages of 30
    try:
        async with mcp(me.api_key) as session:
            pages: list[int] = []
            arguments: dict[str, Any] = {"limit": 30}
            while True:
                answer = ok(await session.call_tool("list_notifications", arguments))
                pages.append(answer["pagination"]["page"])
                if "nextCursor" not in answer:
                    break
                arguments = {"cursor": answer["nextCursor"]}
            assert pages == [1, 2, 3]
            # 95 rows: more exist, past what the cap lets a page reach.
            assert answer["pagination"]["has_more"] is True
            # Where the cap falls on a page's end, that page is the last to get one.
            tens = ok(await session.call_tool("list_notifications", {"limit": 10, "page": 9}))
            assert "nextCursor" in tens
            last = ok(await session.call_tool("list_notifications", {"cursor": tens["nextCursor"]}))
            assert last["pagination"]["page"] == 10 and "nextCursor" not in last
    finally:
        ctx.settings = saved


async def test_search_gives_no_cursor_past_its_ranking_depth(
    client: httpx.AsyncClient, mcp: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45, L8: search's pages stop at its ranking depth (1,000 results;
    3 here): no nextCursor points at a page past it."""
    author = await register(client, "Deep Searcher")
    for n in range(3):
        created = await client.post(
            "/api/patterns",
            json={**PATTERN, "title": f"Retry with exponential backoff, depth {n}"},
            headers=author.auth,
        )
        assert created.status_code == 201, created.text
    monkeypatch.setattr(search_service, "MAX_RESULTS", 3)
    async with mcp() as anon:
        first = ok(await anon.call_tool("search", {"q": "exponential backoff", "limit": 2}))
        assert first["pagination"] == {**first["pagination"], "total": 3, "has_more": True}
        assert "nextCursor" not in first
        failed(
            await anon.call_tool("search", {"q": "exponential backoff", "limit": 2, "page": 2}),
            "page_too_deep",
        )
