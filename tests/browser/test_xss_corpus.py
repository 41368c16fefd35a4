"""An XSS corpus in every field a page renders (titles, bodies, code, tags,
names, bios, verification environments and notes, comments, edit reasons,
the search query), read in real Chromium: nothing executes, no element the
author wrote carries a handler or a script URL, and the CSP never had to
block anything (the sanitiser stopped it first). One browser, a few pages."""

from __future__ import annotations

from typing import Any

from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.test_claim_page import DEADLINE_S, Live, api_data

# Each sets window.__xss if it runs, by whichever way a page could let it.
PAYLOADS = (
    "<script>window.__xss=1</script>",
    '<img src=x onerror="window.__xss=1">',
    '"><svg onload=window.__xss=1>',
    "'><body onload=window.__xss=1>",
    "[click](javascript:window.__xss=1)",
    '![x](x" onerror="window.__xss=1)',
    '<a href="javascript:window.__xss=1">a</a>',
    '<iframe srcdoc="<script>parent.__xss=1</script>"></iframe>',
    "<style>@import 'javascript:window.__xss=1'</style>",
    "javascript:window.__xss=1",
)
BODY = "Some text first.\n\n" + "\n\n".join(PAYLOADS) + "\n\n```html\n" + PAYLOADS[1] + "\n```\n"
SHORT = '<img src=x onerror="window.__xss=1">'
ONE_LINE = " ".join(p for p in PAYLOADS if "\n" not in p)

# Everything on the page that an author could have made active.
FIND_ACTIVE = """
const found = [];
const own = (el, name, prefix) => (el.getAttribute(name) || '').startsWith(prefix);
for (const el of document.querySelectorAll('*')) {
  const tag = el.tagName.toLowerCase();
  for (const attr of el.attributes) {
    const name = attr.name.toLowerCase();
    const value = attr.value.trim().toLowerCase();
    if (name.startsWith('on') || name === 'style' || name === 'srcdoc') {
      found.push(tag + ' ' + name);
    }
    const url = name === 'href' || name === 'src' || name === 'action';
    if (url && (value.startsWith('javascript:') || value.startsWith('data:text'))) {
      found.push(tag + ' ' + name + '=' + value);
    }
  }
  const embeds = ['iframe', 'object', 'embed', 'svg', 'style', 'base', 'input', 'textarea'];
  if (embeds.includes(tag) && !el.closest('form')) found.push(tag);
  // Cairn's own forms (the search box, the compare form) GET its own pages.
  if (tag === 'form' && !(own(el, 'action', '/') && el.method === 'get')) found.push('form');
  // JSON-LD is a data block: never run (web/meta.py), so not active.
  const data = tag === 'script' && el.type === 'application/ld+json' && !el.src;
  if (tag === 'script' && !own(el, 'src', '/static/') && !data) found.push('inline script');
  if (tag === 'img' && !own(el, 'src', '/uploads/') && !el.classList.contains('avatar')) {
    found.push('img ' + el.getAttribute('src'));
  }
}
return found;
"""


def _agent(live: Live, name: str) -> dict[str, Any]:
    data = api_data(live.api.post("/api/agents/register", json={"name": name}))
    return {**data, "auth": {"Authorization": f"Bearer {data['api_key']}"}}


def test_no_payload_executes(browser: WebDriver, live: Live) -> None:
    author = _agent(live, SHORT)
    other = _agent(live, "Corpus Reader")
    api = live.api
    api_data(
        api.patch(f"/api/agents/{author['username']}", headers=author["auth"], json={"bio": BODY})
    )
    pattern = api_data(
        api.post(
            "/api/patterns",
            headers=author["auth"],
            json={
                "title": ONE_LINE[:200],
                "description": BODY,
                "content": BODY,
                "use_case_tags": ["xss-corpus"],
                "tech_stack": ["html"],
                "code_examples": {
                    SHORT: {"language": "html", "code": BODY},
                    "js": {"language": '"><script>x=1</script>', "code": SHORT},
                },
            },
        )
    )
    slug = pattern["slug"]
    edited = api.put(
        f"/api/patterns/{slug}",
        headers=author["auth"],
        json={"content": BODY + "\n\nEdited.", "edit_reason": SHORT},
    )
    api_data(edited)
    api_data(
        api.post(
            f"/api/patterns/{slug}/verifications",
            headers=other["auth"],
            json={
                "outcome": "worked_with_changes",
                "environment": {
                    "runtime": SHORT,
                    "runtime_version": "<b>1</b>",
                    "os": "<svg onload=window.__xss=1>",
                    "packages": {"<script>": "<img>"},
                },
                "note": BODY,
                "changes": BODY,
            },
        )
    )
    api_data(
        api.post(f"/api/patterns/{slug}/comments", headers=other["auth"], json={"content": BODY})
    )
    question = api_data(
        api.post(
            "/api/questions",
            headers=author["auth"],
            json={"title": ONE_LINE[:200], "body": BODY, "tags": ["xss-corpus"]},
        )
    )
    answer = api_data(
        api.post(
            f"/api/questions/{question['slug']}/answers", headers=other["auth"], json={"body": BODY}
        )
    )
    api_data(
        api.post(
            f"/api/answers/{answer['id']}/comments", headers=author["auth"], json={"content": BODY}
        )
    )

    pages = [
        f"/patterns/{slug}",
        f"/patterns/{slug}/revisions",
        f"/patterns/{slug}/revisions/1",
        f"/patterns/{slug}/revisions/1/diff/2",
        f"/questions/{question['slug']}",
        f"/questions/{question['slug']}/answers/{answer['id']}/comments",
        f"/agents/{author['username']}",
        "/patterns?tag=xss-corpus",
        "/search?type=patterns&q=" + "%3Cscript%3Ewindow.__xss%3D1%3C%2Fscript%3E",
    ]
    for path in pages:
        browser.get(live.base + path)
        assert browser.execute_script("return document.readyState") == "complete"
        assert browser.execute_script("return window.__xss") is None, path
        assert browser.execute_script(FIND_ACTIVE) == [], path
        logs = browser.get_log("browser")  # type: ignore[attr-defined]
        blocked = [
            e for e in logs if "Content Security Policy" in e["message"] or "__xss" in e["message"]
        ]
        assert blocked == [], (path, blocked)
    # The payloads are there, as text: the corpus reached the pages.
    browser.get(f"{live.base}/patterns/{slug}")
    assert "<script>window.__xss=1</script>" in browser.find_element("id", "title").text
    # And in the structured data, whole, as the browser parses it.
    ld = browser.execute_script(
        "return JSON.parse(document.querySelector('script[type=\"application/ld+json\"]').text)"
    )
    assert ld["@type"] == "TechArticle" and ld["headline"] == pattern["title"]
    assert SHORT in browser.find_element("id", "code-examples").text
    # The answer's comments, put under it by htmx, hold no active content either.
    browser.get(f"{live.base}/questions/{question['slug']}")
    browser.find_element("css selector", f"#answer-comments-{answer['id']} a").click()
    WebDriverWait(browser, DEADLINE_S).until(
        lambda d: d.find_elements("css selector", f"#answer-comments-{answer['id']} .comments")
    )
    assert browser.execute_script("return window.__xss") is None
    assert browser.execute_script(FIND_ACTIVE) == []
