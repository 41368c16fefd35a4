"""An owner and a moderator in one real browser, with no help from
JavaScript of ours: sign in through the form, rotate a bot's key on the
dashboard, sign out; sign in as a moderator and approve a pending pattern;
then as an admin make the owner a moderator."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.api.test_patterns import BODY, sql
from tests.browser.test_claim_page import DEADLINE_S, Live, api_data, fill

PASSWORD = "correct horse battery staple"


def human(live: Live, name: str, email: str) -> dict[str, str]:
    body = {"name": name, "email": email, "password": PASSWORD}
    data = api_data(live.api.post("/api/humans/register", json=body))
    live.api.cookies.clear()
    return {**data, "email": email}


def sign_in(browser: WebDriver, email: str) -> None:
    fill(browser, "email", email)
    fill(browser, "password", PASSWORD)
    browser.find_element(By.ID, "signin-page-submit").click()


def shown(browser: WebDriver, element_id: str) -> str:
    WebDriverWait(browser, DEADLINE_S).until(ec.presence_of_element_located((By.ID, element_id)))
    return str(browser.find_element(By.ID, element_id).text)


def sign_out(browser: WebDriver, live: Live) -> None:
    browser.get(f"{live.base}/dashboard")
    browser.find_element(By.CSS_SELECTOR, "#signout-form button").click()
    WebDriverWait(browser, DEADLINE_S).until(ec.url_to_be(f"{live.base}/"))


def test_owner_moderator_and_admin_in_one_browser(
    browser: WebDriver, live: Live, database: str, tmp_path: Path
) -> None:
    bot = api_data(live.api.post("/api/agents/register", json={"name": "Rotated Bot"}))
    owner = human(live, "Olive Owner", "olive@example.org")
    post = live.x.post("olive_ops", f"Claiming on Cairn: {bot['claim_code']}")
    claimed = live.api.post(
        f"/api/agents/claim/{bot['agent_id']}",
        headers={"Authorization": f"Bearer {owner['session_token']}"},
        json={"tweet_url": post},
    )
    api_data(claimed)
    moderator = human(live, "Mona Moderator", "mona@example.org")
    admin = human(live, "Ada Admin", "ada-admin@example.org")
    sql(database, "UPDATE agents SET role = 'admin' WHERE id = %s", admin["agent_id"])
    sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", moderator["agent_id"])
    old_key = {"Authorization": f"Bearer {bot['api_key']}"}
    pattern = api_data(live.api.post("/api/patterns", headers=old_key, json=BODY))
    sql(database, "UPDATE patterns SET moderation_status = 'pending' WHERE id = %s", pattern["id"])

    # The owner: the dashboard asks to sign in, then lists the bot and its key.
    browser.get(f"{live.base}/dashboard")
    sign_in(browser, owner["email"])
    assert "@" + bot["username"] in shown(browser, f"bot-{bot['agent_id']}-name")
    browser.find_element(By.ID, f"rotate-{bot['agent_id']}").click()
    new_key = shown(browser, "new-key")
    browser.save_screenshot(str(tmp_path / "dashboard-rotated.png"))
    assert live.api.get("/api/agents/me", headers=old_key).status_code == 401
    fresh = {"Authorization": f"Bearer {new_key}"}
    assert api_data(live.api.get("/api/agents/me", headers=fresh))["username"] == bot["username"]
    browser.find_element(By.CSS_SELECTOR, "#signout-form button").click()
    WebDriverWait(browser, DEADLINE_S).until(ec.url_to_be(f"{live.base}/"))

    # The moderator, in the same browser: the queue, then approve with a reason.
    browser.get(f"{live.base}/moderation")
    sign_in(browser, moderator["email"])
    WebDriverWait(browser, DEADLINE_S).until(ec.url_contains("/moderation"))
    fill(browser, f"notes-{pattern['id']}", "Clear and useful.")
    browser.find_element(By.ID, f"approve-{pattern['id']}").click()
    assert "approved" in shown(browser, "done")
    browser.save_screenshot(str(tmp_path / "moderation-approved.png"))
    read = live.api.get(f"/api/patterns/{pattern['id']}")
    assert api_data(read)["moderation_status"] == "approved"

    # The admin: the owner becomes a moderator.
    sign_out(browser, live)
    browser.get(f"{live.base}/admin?tab=users")
    sign_in(browser, admin["email"])
    owner_id = owner["agent_id"]
    WebDriverWait(browser, DEADLINE_S).until(
        ec.presence_of_element_located((By.ID, f"role-{owner_id}"))
    )
    Select(browser.find_element(By.ID, f"role-{owner_id}")).select_by_value("moderator")
    browser.find_element(By.ID, f"set-role-{owner_id}").click()
    assert shown(browser, "done") == "Changed."
    me = live.api.get(
        "/api/agents/me", headers={"Authorization": f"Bearer {owner['session_token']}"}
    )
    assert api_data(me)["role"] == "moderator"
