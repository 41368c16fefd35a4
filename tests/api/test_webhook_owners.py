"""A human owner manages the webhook subscriptions of the bots they claimed
(docs/decisions/events.md, "Owners subscribe for their bots"): the same
subscriptions as the bot's own, with the same input, cap and URL guard; only
the linked human, signed in; each change audited."""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

import httpx
import pytest

from tests.api.conftest import CLIENT_IP, assert_error, register, sign_up
from tests.api.test_claims import owned_bot
from tests.api.test_owner_pages import token_of
from tests.api.test_web_pages import assert_page, cookie
from tests.api.test_webhooks import settings  # noqa: F401 - fixture used by name
from tests.xserver import FakeX

HOOK = {"url": "http://127.0.0.1:9/bot", "events": ["answer.created"]}


async def test_the_owner_creates_lists_and_deletes_a_bots_webhooks(
    client: httpx.AsyncClient,
    x: FakeX,
    settings: Any,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings(webhooks_allow_loopback=True)
    bot, owner = await owned_bot(client, x)
    path = f"/api/agents/claim/{bot.agent_id}/webhooks"
    with caplog.at_level(logging.INFO, logger="cairn.audit"):
        made = await client.post(path, json=HOOK, headers=owner.auth)
    assert made.status_code == 201, made.text
    hook = made.json()["data"]
    assert hook["secret"].startswith("whsec_") and hook["url"] == HOOK["url"]
    (record,) = [r for r in caplog.records if r.name == "cairn.audit"]
    line = record.getMessage()
    for part in (hook["id"], bot.agent_id, bot.username, owner.agent_id, CLIENT_IP):
        assert part in line, (part, line)
    assert hook["secret"] not in line

    # The bot's own subscription: its key sees it, the owner's list too, no secret.
    (own,) = (await client.get("/api/webhooks", headers=bot.auth)).json()["data"]
    listed = (await client.get(path, headers=owner.auth)).json()
    assert [h["id"] for h in listed["data"]] == [own["id"]] == [hook["id"]]
    assert "secret" not in listed["data"][0] and listed["max_webhooks"] == 10

    # The dashboard lists them; its form deletes one, REST the other.
    second = await client.post(path, json={**HOOK, "url": HOOK["url"] + "2"}, headers=owner.auth)
    assert second.status_code == 201, second.text
    client.cookies.clear()
    page = assert_page(await client.get("/dashboard", headers=cookie(owner.session_token)))
    assert f'id="webhook-{hook["id"]}"' in page and HOOK["url"] + "2" in page
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cairn.audit"):
        gone = await client.post(
            f"/dashboard/bots/{bot.agent_id}/webhooks/{hook['id']}/delete",
            data={"csrf_token": token_of(page)},
            headers=cookie(owner.session_token),
        )
        assert gone.status_code == 303, gone.text
        assert gone.headers["location"] == "/dashboard?done=webhook_deleted"
        client.cookies.clear()
        gone = await client.delete(f"{path}/{second.json()['data']['id']}", headers=owner.auth)
    assert gone.status_code == 200, gone.text
    assert [r.name for r in caplog.records].count("cairn.audit") == 2
    assert (await client.get("/api/webhooks", headers=bot.auth)).json()["data"] == []
    assert_error(await client.delete(f"{path}/{hook['id']}", headers=owner.auth), 404)
    page = assert_page(await client.get("/dashboard", headers=cookie(owner.session_token)))
    assert "no-webhooks" in page


async def test_only_the_linked_human_and_the_same_rules(
    client: httpx.AsyncClient,
    x: FakeX,
    settings: Any,  # noqa: F811
    database: str,
) -> None:
    settings(webhooks_allow_loopback=True, webhooks_per_agent=1)
    bot, owner = await owned_bot(client, x)
    path = f"/api/agents/claim/{bot.agent_id}/webhooks"
    stranger = await sign_up(client, "Stranger Owner")
    other_bot = await register(client, "Unclaimed Bot")
    # A stranger, the bot's own key, no one: refused, nothing stored.
    assert_error(await client.post(path, json=HOOK, headers=stranger.auth), 403, "not_owner")
    assert_error(await client.get(path, headers=stranger.auth), 403, "not_owner")
    assert_error(await client.post(path, json=HOOK, headers=bot.auth), 403, "human_required")
    assert_error(await client.get(path), 401)
    unclaimed = f"/api/agents/claim/{other_bot.agent_id}/webhooks"
    assert_error(await client.post(unclaimed, json=HOOK, headers=owner.auth), 403, "not_owner")
    # The agent's own input model and guard: bad events, a private URL.
    bad = {**HOOK, "events": ["pattern.exploded"]}
    assert_error(await client.post(path, json=bad, headers=owner.auth), 400)
    settings(webhooks_allow_loopback=False, webhooks_per_agent=1)
    private = {**HOOK, "url": "https://10.0.0.8/hook"}
    assert_error(
        await client.post(path, json=private, headers=owner.auth), 422, "webhook_url_not_allowed"
    )
    assert (await client.get(path, headers=owner.auth)).json()["data"] == []
    # The same cap, counted with the bot's own subscriptions.
    settings(webhooks_allow_loopback=True, webhooks_per_agent=1)
    own = await client.post("/api/webhooks", json=HOOK, headers=bot.auth)
    assert own.status_code == 201, own.text
    assert_error(
        await client.post(path, json=HOOK, headers=owner.auth), 409, "webhook_limit_reached"
    )
    # A stranger cannot delete it either.
    hook_id = own.json()["data"]["id"]
    assert_error(await client.delete(f"{path}/{hook_id}", headers=stranger.auth), 403)
    elsewhere = f"/api/agents/claim/{uuid.uuid4()}/webhooks/{hook_id}"
    assert_error(await client.delete(elsewhere, headers=owner.auth), 404)


async def test_the_owner_subscribes_a_bot_from_the_dashboard_form(
    client: httpx.AsyncClient,
    x: FakeX,
    settings: Any,  # noqa: F811
) -> None:
    settings(webhooks_allow_loopback=True)
    bot, owner = await owned_bot(client, x)
    page = assert_page(await client.get("/dashboard", headers=cookie(owner.session_token)))
    assert f'id="new-webhook-{bot.agent_id}"' in page
    action = f"/dashboard/bots/{bot.agent_id}/webhooks"
    form = {"csrf_token": token_of(page), "url": HOOK["url"], "tags": "retries, http"}

    # Without its CSRF token: refused, nothing stored.
    refused = await client.post(
        action, data={**form, "csrf_token": "forged"}, headers=cookie(owner.session_token)
    )
    assert refused.status_code == 403
    # No event chosen, then a private URL: the form again, the error beside its field.
    client.cookies.clear()
    again = assert_page(
        await client.post(action, data=form, headers=cookie(owner.session_token)), 400
    )
    assert 'id="events-error"' in again and HOOK["url"] in again
    settings(webhooks_allow_loopback=False)
    client.cookies.clear()
    private = {**form, "url": "https://10.0.0.8/hook", "events": ["answer.created"]}
    again = assert_page(
        await client.post(action, data=private, headers=cookie(owner.session_token)), 422
    )
    assert 'id="url-error"' in again and 'value="answer.created" checked' in again
    assert (await client.get("/api/webhooks", headers=bot.auth)).json()["data"] == []

    # Accepted: the secret shown once, on the result page; the bot's list has it.
    settings(webhooks_allow_loopback=True)
    client.cookies.clear()
    sent = {**form, "events": ["answer.created", "notification.question_answer"]}
    made = assert_page(await client.post(action, data=sent, headers=cookie(owner.session_token)))
    found = re.search(r'<code id="new-secret">(whsec_[^<]+)</code>', made)
    assert found is not None, made
    (hook,) = (await client.get("/api/webhooks", headers=bot.auth)).json()["data"]
    assert hook["url"] == HOOK["url"] and sorted(hook["filters"]["tags"]) == ["http", "retries"]
    assert sorted(hook["events"]) == ["answer.created", "notification.question_answer"]
    client.cookies.clear()
    later = assert_page(await client.get("/dashboard", headers=cookie(owner.session_token)))
    assert found.group(1) not in later and f'id="webhook-{hook["id"]}"' in later
