"""Humans, claiming, appeals and account deletion through the real service
(Ray Serve, HAProxy, the embedded Postgres), with a local server playing X."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.conftest import Service
from tests.e2e.test_patterns_serve import publish
from tests.e2e.test_service import as_client, auth, register

pytestmark = pytest.mark.e2e


async def sign_up(http: httpx.AsyncClient, name: str, email: str) -> dict[str, str]:
    response = await http.post(
        "/api/humans/register",
        json={"name": name, "email": email, "password": "a long passphrase"},
        headers=as_client(),
    )
    assert response.status_code == 201, response.text
    data: dict[str, str] = response.json()["data"]
    return data


async def test_sign_in_claim_and_appeal(http: httpx.AsyncClient, service: Service) -> None:
    bot = await register(http, "Claimed Through Serve")
    human = await sign_up(http, "Olive", "olive@e2e.example")
    login = await http.post(
        "/api/humans/login",
        json={"email": "olive@e2e.example", "password": "a long passphrase"},
        headers=as_client(),
    )
    assert login.status_code == 200, login.text
    assert "HttpOnly" in login.headers["set-cookie"]
    session = auth(login.json()["data"]["session_token"])
    claim_path = f"/api/agents/claim/{bot['agent_id']}"

    status = (await http.get(claim_path)).json()["data"]
    assert status["claim_code"] == bot["claim_code"] and status["is_claimed"] is False
    page = await http.get(f"/agents/claim/{bot['agent_id']}")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert (
        bot["claim_code"] in page.text
        and "script-src 'self'" in page.headers["content-security-policy"]
    )

    # Bad input changes nothing and never reaches X.
    asked = len(service.x.requests)
    for url in (
        "https://127.0.0.1/olive/status/1",
        "https://x.com/olive",
        "http://x.com/o/status/1",
    ):
        response = await http.post(claim_path, headers=session, json={"tweet_url": url})
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_tweet_url"
    assert len(service.x.requests) == asked
    no_code = service.x.post("olive_x", "hello world")
    response = await http.post(claim_path, headers=session, json={"tweet_url": no_code})
    assert response.status_code == 400 and response.json()["error"] == "claim_code_missing"
    with_key = await http.post(
        claim_path, headers=auth(bot["api_key"]), json={"tweet_url": no_code}
    )
    assert with_key.status_code == 403, with_key.text
    assert (await http.get(claim_path)).json()["data"]["is_claimed"] is False

    post = service.x.post("olive_x", f"Verifying my Cairn agent: {bot['claim_code']}")
    claimed = await http.post(claim_path, headers=session, json={"tweet_url": post})
    assert claimed.status_code == 200, claimed.text
    assert claimed.json()["data"]["owner_x_handle"] == "olive_x"
    profile = (await http.get(f"/api/agents/{human['username']}")).json()["data"]
    assert [b["username"] for b in profile["linked_bots"]] == [bot["username"]]

    # The profile pages send each kind of account to its own URL.
    wrong = await http.get(f"/agents/{human['username']}", follow_redirects=False)
    assert wrong.status_code == 308 and wrong.headers["location"].endswith(
        f"/users/{human['username']}"
    )
    assert bot["username"] in (await http.get(f"/users/{human['username']}")).text

    # The same person on a new profile re-links the bot: a one-time code for
    # this profile and bot, posted from the bot's X account.
    again = await sign_up(http, "Olive Again", "olive2@e2e.example")
    replayed = await http.patch(
        claim_path, headers=auth(again["session_token"]), json={"tweet_url": post}
    )
    assert replayed.status_code == 409, replayed.text  # the claim post proved once
    issued = await http.post(f"{claim_path}/relink-code", headers=auth(again["session_token"]))
    assert issued.status_code == 201, issued.text
    proof = service.x.post("olive_x", issued.json()["data"]["post_text"])
    relinked = await http.patch(
        claim_path, headers=auth(again["session_token"]), json={"tweet_url": proof}
    )
    assert relinked.status_code == 200, relinked.text
    moved = (await http.get(f"/api/agents/{again['username']}")).json()["data"]["linked_bots"]
    assert [b["username"] for b in moved] == [bot["username"]]

    # One X account, one bot.
    other = await register(http, "Second Bot")
    second = service.x.post("olive_x", other["claim_code"])
    refused = await http.post(
        f"/api/agents/claim/{other['agent_id']}", headers=session, json={"tweet_url": second}
    )
    assert refused.status_code == 409, refused.text

    # The owner now is the new profile (the first one's proof is no longer
    # the latest): it appeals.
    appeal = await http.post(
        f"/api/agents/reclaim/{bot['agent_id']}",
        headers=auth(again["session_token"]),
        json={
            "appeal_reason": "Please restore my agent, it was suspended in error.",
            "captcha_token": "cairn-captcha-test",
        },
    )
    assert appeal.status_code == 201, appeal.text
    assert appeal.json()["data"]["status"] == "pending_review"

    # A moderator sees it and upholds it.
    mod = await register(http, "Appeal Moderator")
    service.set_role(mod["username"], "moderator")
    queue = await http.get("/api/moderation?tab=appeals", headers=auth(mod["api_key"]))
    assert queue.status_code == 200, queue.text
    (row,) = queue.json()["data"]
    decided = await http.patch(
        "/api/moderation",
        headers=auth(mod["api_key"]),
        json={"appeal_id": row["id"], "action": "approve", "notes": "Restored."},
    )
    assert decided.status_code == 200, decided.text

    out = await http.post("/api/humans/logout", headers=session)
    assert out.status_code == 200
    assert (await http.get("/api/agents/me", headers=session)).status_code == 401


async def test_account_deletion(http: httpx.AsyncClient) -> None:
    leaving, staying = await register(http, "Leaving E2E"), await register(http, "Staying E2E")
    pattern = await publish(http, leaving["api_key"], "A pattern that leaves with its author")
    kept = await publish(http, staying["api_key"], "A pattern that stays")
    voted = await http.post(
        f"/api/patterns/{kept['id']}/vote",
        headers=auth(leaving["api_key"]),
        json={"vote_type": "upvote"},
    )
    assert voted.status_code == 200, voted.text
    other = await http.delete(
        f"/api/agents/{leaving['username']}", headers=auth(staying["api_key"])
    )
    assert other.status_code == 403

    gone = await http.delete(f"/api/agents/{leaving['username']}", headers=auth(leaving["api_key"]))
    assert gone.status_code == 200, gone.text
    assert (await http.get("/api/agents/me", headers=auth(leaving["api_key"]))).status_code == 401
    assert (await http.get(f"/api/patterns/{pattern['id']}")).status_code == 404
    assert (await http.get(f"/api/agents/{leaving['username']}")).status_code == 404
    after = (await http.get(f"/api/patterns/{kept['id']}")).json()["data"]
    assert after["vote_score"] == 0
    author = (await http.get(f"/api/agents/{staying['username']}")).json()["data"]
    assert author["reputation_score"] == 0
