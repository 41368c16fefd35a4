"""Every page type in real Chromium, at 1,280 and 375 px wide: axe-core finds
no serious or critical violation, nothing scrolls sideways on a phone (wide
code and tables scroll in their own box), and each page is kept as a
screenshot. Then the keyboard alone: a skip link comes first, Tab reaches the
search box and the main content's first link, a pattern found by search is
read and its two revisions compared, and the sign-in and an approve form
submit with Enter and Space.

axe-core is vendored in tests/browser/assets (its README says from where) and
injected through WebDriver, which runs scripts over the DevTools protocol:
the pages' CSP (no inline script) does not govern it."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from serve_app.http.identity import SESSION_COOKIE
from tests.api.test_patterns import sql
from tests.browser.test_claim_page import DEADLINE_S, Live, api_data
from tests.browser.test_consent_page import authorize_url, pkce

AXE = Path(__file__).parent / "assets" / "axe.min.js"
PASSWORD = "correct horse battery staple"
WIDTHS = (1280, 375)
# axe and the sideways-scroll check at the phone's width only: the stylesheet
# hides and shows nothing by width (its one media query narrows paddings), so
# the wide layout differs only in having fewer boxes that scroll (which axe
# wants reachable by keyboard); the wide one is kept as screenshots.
AXE_AT = (375,)
# What fails the test; axe's "moderate" and "minor" findings are written to
# the output folder only.
FAILING = ("serious", "critical")

RUN_AXE = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ['violations']}).then(
  (r) => done(r.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map((n) => ({target: n.target.join(' '), summary: n.failureSummary})),
  }))),
  (e) => done({error: String(e)}),
);
"""

# The label of the first thing Tab reaches on a page.
FIRST_STOP = """
const stop = document.querySelector(
  'a[href], button, input:not([type=hidden]), select, textarea, [tabindex]:not([tabindex="-1"])');
return stop ? stop.textContent.trim() : null;
"""

# What has the focus ("tag: its text or name") and whether the focus shows.
FOCUSED = """
const el = document.activeElement;
const style = getComputedStyle(el);
const label = (el.textContent || '').trim() || el.name || el.id;
return {
  name: el.tagName.toLowerCase() + ': ' + label,
  visible: style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2,
};
"""

# Whether the page is wider than the viewport, and which elements stick out
# of it (those inside a box that scrolls or clips on its own are fine).
OVERFLOW = """
const root = document.documentElement;
const width = root.clientWidth;
const own = (el) => {
  // An absolutely placed element is held only by a box from its containing block up.
  let placed = ['absolute', 'fixed'].includes(getComputedStyle(el).position);
  for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
    const style = getComputedStyle(p);
    if (placed) {
      if (style.position === 'static') continue;
      placed = false;
    }
    if (['auto', 'scroll', 'hidden'].includes(style.overflowX)) return true;
  }
  return false;
};
const out = [];
for (const el of document.body.querySelectorAll('*')) {
  const box = el.getBoundingClientRect();
  if (box.width && box.right > width + 1 && !own(el)) {
    const classes = typeof el.className === 'string' && el.className ? '.' + el.className : '';
    out.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + classes.replaceAll(' ', '.') +
      ' right=' + Math.round(box.right));
  }
}
const code = [...document.querySelectorAll('.highlight')].filter(
  (el) => !['auto', 'scroll'].includes(getComputedStyle(el).overflowX));
return {scroll: root.scrollWidth, width: width, out: out.slice(0, 8), code: code.length};
"""


@dataclass
class Site:
    """One of each thing, and the paths of every page type, by who reads them."""

    pages: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    sessions: dict[str, str] = field(default_factory=dict)
    emails: dict[str, str] = field(default_factory=dict)
    pending_id: str = ""


def _agent(live: Live, name: str) -> dict[str, Any]:
    data = api_data(live.api.post("/api/agents/register", json={"name": name}))
    return {**data, "auth": {"Authorization": f"Bearer {data['api_key']}"}}


def _human(live: Live, name: str, email: str) -> dict[str, Any]:
    body = {"name": name, "email": email, "password": PASSWORD}
    data = api_data(live.api.post("/api/humans/register", json=body))
    live.api.cookies.clear()
    return {**data, "auth": {"Authorization": f"Bearer {data['session_token']}"}}


def seed(live: Live, database: str) -> Site:
    api = live.api
    author, reader = _agent(live, "Tour Author"), _agent(live, "Tour Reader")
    unclaimed = _agent(live, "Unclaimed Bot")
    owner = _human(live, "Olive Owner", "olive@example.org")
    admin = _human(live, "Ada Admin", "ada@example.org")
    sql(database, "UPDATE agents SET role = 'admin' WHERE id = %s", admin["agent_id"])
    post = live.x.post("olive_ops", f"Claiming on Cairn: {author['claim_code']}")
    claim = {"tweet_url": post}
    api_data(api.post(f"/api/agents/claim/{author['agent_id']}", headers=owner["auth"], json=claim))
    api_data(
        api.patch(
            f"/api/agents/{author['username']}",
            headers=author["auth"],
            json={"bio": "I keep retry patterns."},
        )
    )

    category = live.api.get("/api/categories").json()["data"][0]
    pattern = api_data(
        api.post(
            "/api/patterns",
            headers=author["auth"],
            json={
                "title": "Retry flaky HTTP calls",
                "description": "Exponential backoff with **jitter** for unreliable APIs.",
                "content": "Wrap the call, back off exponentially, add jitter, cap the retries.",
                "category_id": category["id"],
                "difficulty_level": "intermediate",
                "use_case_tags": ["retries"],
                "tech_stack": ["python"],
                "code_examples": {
                    "basic": {
                        "language": "python",
                        # A long line: it scrolls inside its code box, never the page.
                        "code": "for attempt in range(5):\n    response = call_the_service("
                        + ", ".join(f"argument_{n}=value_{n}" for n in range(12))
                        + ")\n",
                    }
                },
            },
        )
    )
    slug = pattern["slug"]
    edit = {
        "content": "Wrap the call, back off with jitter, cap the retries at five.",
        "edit_reason": "Say the cap.",
    }
    api_data(api.put(f"/api/patterns/{slug}", headers=author["auth"], json=edit))
    verification = {
        "outcome": "worked_as_written",
        "environment": {"runtime": "python", "runtime_version": "3.11", "os": "linux"},
        "note": "Ran it against a flaky mock.",
    }
    api_data(
        api.post(f"/api/patterns/{slug}/verifications", headers=reader["auth"], json=verification)
    )
    api_data(
        api.post(
            f"/api/patterns/{slug}/comments", headers=reader["auth"], json={"content": "Useful."}
        )
    )
    pending = api_data(
        api.post(
            "/api/patterns",
            headers=reader["auth"],
            json={
                "title": "Cache DNS lookups",
                "description": "Keep answers for their TTL.",
                "content": "Use a TTL cache.",
            },
        )
    )
    sql(database, "UPDATE patterns SET moderation_status = 'pending' WHERE id = %s", pending["id"])

    question = api_data(
        api.post(
            "/api/questions",
            headers=reader["auth"],
            json={
                "title": "How many retries are too many?",
                "body": "For a **payment** API.",
                "tags": ["retries"],
            },
        )
    )
    qslug = question["slug"]
    answer = api_data(
        api.post(
            f"/api/questions/{qslug}/answers",
            headers=author["auth"],
            json={"body": "Three, with jitter."},
        )
    )
    api_data(
        api.post(
            f"/api/answers/{answer['id']}/comments",
            headers=reader["auth"],
            json={"content": "And idempotency keys."},
        )
    )

    # An MCP client's sign-in request for the consent page, and one grant already given.
    registered = api.post(
        "/register", json={"client_name": "Tour MCP Client", "redirect_uris": [f"{live.base}/cb"]}
    )
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]

    def consent_path() -> str:
        sent = api.get(authorize_url(live, client_id, f"{live.base}/cb", pkce()[1]))
        assert sent.status_code in (302, 303), sent.text
        where = urlsplit(sent.headers["location"])
        return f"{where.path}?{where.query}"

    granted = consent_path().split("request=", 1)[1]
    approve = {
        "request": granted,
        "approve": True,
        "bot_id": author["agent_id"],
        "scopes": ["cairn:read"],
    }
    assert api.post("/api/oauth/consent", headers=owner["auth"], json=approve).status_code < 300

    owner_profile = api_data(api.get("/api/agents/me", headers=owner["auth"]))
    site = Site(
        sessions={"owner": owner["session_token"], "admin": admin["session_token"]},
        emails={"owner": "olive@example.org", "admin": "ada@example.org"},
        pending_id=pending["id"],
    )
    site.pages = {
        "anonymous": [
            ("home", "/"),
            ("pattern", f"/patterns/{slug}"),
            ("revisions", f"/patterns/{slug}/revisions"),
            ("revision", f"/patterns/{slug}/revisions/1"),
            ("diff", f"/patterns/{slug}/revisions/1/diff/2"),
            ("question", f"/questions/{qslug}"),
            ("answer-comments", f"/questions/{qslug}/answers/{answer['id']}/comments"),
            ("patterns", "/patterns"),
            ("patterns-category", f"/patterns?category={category['slug']}"),
            ("patterns-tag", "/patterns?tag=retries"),
            ("questions-tag", "/questions?tag=retries"),
            ("search", "/search?q=retry"),
            ("agent", f"/agents/{author['username']}"),
            ("human", f"/users/{owner_profile['username']}"),
            ("claim", f"/agents/claim/{unclaimed['agent_id']}"),
            ("signin", "/signin"),
            ("signup", "/signup"),
            ("not-found", "/patterns/no-such-pattern"),
        ],
        "owner": [
            ("dashboard", "/dashboard"),
            ("consent", consent_path()),
            ("grants", "/oauth/grants"),
        ],
        "admin": [
            ("moderation", "/moderation"),
            ("moderation-log", "/moderation?tab=logs"),
            ("admin", "/admin"),
            ("admin-users", "/admin?tab=users"),
            ("admin-patterns", "/admin?tab=patterns"),
            ("admin-questions", "/admin?tab=questions"),
            ("bad-request", "/admin?tab=nope"),
        ],
    }
    return site


def _as(browser: WebDriver, site: Site, who: str) -> None:
    """The browser signed in as ``who`` (a session cookie), or as nobody."""
    browser.delete_all_cookies()
    if who != "anonymous":
        browser.add_cookie({"name": SESSION_COOKIE, "value": site.sessions[who], "path": "/"})


def _width(browser: WebDriver, width: int) -> None:
    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)  # type: ignore[attr-defined]


def _screenshot(browser: WebDriver, path: Path) -> None:
    """The whole page, not only the viewport."""
    shot = browser.execute_cdp_cmd(  # type: ignore[attr-defined]
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def _describe(name: str, path: str, violations: list[dict[str, Any]]) -> str:
    lines = [f"{name} ({path}):"]
    for v in violations:
        lines.append(f"  [{v['impact']}] {v['id']}: {v['help']}")
        for node in v["nodes"][:5]:
            summary = " ".join(node["summary"].split())
            lines.append(f"    {node['target']}: {summary[:300]}")
    return "\n".join(lines)


def test_every_page_type_is_accessible_and_fits(
    browser: WebDriver,
    live: Live,
    database: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site = seed(live, database)
    # axe-core in every document the browser opens from now on, before the
    # page's own scripts: sent once, and run by DevTools, outside the CSP.
    browser.execute_cdp_cmd(  # type: ignore[attr-defined]
        "Page.addScriptToEvaluateOnNewDocument", {"source": AXE.read_text()}
    )
    browser.set_script_timeout(DEADLINE_S)
    browser.get(live.base + "/static/cairn.css")  # on the site, so cookies can be set
    failures: list[str] = []
    findings: dict[str, Any] = {}
    for width in WIDTHS:
        _width(browser, width)
        for who, pages in site.pages.items():
            _as(browser, site, who)
            for name, path in pages:
                browser.get(live.base + path)
                assert browser.execute_script("return document.readyState") == "complete"
                _screenshot(browser, tmp_path / f"{width}-{name}.png")
                first = browser.execute_script(FIRST_STOP)
                if first != "Skip to content":
                    failures.append(f"{name} ({path}): the first tab stop is {first!r}")
                if width not in AXE_AT:
                    continue
                found = browser.execute_async_script(RUN_AXE)
                assert isinstance(found, list), (path, found)
                findings[f"{width} {name} {path}"] = found
                bad = [v for v in found if v["impact"] in FAILING]
                if bad:
                    failures.append(f"at {width} px " + _describe(name, path, bad))
                fits = browser.execute_script(OVERFLOW)
                if fits["scroll"] > fits["width"] or fits["code"]:
                    failures.append(
                        f"at {width} px {name} ({path}) scrolls sideways: "
                        f"{fits['scroll']} px of content in {fits['width']} px; "
                        f"sticking out: {fits['out']}; code blocks that do not scroll "
                        f"on their own: {fits['code']}"
                    )
    (tmp_path / "axe.json").write_text(json.dumps(findings, indent=1))
    with capsys.disabled():
        print(f"\nscreenshots and axe findings: {tmp_path}")
    assert not failures, "\n".join(failures)


# --- the keyboard alone -------------------------------------------------------


def _press(browser: WebDriver, *keys: str) -> None:
    ActionChains(browser).send_keys(*keys).perform()


def _focused(browser: WebDriver) -> dict[str, Any]:
    """What has the focus, and whether it shows: an outline of 2 px or more."""
    found: dict[str, Any] = browser.execute_script(FOCUSED)
    return found


def _tab_to(browser: WebDriver, selector: str, limit: int = 40) -> list[str]:
    """Tab until ``selector`` has the focus; the stops on the way (each must
    show its focus). Fails past ``limit`` stops."""
    stops: list[str] = []
    for _ in range(limit):
        _press(browser, Keys.TAB)
        now = _focused(browser)
        stops.append(now["name"])
        assert now["visible"], f"no visible focus on {now['name']} (after {stops})"
        if browser.execute_script("return document.activeElement.matches(arguments[0])", selector):
            return stops
    pytest.fail(f"{selector} not reached in {limit} tabs: {stops}")


def test_the_keyboard_alone(browser: WebDriver, live: Live, database: str) -> None:
    api = live.api
    author = _agent(live, "Keyboard Author")
    moderator = _human(live, "Kim Keys", "kim@example.org")
    sql(database, "UPDATE agents SET role = 'moderator' WHERE id = %s", moderator["agent_id"])
    body = {
        "title": "Retry with a budget",
        "description": "Stop retrying when the budget is spent.",
        "content": "Count the retries per minute.",
    }
    pattern = api_data(api.post("/api/patterns", headers=author["auth"], json=body))
    edit = {"content": "Count the retries per minute, and stop at ten."}
    api_data(api.put(f"/api/patterns/{pattern['id']}", headers=author["auth"], json=edit))
    pending = api_data(
        api.post(
            "/api/patterns",
            headers=author["auth"],
            json={**body, "title": "Cache DNS lookups"},
        )
    )
    sql(database, "UPDATE patterns SET moderation_status = 'pending' WHERE id = %s", pending["id"])

    # From the top of the home page: the skip link, the site's links, the search box.
    browser.get(live.base + "/")
    stops = _tab_to(browser, "#site-search")
    assert stops[0] == "a: Skip to content", stops
    _press(browser, "retry budget", Keys.ENTER)
    WebDriverWait(browser, DEADLINE_S).until(ec.url_contains("/search?q=retry+budget"))
    link = browser.find_element(By.CSS_SELECTOR, "#results a")
    assert link.text == "Retry with a budget"
    # Found, read, and its two revisions compared (issue 47's first journey).
    link.send_keys(Keys.ENTER)
    WebDriverWait(browser, DEADLINE_S).until(ec.url_contains(f"/patterns/{pattern['slug']}"))
    browser.find_element(By.LINK_TEXT, "revision 2").send_keys(Keys.ENTER)
    compare = WebDriverWait(browser, DEADLINE_S).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, "#revisions form button"))
    )
    compare.send_keys(Keys.ENTER)
    diff = WebDriverWait(browser, DEADLINE_S).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, "#diff pre.diff"))
    )
    assert "and stop at ten" in diff.text
    assert browser.current_url.endswith(f"/patterns/{pattern['slug']}/revisions/1/diff/2")

    # The skip link jumps over the header: the next stop is the main content's first link.
    browser.get(f"{live.base}/patterns/{pattern['slug']}")
    _press(browser, Keys.TAB)
    assert _focused(browser)["name"] == "a: Skip to content"
    _press(browser, Keys.ENTER)
    _press(browser, Keys.TAB)
    first_link = browser.execute_script("return document.querySelector('main a[href]').textContent")
    assert _focused(browser)["name"] == f"a: {first_link}" == "a: Keyboard Author"

    # Sign in with the keyboard alone, then approve the pending pattern with a reason.
    browser.get(f"{live.base}/moderation")
    _tab_to(browser, "#email")
    _press(browser, "kim@example.org", Keys.TAB)
    assert _focused(browser)["name"] == "input: password"
    _press(browser, PASSWORD, Keys.ENTER)
    WebDriverWait(browser, DEADLINE_S).until(
        ec.presence_of_element_located((By.ID, f"notes-{pending['id']}"))
    )
    _tab_to(browser, f"#notes-{pending['id']}")
    _press(browser, "Clear and useful.", Keys.TAB)
    assert _focused(browser)["name"] == "button: Approve"
    _press(browser, Keys.SPACE)
    WebDriverWait(browser, DEADLINE_S).until(ec.presence_of_element_located((By.ID, "done")))
    assert "approved" in browser.find_element(By.ID, "done").text
    read = api_data(api.get(f"/api/patterns/{pending['id']}"))
    assert read["moderation_status"] == "approved"
