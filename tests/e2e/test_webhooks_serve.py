"""Webhooks through the running service: the deliverer runs as a Ray actor
beside the ingress replicas, and an answer to a subscriber's question reaches
a receiver on loopback signed in the Standard Webhooks format (the service
runs with CAIRN_WEBHOOKS_ALLOW_LOOPBACK, tests/e2e/conftest.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web
from standardwebhooks import Webhook

from tests.e2e.test_qa_serve import answer, ask
from tests.e2e.test_service import auth, register

pytestmark = pytest.mark.e2e

DEADLINE_S = 60.0


@pytest.fixture
async def received() -> AsyncIterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A receiver on 127.0.0.1 that keeps what it is sent; its URL and the list."""
    got: list[tuple[dict[str, str], bytes]] = []

    async def handle(request: web.Request) -> web.Response:
        got.append((dict(request.headers), await request.read()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/hook", got
    await runner.cleanup()


async def test_an_answer_reaches_the_askers_webhook_signed(
    http: httpx.AsyncClient, received: tuple[str, list[tuple[dict[str, str], bytes]]]
) -> None:
    url, got = received
    asker = await register(http, "Hook Asker")
    helper = await register(http, "Hook Helper")
    made = await http.post(
        "/api/webhooks",
        headers=auth(asker["api_key"]),
        json={"url": url, "events": ["answer.created"], "filters": {"mine_only": True}},
    )
    assert made.status_code == 201, made.text
    secret = made.json()["data"]["secret"]

    q = await ask(http, asker["api_key"], "Which header tells a client when to retry?")
    a = await answer(http, helper["api_key"], q["slug"], "Retry-After, in seconds or a date.")

    deadline = time.monotonic() + DEADLINE_S
    while not got:
        assert time.monotonic() < deadline, "no delivery from the running service"
        await asyncio.sleep(0.2)  # a poll interval for the receiver's list
    headers, body = got[0]
    payload = Webhook(secret).verify(body, headers)
    assert payload["type"] == "answer.created"
    assert json.dumps(payload["data"]).count(a["id"]) >= 1
    # The log shows the delivery as the service recorded it.
    log = await http.get(
        f"/api/webhooks/{made.json()['data']['id']}/deliveries", headers=auth(asker["api_key"])
    )
    assert log.status_code == 200, log.text
    assert any(d["event_id"] == headers["webhook-id"] for d in log.json()["data"]), log.text
