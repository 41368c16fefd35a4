"""Webhook subscriptions (POST/GET/PATCH/DELETE /api/webhooks): the secret
shown once, the `webhooks` scope, the URL checked by the outbound guard at
subscribe time (nothing stored, no socket opened on a refusal), the cap, bad
input, rotation with an overlap, the ping and the delivery log
(docs/decisions/events.md, "Webhooks")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest
from fastapi import FastAPI
from standardwebhooks import Webhook

from tests.api.conftest import Registered, assert_error, register, scalar
from tests.api.test_mcp import Connect, failed, mcp, ok  # noqa: F401 - fixture used by name

RECEIVER = "https://hooks.example.com/cairn"


@pytest.fixture
def settings(app: FastAPI) -> Iterator[Any]:
    """Change the app's settings for one test."""
    ctx = app.state.ctx
    saved = ctx.settings

    def change(**values: Any) -> None:
        ctx.settings = saved.model_copy(update=values)

    yield change
    ctx.settings = saved


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connection or lookup the guard would make fails the test."""

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(aiohttp.TCPConnector, "_create_connection", refuse)
    monkeypatch.setattr(aiohttp.ThreadedResolver, "resolve", refuse)


async def subscribe(
    client: httpx.AsyncClient, agent: Registered, url: str = RECEIVER, **extra: Any
) -> dict[str, Any]:
    body = {"url": url, "events": ["answer.created"], **extra}
    response = await client.post("/api/webhooks", json=body, headers=agent.auth)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


def stored(database: str, agent: Registered) -> int:
    return int(
        scalar(database, "SELECT count(*) FROM webhooks WHERE agent_id = %s", agent.agent_id)
    )


async def test_subscribe_read_change_delete(
    client: httpx.AsyncClient, settings: Any, database: str
) -> None:
    settings(webhooks_allow_loopback=True)
    agent = await register(client, "Hook Owner")
    made = await subscribe(
        client,
        agent,
        "http://127.0.0.1:9/hook",
        events=["answer.created", "notification.question_answer", "answer.created"],
        filters={"tags": ["Python", "python"], "mine_only": True},
    )
    assert made["secret"].startswith("whsec_")
    Webhook(made["secret"])  # a valid Standard Webhooks secret
    assert made["events"] == ["answer.created", "notification.question_answer"]
    assert made["filters"] == {"tags": ["python"], "mine_only": True, "followed_only": False}
    hook_id = made["id"]

    listed = (await client.get("/api/webhooks", headers=agent.auth)).json()
    assert [h["id"] for h in listed["data"]] == [hook_id] and listed["max_webhooks"] == 10
    assert "secret" not in listed["data"][0]
    one = (await client.get(f"/api/webhooks/{hook_id}", headers=agent.auth)).json()["data"]
    assert "secret" not in one and one["active"] is True

    changed = await client.patch(
        f"/api/webhooks/{hook_id}",
        json={"events": ["pattern.published"], "active": False},
        headers=agent.auth,
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["data"]["events"] == ["pattern.published"]
    assert changed.json()["data"]["active"] is False

    # Another agent sees none of it.
    other = await register(client, "Hook Stranger")
    for method in ("GET", "DELETE"):
        response = await client.request(method, f"/api/webhooks/{hook_id}", headers=other.auth)
        assert_error(response, 404, "webhook_not_found")

    assert (await client.delete(f"/api/webhooks/{hook_id}", headers=agent.auth)).status_code == 200
    assert stored(database, agent) == 0


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/x",  # http without the development setting
        "https://10.0.0.7/hook",  # private
        "https://127.0.0.1/hook",  # loopback without the development setting
        "https://[::ffff:192.168.1.1]/hook",  # mapped private
        "https://169.254.169.254/latest",  # link-local (cloud metadata)
        "https://user:pw@hooks.example.com/x",  # credentials
        "ftp://hooks.example.com/x",
    ],
)
async def test_a_url_the_guard_refuses_stores_nothing_and_opens_no_socket(
    client: httpx.AsyncClient, database: str, no_sockets: None, url: str
) -> None:
    agent = await register(client, "Hook Refused")
    response = await client.post(
        "/api/webhooks", json={"url": url, "events": ["answer.created"]}, headers=agent.auth
    )
    assert_error(response, 422, "webhook_url_not_allowed")
    assert stored(database, agent) == 0


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"url": RECEIVER, "events": ["answer.deleted"]}, 400),  # unknown event
        ({"url": RECEIVER, "events": []}, 400),
        ({"url": RECEIVER, "events": ["answer.created"], "filters": {"tags": ["t"] * 21}}, 400),
        ({"url": RECEIVER, "events": ["answer.created"], "filters": {"tags": ["x" * 51]}}, 400),
        ({"url": RECEIVER, "events": ["answer.created"], "filters": {"categories": ["nope"]}}, 400),
        ({"url": RECEIVER + "/" + "a" * 2000, "events": ["answer.created"]}, 400),
        ({"url": RECEIVER, "events": ["answer.created"], "secret": "mine"}, 400),
    ],
)
async def test_bad_input_is_a_clear_4xx_and_stores_nothing(
    client: httpx.AsyncClient, database: str, body: dict[str, Any], status: int
) -> None:
    agent = await register(client, "Hook Bad Input")
    response = await client.post("/api/webhooks", json=body, headers=agent.auth)
    assert_error(response, status)
    assert stored(database, agent) == 0


async def test_the_cap_and_the_scope(
    client: httpx.AsyncClient, settings: Any, database: str
) -> None:
    settings(webhooks_per_agent=2, webhooks_allow_loopback=True)
    agent = await register(client, "Hook Capped")
    for _ in range(2):
        await subscribe(client, agent, "http://127.0.0.1:9/hook")
    response = await client.post(
        "/api/webhooks",
        json={"url": "http://127.0.0.1:9/hook", "events": ["answer.created"]},
        headers=agent.auth,
    )
    assert_error(response, 409, "webhook_limit_reached")
    assert stored(database, agent) == 2

    async def key(scopes: list[str]) -> dict[str, str]:
        made = await client.post(
            "/api/agents/me/keys",
            json={"name": "-".join(scopes), "scopes": scopes},
            headers=agent.auth,
        )
        assert made.status_code == 201, made.text
        return {"Authorization": f"Bearer {made.json()['data']['api_key']}"}

    writer = await key(["write"])
    assert_error(await client.get("/api/webhooks", headers=writer), 403, "insufficient_scope")
    hooks = await key(["webhooks"])
    assert (await client.get("/api/webhooks", headers=hooks)).status_code == 200
    assert_error(await client.get("/api/webhooks"), 401)


async def test_rotation_ping_and_delivery_log(client: httpx.AsyncClient, settings: Any) -> None:
    settings(webhooks_allow_loopback=True)
    agent = await register(client, "Hook Rotated")
    made = await subscribe(client, agent, "http://127.0.0.1:9/hook")
    path = f"/api/webhooks/{made['id']}"

    rotated = await client.post(f"{path}/rotate-secret", headers=agent.auth)
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["data"]
    assert new["secret"].startswith("whsec_") and new["secret"] != made["secret"]
    read = (await client.get(path, headers=agent.auth)).json()["data"]
    assert read["previous_secret_until"] == new["previous_secret_until"]

    pinged = await client.post(f"{path}/ping", headers=agent.auth)
    assert pinged.status_code == 202, pinged.text
    delivery = pinged.json()["data"]
    assert delivery["type"] == "webhook.ping" and delivery["state"] == "pending"
    log = (await client.get(f"{path}/deliveries", headers=agent.auth)).json()["data"]
    assert [d["id"] for d in log] == [delivery["id"]]

    again = await client.post(f"{path}/deliveries/{delivery['id']}/redeliver", headers=agent.auth)
    assert again.status_code == 202 and again.json()["data"]["event_id"] == delivery["event_id"]
    missing = f"{path}/deliveries/00000000-0000-4000-8000-000000000000/redeliver"
    assert_error(await client.post(missing, headers=agent.auth), 404, "delivery_not_found")


async def test_the_mcp_tools_are_the_same_subscriptions(
    client: httpx.AsyncClient,
    mcp: Connect,  # noqa: F811 - the fixture
    settings: Any,
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True)
    agent = await register(client, "Hook Over Mcp")
    async with mcp(agent.api_key) as session:
        made = ok(
            await session.call_tool(
                "create_webhook",
                {"url": "http://127.0.0.1:9/hook", "events": ["notification.new_follower"]},
            )
        )["data"]
        assert made["secret"].startswith("whsec_")
        listed = ok(await session.call_tool("list_webhooks", {}))["data"]
        assert [h["id"] for h in listed] == [made["id"]]
        paused = ok(
            await session.call_tool("update_webhook", {"webhook_id": made["id"], "active": False})
        )
        assert paused["data"]["active"] is False
        failed(
            await session.call_tool(
                "create_webhook", {"url": "https://10.1.2.3/x", "events": ["answer.created"]}
            ),
            "webhook_url_not_allowed",
        )
        ok(await session.call_tool("delete_webhook", {"webhook_id": made["id"]}))
    assert stored(database, agent) == 0
