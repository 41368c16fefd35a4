"""The notification stream through the real service: Serve's HAProxy, two Api
replicas (each with its own LISTEN connection), the embedded Postgres."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import psycopg
import pytest

from storage.db import libpq_url
from storage.repositories.notifications import LISTENER_NAME
from tests.api.test_questions import QUESTION
from tests.e2e.conftest import Service
from tests.e2e.test_service import auth, register

pytestmark = pytest.mark.e2e

WAIT_S = 30.0


class Lines:
    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def event(self) -> dict[str, str]:
        """The next event's fields (comment lines are skipped)."""
        fields: dict[str, str] = {}
        while True:
            line = await asyncio.wait_for(anext(self._lines), WAIT_S)
            if line.startswith(":"):
                continue
            if not line:
                if fields:
                    return fields
                continue
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")

    async def pings(self, count: int) -> None:
        """Read until ``count`` heartbeats came, with no event between."""
        while count:
            line = await asyncio.wait_for(anext(self._lines), WAIT_S)
            assert not line.startswith(("event:", "data:")), line
            count -= line == ": ping"


@asynccontextmanager
async def stream(service: Service, key: str, last: str | None = None) -> AsyncIterator[Lines]:
    headers = {**auth(key), **({"Last-Event-ID": last} if last else {})}
    async with (
        httpx.AsyncClient(base_url=service.base_url, timeout=httpx.Timeout(WAIT_S)) as client,
        client.stream("GET", "/api/notifications/stream", headers=headers) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Lines(response)


def listeners(service: Service) -> int:
    with psycopg.connect(libpq_url(service.database_url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (LISTENER_NAME,),
        ).fetchone()
    return int(row[0]) if row else 0


async def answer(http: httpx.AsyncClient, key: str, slug: str, body: str) -> dict[str, Any]:
    response = await http.post(
        f"/api/questions/{slug}/answers", headers=auth(key), json={"body": body}
    )
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


async def test_stream_delivers_across_replicas_and_replays_after_reconnect(
    http: httpx.AsyncClient, service: Service
) -> None:
    asker, other = await register(http, "Stream Asker"), await register(http, "Stream Other")
    helpers = [await register(http, f"Stream Helper {i}") for i in range(3)]
    response = await http.post("/api/questions", headers=auth(asker["api_key"]), json=QUESTION)
    assert response.status_code == 201, response.text
    slug = response.json()["data"]["slug"]

    async with stream(service, asker["api_key"]) as mine, stream(service, other["api_key"]):
        ready = await mine.event()
        assert ready["event"] == "ready" and len(ready["id"]) == 32
        # HAProxy sends each new connection to the replica with the fewest
        # (leastconn): the two streams are on different replicas, each with
        # its own LISTEN connection, and the answers below are written by
        # whichever replica HAProxy picks; the stream hears of them all.
        deadline = time.monotonic() + WAIT_S
        while listeners(service) < 2:
            assert time.monotonic() < deadline, "both replicas should listen"
            await asyncio.sleep(0.2)
        got = []
        for i, helper in enumerate(helpers[:2]):
            made = await answer(http, helper["api_key"], slug, f"Answer number {i}: use backoff.")
            event = await mine.event()
            assert event["event"] == "notification", event
            item = json.loads(event["data"])
            assert item["kind"] == "question_answer"
            assert item["data"]["answer_id"] == made["id"]
            got.append(event["id"])
    assert got == sorted(got) and ready["id"] < got[0]

    # Disconnected: a third answer comes; reconnecting with the last id replays it.
    missed = await answer(http, helpers[2]["api_key"], slug, "Answer number 2: use jitter.")
    async with stream(service, asker["api_key"], last=got[-1]) as mine:
        assert (await mine.event())["id"] == got[-1]  # ready, where it resumes
        event = await mine.event()
        assert event["event"] == "notification" and event["id"] > got[-1]
        assert json.loads(event["data"])["data"]["answer_id"] == missed["id"]
        # Nothing else: only heartbeats follow, through HAProxy, unbuffered.
        await mine.pings(2)


async def test_stream_refusals_through_serve(http: httpx.AsyncClient) -> None:
    response = await http.get("/api/notifications/stream")
    assert response.status_code == 401
    assert response.json()["error"] == "missing_api_key"
