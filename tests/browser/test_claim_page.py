"""The claim page in a real browser: Debian's headless Chromium, driven through
its chromedriver by Selenium, against the real app under uvicorn on a free
local port, with a local HTTP server playing X's oEmbed endpoint."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from serve_app.app import create_app
from tests.api.conftest import SECRET, make_settings
from tests.conftest import empty_tables
from tests.xserver import FakeX, running_x

DEADLINE_S = 15
HANDLE = "ada_ops"


@dataclass
class Live:
    base: str  # http://127.0.0.1:<port>
    x: FakeX
    api: httpx.Client


def _browser_paths() -> tuple[str, str]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    why = (
        "chromium and chromedriver must be on PATH for the browser test: run "
        "scripts/ensure-browser (as root on Debian), or apt-get install chromium chromium-driver"
    )
    if os.environ.get("CI"):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    chromium, driver_path = _browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--no-proxy-server",
        "--window-size=1000,1300",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium Manager is never asked to fetch anything.
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def live(database: str) -> Iterator[Live]:
    """The app under uvicorn in a thread, pointed at a running fake X."""
    with running_x() as (fake, x_base):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))  # uvicorn serves on this socket: no port race
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        settings = make_settings(public_base_url=base, x_oembed_url=f"{x_base}/oembed")
        app = create_app(settings, database_url=database, secret=SECRET, pool_size=2)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            deadline = time.monotonic() + DEADLINE_S
            while not server.started:
                assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.01)
            with httpx.Client(base_url=base, trust_env=False, timeout=DEADLINE_S) as api:
                yield Live(base, fake, api)
        finally:
            server.should_exit = True
            thread.join(DEADLINE_S)
            sock.close()
            empty_tables(database)


def wait_for_status(driver: WebDriver, text: str) -> str:
    """Wait until #status shows ``text`` (a part of it); returns the whole text."""
    try:
        WebDriverWait(driver, DEADLINE_S).until(
            ec.text_to_be_present_in_element((By.ID, "status"), text)
        )
    except TimeoutException:
        shown = driver.find_element(By.ID, "status").text
        logs = driver.get_log("browser")  # type: ignore[attr-defined]
        pytest.fail(f"#status never showed {text!r}; it shows {shown!r}; browser log: {logs}")
    return str(driver.find_element(By.ID, "status").text)


def fill(driver: WebDriver, element_id: str, value: str) -> None:
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value)


def api_data(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code < 300, response.text
    data: dict[str, Any] = response.json()["data"]
    return data


def test_claim_a_bot_through_the_page(
    browser: WebDriver, live: Live, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bot = api_data(live.api.post("/api/agents/register", json={"name": "Browser Bot"}))
    assert bot["claim_url"] == f"{live.base}/agents/claim/{bot['agent_id']}"
    browser.get(bot["claim_url"])

    code = browser.find_element(By.ID, "claim-code").text
    assert code == bot["claim_code"]
    intent = browser.find_element(By.ID, "post-on-x").get_attribute("href") or ""
    post_text = parse_qs(urlsplit(intent).query)["text"][0]
    assert code in post_text and "Cairn" in post_text
    assert not browser.find_element(By.ID, "claim-submit").is_enabled()  # sign in first
    browser.save_screenshot(str(tmp_path / "claim-start.png"))

    # A wrong password is refused, and the API's message is shown.
    fill(browser, "signin-email", "ada@example.org")
    fill(browser, "signin-password", "not the password")
    browser.find_element(By.ID, "signin-submit").click()
    assert wait_for_status(browser, "password") == "Wrong e-mail or password."
    assert browser.find_element(By.ID, "status").get_attribute("data-kind") == "error"

    # Sign up through the same form.
    browser.find_element(By.ID, "signin-toggle").click()
    fill(browser, "signin-name", "Ada Operator")
    fill(browser, "signin-password", "correct horse battery staple")
    browser.find_element(By.ID, "signin-submit").click()
    wait_for_status(browser, "you are signed in")
    signed_in = browser.find_element(By.ID, "signed-in-name")
    assert signed_in.text == "Ada Operator"
    assert not browser.find_element(By.ID, "signin-form").is_displayed()
    human_username = (signed_in.get_attribute("href") or "").rsplit("/users/", 1)[1]
    assert browser.find_element(By.ID, "claim-submit").is_enabled()

    # Not a post on X: the API's message names <handle> and <digits>, shown
    # literally (as text, never parsed as markup).
    fill(browser, "tweet-url", "https://example.com/not/a/post")
    browser.find_element(By.ID, "claim-submit").click()
    message = wait_for_status(browser, "must be a post on X")
    assert message == "tweet_url must be a post on X: https://x.com/<handle>/status/<digits>."
    status = browser.find_element(By.ID, "status")
    assert status.find_elements(By.XPATH, "./*") == []  # text, never markup
    assert "&lt;handle&gt;" in (status.get_attribute("innerHTML") or "")

    # A post without the code: the API's error, shown as text in #status.
    wrong = live.x.post(HANDLE, "Hello <b>X</b>, no code in here")
    fill(browser, "tweet-url", wrong)
    browser.find_element(By.ID, "claim-submit").click()
    message = wait_for_status(browser, "does not contain the claim code")
    assert message == (
        f"The post does not contain the claim code {code}. "
        "Post a message with the code, then submit that post's URL."
    )
    assert status.get_attribute("data-kind") == "error"
    assert status.get_attribute("role") == "status"
    browser.save_screenshot(str(tmp_path / "claim-error.png"))

    # The post the page prefilled for X: the claim goes through.
    right = live.x.post(HANDLE, post_text)
    fill(browser, "tweet-url", right)
    browser.find_element(By.ID, "claim-submit").click()
    done = wait_for_status(browser, "is now verified")
    assert done == f"Claimed: {bot['username']} is now verified and linked to your profile."
    assert status.get_attribute("data-kind") == "success"
    assert not browser.find_element(By.ID, "claim-steps").is_displayed()
    browser.save_screenshot(str(tmp_path / "claim-success.png"))

    claimed = api_data(live.api.get(f"/api/agents/claim/{bot['agent_id']}"))
    assert claimed["is_claimed"] is True and claimed["owner_x_handle"] == HANDLE
    assert claimed["verification_level"] == "verified" and "claim_code" not in claimed
    human = api_data(live.api.get(f"/api/agents/{human_username}"))
    assert human["is_human"] is True
    assert [b["id"] for b in human["linked_bots"]] == [bot["agent_id"]]

    # Reloaded, the page says who claimed it and shows no code.
    browser.refresh()
    note = browser.find_element(By.ID, "claimed").text
    assert note.startswith(f"Claimed by @{HANDLE} on ")
    assert browser.find_elements(By.ID, "claim-code") == []
    browser.save_screenshot(str(tmp_path / "claimed.png"))

    # Nothing was blocked by the CSP and no script failed (the API's 4xx
    # answers above are logged as network errors: expected).
    logs = browser.get_log("browser")  # type: ignore[attr-defined]
    errors = [e for e in logs if e["level"] == "SEVERE" and e["source"] != "network"]
    assert errors == [], errors
    with capsys.disabled():
        print(f"\nscreenshots: {tmp_path}")
