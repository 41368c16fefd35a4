"""The MCP door through the real service (`cairn run`: HAProxy, two Api
replicas, Postgres, the embedder): agents registered over REST do the whole
flow with the SDK's own client only, with no session kept between calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from tests.e2e.conftest import Service
from tests.e2e.test_search_serve import replicas
from tests.e2e.test_service import register

pytestmark = pytest.mark.e2e


@asynccontextmanager
async def connect(
    service: Service, key: str | None = None, seen: list[str | None] | None = None
) -> AsyncIterator[ClientSession]:
    async def note(response: httpx2.Response) -> None:
        if seen is not None:
            seen.append(response.headers.get("mcp-session-id"))

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60, event_hooks={"response": [note]}) as http,
        streamable_http_client(f"{service.base_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_the_whole_flow_over_mcp_through_serve(
    service: Service, http: httpx.AsyncClient
) -> None:
    asker = await register(http, "MCP Asker")
    helper = await register(http, "MCP Helper")
    seen: list[str | None] = []
    async with (
        connect(service, asker["api_key"], seen) as me,
        connect(service, helper["api_key"], seen) as other,
    ):
        tools = {tool.name for tool in (await me.list_tools()).tools}
        assert {"search", "ask_question", "answer_question", "accept_answer", "vote"} <= tools

        pattern = ok(
            await other.call_tool(
                "publish_pattern",
                {
                    "title": "Drain a message queue with bounded concurrency",
                    "description": "Consume a queue fast without overwhelming what it calls.",
                    "content": "Use a semaphore sized to the downstream capacity; ack after work.",
                },
            )
        )["data"]

        # Search first (semantic once the worker has embedded the pattern).
        deadline = time.monotonic() + 90
        found: dict[str, Any] = {}
        while time.monotonic() < deadline:
            found = ok(
                await me.call_tool("search", {"q": "process queue items in parallel safely"})
            )
            hits = [hit["id"] for hit in found["data"]]
            if found["mode"] == "semantic" and hits and hits[0] == pattern["id"]:
                break
            await asyncio.sleep(0.3)
        else:
            raise AssertionError(f"semantic search never found the pattern: {found}")

        question = ok(
            await me.call_tool(
                "ask_question",
                {
                    "title": "How many queue consumers should one agent run?",
                    "body": "My downstream API rate-limits me when I drain the queue too fast.",
                    "tags": ["queues"],
                },
            )
        )["data"]
        answer = ok(
            await other.call_tool(
                "answer_question",
                {
                    "slug": question["slug"],
                    "body": "Size a semaphore to the API's limit and back off on 429.",
                },
            )
        )["data"]
        accepted = ok(await me.call_tool("accept_answer", {"answer_id": answer["id"]}))
        assert accepted["data"]["is_accepted"] is True
        voted = ok(
            await me.call_tool("vote", {"target": "answer", "id": answer["id"], "vote": "upvote"})
        )
        assert voted["data"] == {"vote_type": "upvote", "vote_score": 1}
        notes = ok(await me.call_tool("list_notifications", {}))["data"]
        assert any(
            n["kind"] == "question_answer" and n["target"]["id"] == question["id"] for n in notes
        ), notes

    # REST sees what MCP wrote: the accepted answer and the helper's reputation
    # (+15 for the acceptance, +10 for the upvote).
    detail = (await http.get(f"/api/questions/{question['slug']}")).json()["data"]
    assert detail["accepted_answer_id"] == answer["id"]
    profile = (await http.get(f"/api/agents/{helper['username']}")).json()["data"]
    assert profile["reputation_score"] >= 25
    # Stateless: no call was tied to a session (any replica could answer it).
    assert seen and all(value is None for value in seen)


async def test_many_stateless_calls_are_served_by_both_replicas(
    service: Service, http: httpx.AsyncClient
) -> None:
    # Four agents share the readers: each session's protocol calls
    # (initialize, …) count its agent's budget as well as its tool calls.
    agents = [await register(http, f"MCP Busy Reader {n}") for n in range(4)]
    api = replicas(service, "Api")
    assert len(api) == 2

    def cpu() -> list[float]:
        return [sum(p.cpu_times()[:2]) for p in api]

    # What the replicas spend idle over a comparable stretch of time.
    before = cpu()
    await asyncio.sleep(3)
    idle = [after - start for after, start in zip(cpu(), before, strict=True)]

    seen: list[str | None] = []

    async def reader(agent: dict[str, str]) -> int:
        done = 0
        async with connect(service, agent["api_key"], seen) as session:
            for _ in range(6):
                listed = ok(await session.call_tool("list_questions", {"limit": 50}))
                assert "pagination" in listed
                done += 1
        return done

    before = cpu()
    started = time.monotonic()
    counts = await asyncio.gather(*(reader(agents[n % 4]) for n in range(20)))
    elapsed = time.monotonic() - started
    busy = [after - start for after, start in zip(cpu(), before, strict=True)]
    assert sum(counts) == 120
    assert seen and all(value is None for value in seen)
    # Both replicas did work for these calls: each spent clearly more CPU than
    # when idle over the same stretch of time.
    for spent, rest in zip(busy, idle, strict=True):
        assert spent > rest * max(1.0, elapsed / 3) + 0.1, (busy, idle, elapsed)
