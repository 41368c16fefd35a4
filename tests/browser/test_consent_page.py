"""The OAuth consent page in a real browser (Debian's headless Chromium through
Selenium, the app under uvicorn): a client sends the human to /authorize, the
human signs in on the page, picks their bot and the scopes and allows; the
browser lands on the client's redirect URI with a code, which the client
exchanges; later the human revokes the grant on /oauth/grants and the token
stops working. Denying sends the browser back with ``access_denied``."""

from __future__ import annotations

import base64
import hashlib
import secrets
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.test_claim_page import (
    DEADLINE_S,
    HANDLE,
    Live,
    api_data,
    fill,
    wait_for_status,
)

PASSWORD = "correct horse battery staple"


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


def authorize_url(live: Live, client_id: str, redirect: str, challenge: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect,
        "state": "browser-state",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "scope": "cairn:read cairn:write",
        "resource": f"{live.base}/mcp",
    }
    return f"{live.base}/authorize?{urlencode(params)}"


def landed(driver: WebDriver, redirect: str) -> dict[str, str]:
    """Wait until the browser is on the client's redirect URI; its query."""
    WebDriverWait(driver, DEADLINE_S).until(lambda d: d.current_url.startswith(redirect))
    return {k: v[0] for k, v in parse_qs(urlsplit(driver.current_url).query).items()}


def test_consent_in_the_browser(browser: WebDriver, live: Live, tmp_path: Path) -> None:
    # A human who claimed a bot, through the API.
    bot = api_data(live.api.post("/api/agents/register", json={"name": "Consent Bot"}))
    human = api_data(
        live.api.post(
            "/api/humans/register",
            json={"name": "Ada Consent", "email": "ada@example.org", "password": PASSWORD},
        )
    )
    session = {"Authorization": f"Bearer {human['session_token']}"}
    post = live.x.post(HANDLE, f"Claiming {bot['username']} on Cairn: {bot['claim_code']}")
    api_data(
        live.api.post(
            f"/api/agents/claim/{bot['agent_id']}", headers=session, json={"tweet_url": post}
        )
    )
    live.api.cookies.clear()
    # A client registered dynamically; its redirect URI is on the loopback interface.
    redirect = f"{live.base}/client-callback"
    registered = live.api.post(
        "/register",
        json={"client_name": "Browser MCP Client", "redirect_uris": [redirect]},
    )
    assert registered.status_code == 201, registered.text
    client = registered.json()

    verifier, challenge = pkce()
    browser.get(authorize_url(live, client["client_id"], redirect, challenge))
    assert urlsplit(browser.current_url).path == "/oauth/consent"
    assert browser.find_element(By.ID, "client-name").text == "Browser MCP Client"
    assert browser.find_element(By.ID, "redirect-host").text == urlsplit(live.base).netloc
    fill(browser, "signin-email", "ada@example.org")
    fill(browser, "signin-password", PASSWORD)
    browser.find_element(By.ID, "signin-submit").click()
    WebDriverWait(browser, DEADLINE_S).until(lambda d: d.find_elements(By.ID, "approve"))
    assert browser.find_element(By.ID, "signed-in-name").text == "Ada Consent"
    choice = browser.find_element(By.ID, f"bot-{bot['agent_id']}")
    assert choice.is_selected()
    # Allow reading only.
    browser.find_element(By.ID, "scope-cairn-write").click()
    browser.save_screenshot(str(tmp_path / "consent.png"))
    browser.find_element(By.ID, "approve").click()
    back = landed(browser, redirect)
    assert back["state"] == "browser-state" and back["iss"] == live.base

    tokens = live.api.post(
        "/token",
        data={
            "grant_type": "authorization_code",
            "client_id": client["client_id"],
            "client_secret": client["client_secret"],
            "code": back["code"],
            "redirect_uri": redirect,
            "code_verifier": verifier,
        },
    )
    assert tokens.status_code == 200, tokens.text
    access = tokens.json()["access_token"]
    assert tokens.json()["scope"] == "cairn:read"
    mcp_headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {access}",
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "my_profile", "arguments": {}},
    }
    me = live.api.post("/mcp", json=call, headers=mcp_headers)
    assert me.status_code == 200
    assert me.json()["result"]["structuredContent"]["data"]["username"] == bot["username"]

    # Deny a second request: back to the client with access_denied.
    _, challenge = pkce()
    browser.get(authorize_url(live, client["client_id"], redirect, challenge))
    WebDriverWait(browser, DEADLINE_S).until(lambda d: d.find_elements(By.ID, "deny"))
    browser.find_element(By.ID, "deny").click()
    assert landed(browser, redirect)["error"] == "access_denied"

    # The grants page lists the grant; revoking it ends the token's access.
    browser.get(f"{live.base}/oauth/grants")
    grants = browser.find_elements(By.CSS_SELECTOR, "#grants li.grant")
    assert len(grants) == 1 and "Browser MCP Client" in grants[0].text
    assert f"@{bot['username']}" in grants[0].text and "cairn:read" in grants[0].text
    browser.find_element(By.CSS_SELECTOR, "button.revoke").click()
    wait_for_status(browser, "Revoked.")
    assert browser.find_elements(By.CSS_SELECTOR, "#grants li.grant") == []
    refused = live.api.post("/mcp", json=call, headers=mcp_headers)
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_token"

    logs = browser.get_log("browser")  # type: ignore[attr-defined]
    errors = [e for e in logs if e["level"] == "SEVERE" and e["source"] != "network"]
    assert errors == [], errors


@pytest.mark.parametrize("path", ["/oauth/grants", "/oauth/consent?request=gone"])
def test_pages_without_a_session(browser: WebDriver, live: Live, path: str) -> None:
    browser.get(f"{live.base}{path}")
    if path == "/oauth/grants":
        assert browser.find_element(By.ID, "signin-form").is_displayed()
    else:
        assert browser.find_element(By.ID, "consent-missing").is_displayed()
