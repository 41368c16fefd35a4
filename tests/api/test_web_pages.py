"""The web pages over the real app: the claim page (code, X intent link, who is
signed in), human and bot profiles, redirects between them, 404 pages,
escaping of user text, security headers and the static files."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest

from serve_app.web.base import CSP
from tests.api.conftest import Registered, register, scalar, sign_up
from tests.api.test_patterns import publish, sql
from tests.xserver import FakeX

XSS_NAME = "<script>alert(1)</script>"
XSS_BIO = "<img src=x onerror=alert(1)>"


@pytest.fixture(autouse=True)
def _no_cookies(client: httpx.AsyncClient) -> None:
    # Sign-ups set cookies on the client; each page request here says
    # explicitly whether it carries one.
    client.cookies.clear()


def assert_page(response: httpx.Response, status: int = 200) -> str:
    """An HTML page with the security headers; returns its text."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "frame-ancestors 'none'" in CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    body = response.text
    # No inline script or style anywhere (the CSP would block them anyway);
    # JSON-LD is a data block, which no browser runs.
    assert re.search(r'<script(?![^>]*\b(?:src=|type="application/ld\+json"))', body) is None, body
    assert "<style" not in body and " style=" not in body
    return body


def cookie(token: str) -> dict[str, str]:
    return {"Cookie": f"cairn_session={token}"}


def element(body: str, element_id: str) -> str:
    """The opening tag of the element with this id."""
    match = re.search(rf"<[a-z0-9]+ [^>]*\bid=\"{re.escape(element_id)}\"[^>]*>", body)
    assert match is not None, f"no #{element_id} in page"
    return match.group(0)


def attribute(tag: str, name: str) -> str:
    match = re.search(rf"\b{name}=\"([^\"]*)\"", tag)
    assert match is not None, f"no {name} in {tag}"
    return html.unescape(match.group(1))


async def claim(client: httpx.AsyncClient, x: FakeX, bot: Registered, handle: str) -> str:
    """Claim ``bot`` through the API as a new human; returns the human's username."""
    human = await sign_up(client)
    url = x.post(handle, f"Claiming {bot.username} on Cairn: {bot.claim_code}")
    response = await client.post(
        f"/api/agents/claim/{bot.agent_id}", headers=human.auth, json={"tweet_url": url}
    )
    assert response.status_code == 200, response.text
    client.cookies.clear()
    return human.username


async def test_claim_page_while_unclaimed(client: httpx.AsyncClient) -> None:
    bot = await register(client, "Claimable Bot")
    response = await client.get(f"/agents/claim/{bot.agent_id}")
    body = assert_page(response)
    assert response.headers["cache-control"] == "no-store"
    assert "Claimable Bot" in body and f"@{bot.username}" in body
    assert f'<code id="claim-code">{bot.claim_code}</code>' in body

    intent = element(body, "post-on-x")
    href = attribute(intent, "href")
    parts = urlsplit(href)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "x.com", "/intent/post")
    text = parse_qs(parts.query)["text"][0]
    assert bot.claim_code in text and "Cairn" in text
    assert href == "https://x.com/intent/post?text=" + quote(text, safe="")
    assert quote(bot.claim_code) in href and "%20" in href  # url-encoded
    assert attribute(intent, "target") == "_blank"
    assert attribute(intent, "rel") == "noopener noreferrer"

    # Not signed in: the sign-in form, and the claim button waits for it.
    for field in ("signin-email", "signin-password", "signin-submit", "signin-name"):
        element(body, field)
    assert " hidden" in element(body, "signed-in")
    assert " disabled" in element(body, "claim-submit")
    assert attribute(element(body, "claim-form"), "data-agent-id") == bot.agent_id
    element(body, "tweet-url")
    status = element(body, "status")
    assert attribute(status, "role") == "status" and attribute(status, "aria-live") == "polite"
    assert re.search(r'<script src="/static/claim\.js\?v=[0-9a-f]{12}" defer>', body)


async def test_claim_page_once_claimed(client: httpx.AsyncClient, x: FakeX) -> None:
    bot = await register(client, "Claimable Bot")
    await claim(client, x, bot, "grace_ops")
    body = assert_page(await client.get(f"/agents/claim/{bot.agent_id}"))
    assert "Claimed by <strong>@grace_ops</strong> on <time datetime=" in body
    assert bot.claim_code not in body
    for gone in ("claim-code", "post-on-x", "signin-form", "claim-form", "status"):
        assert f'id="{gone}"' not in body


async def test_claim_page_knows_who_is_signed_in(client: httpx.AsyncClient) -> None:
    bot = await register(client, "Claimable Bot")
    human = await sign_up(client, "<b>Grace</b> Operator")
    page = f"/agents/claim/{bot.agent_id}"

    body = assert_page(await client.get(page, headers=cookie(human.session_token)))
    signed_in = element(body, "signed-in")
    assert " hidden" not in signed_in
    assert (
        f'<a id="signed-in-name" href="/users/{human.username}">'
        "&lt;b&gt;Grace&lt;/b&gt; Operator</a>" in body
    )
    assert "<b>Grace</b>" not in body
    assert 'id="signin-form"' not in body
    assert " disabled" not in element(body, "claim-submit")

    # A cookie that is garbage, unknown, or signed out means "not signed in".
    for token in ("nonsense", "cairn_s_" + "A" * 43):
        body = assert_page(await client.get(page, headers=cookie(token)))
        assert 'id="signin-form"' in body and " hidden" in element(body, "signed-in")
    out = await client.post("/api/humans/logout", headers=human.auth)
    assert out.status_code == 200, out.text
    body = assert_page(await client.get(page, headers=cookie(human.session_token)))
    assert 'id="signin-form"' in body and "Grace" not in body


async def test_claim_page_of_a_deactivated_bot(client: httpx.AsyncClient, database: str) -> None:
    bot = await register(client, "Gone Bot")
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", bot.agent_id)
    body = assert_page(await client.get(f"/agents/claim/{bot.agent_id}"))
    assert "deactivated" in body
    assert bot.claim_code not in body and 'id="claim-form"' not in body


async def test_not_found_pages(client: httpx.AsyncClient, database: str) -> None:
    human = await sign_up(client)
    inactive = await register(client, "Inactive Bot")
    sql(database, "UPDATE agents SET is_active = false WHERE id = %s", inactive.agent_id)
    for path in (
        "/agents/claim/00000000-0000-4000-8000-000000000000",  # unknown id
        f"/agents/claim/{human.agent_id}",  # a human's id
        "/agents/claim/not-a-uuid",
        "/agents/claim/<script>",
        "/agents/nobody_zz99",
        "/users/nobody_zz99",
        f"/agents/{inactive.username}",
        f"/users/{inactive.username}",
        "/static/nothing.js",
    ):
        body = assert_page(await client.get(path), 404)
        assert 'id="not-found"' in body, path
        assert "<script>" not in body


async def test_wrong_profile_kind_redirects(client: httpx.AsyncClient) -> None:
    bot, human = await register(client, "Redirected Bot"), await sign_up(client)
    cases = {
        f"/users/{bot.username}": f"/agents/{bot.username}",
        f"/agents/{human.username}": f"/users/{human.username}",
        f"/agents/{bot.username.upper()}": f"/agents/{bot.username}",
        f"/users/{human.username.upper()}": f"/users/{human.username}",
    }
    for path, target in cases.items():
        response = await client.get(path)
        assert response.status_code == 308, (path, response.text)
        assert response.headers["location"] == target
        assert response.headers["content-security-policy"] == CSP
        assert_page(await client.get(path, follow_redirects=True))


async def test_profiles(client: httpx.AsyncClient, x: FakeX) -> None:
    bot = await register(client, "Pattern Bot", description="Writes retry patterns.")
    await publish(client, bot, title="Retry flaky HTTP calls")
    await publish(client, bot, title="Cache embeddings by content hash")

    response = await client.get(f"/agents/{bot.username}")
    body = assert_page(response)
    assert response.headers["link"] == (
        f'</api/agents/{bot.username}>; rel="alternate"; type="application/json"'
    )
    assert '<h1 id="display-name">Pattern Bot</h1>' in body
    assert "Writes retry patterns." in body
    assert '<span class="badge">Unverified</span>' in body
    assert "Not claimed by a human yet." in body and 'id="owner-link"' not in body
    recent = body.split('id="recent-patterns"')[1]
    assert recent.index("Cache embeddings by content hash") < recent.index("Retry flaky HTTP")
    assert re.search(r"<dt>Patterns</dt><dd>2</dd>", body)
    assert "<img" not in body  # no avatar: a placeholder letter

    owner = await claim(client, x, bot, "pattern_owner")
    body = assert_page(await client.get(f"/agents/{bot.username}"))
    assert "Verified</span>" in body
    assert '<span id="owner-handle">@pattern_owner</span>' in body
    assert attribute(element(body, "owner-link"), "href") == f"/users/{owner}"

    body = assert_page(await client.get(f"/users/{owner}"))
    assert "human operator" in body and "Joined <time datetime=" in body
    assert f'<a href="/agents/{bot.username}">Pattern Bot</a>' in body
    assert '<span class="badge verified">Verified</span>' in body


async def test_user_text_is_escaped(client: httpx.AsyncClient, database: str) -> None:
    bot = await register(client, XSS_NAME)
    patched = await client.patch(
        f"/api/agents/{bot.username}",
        headers=bot.auth,
        json={"bio": XSS_BIO, "avatar_url": "https://img.example/a.png?x=1&y=<2>"},
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["data"]["display_name"] == XSS_NAME

    for path in (f"/agents/{bot.username}", f"/agents/claim/{bot.agent_id}"):
        body = assert_page(await client.get(path))
        assert XSS_NAME not in body and "<script>alert" not in body, path
        assert html.escape(XSS_NAME, quote=False) in body, path
        assert "onerror=alert(1)>" not in body and "<img src=x" not in body, path
    body = assert_page(await client.get(f"/agents/{bot.username}"))
    assert html.escape(XSS_BIO, quote=False) in body
    assert '<img class="avatar" src="https://img.example/a.png?x=1&amp;y=&lt;2&gt;"' in body

    # An avatar that is not http(s) is never rendered (the API would refuse
    # one; this one is written straight into the table).
    sql(
        database, "UPDATE agents SET avatar_url = 'javascript:alert(1)' WHERE id = %s", bot.agent_id
    )
    assert scalar(database, "SELECT avatar_url FROM agents WHERE id = %s", bot.agent_id)
    body = assert_page(await client.get(f"/agents/{bot.username}"))
    assert "javascript:" not in body and "<img" not in body
    # Nor an http one: the pages' CSP loads images over https only, so it
    # would show broken; the placeholder shows instead.
    sql(
        database,
        "UPDATE agents SET avatar_url = 'http://img.example/a.png' WHERE id = %s",
        bot.agent_id,
    )
    body = assert_page(await client.get(f"/agents/{bot.username}"))
    assert "http://img.example" not in body and "<img" not in body


async def test_the_api_docs_are_never_framed(client: httpx.AsyncClient) -> None:
    """They run script from a CDN on the origin where the session cookie
    authorises writes: another site may not frame them."""
    for path in ("/docs", "/redoc", "/openapi.json"):
        response = await client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-security-policy"] == "frame-ancestors 'none'", path
        assert response.headers["x-frame-options"] == "DENY", path


async def test_static_files(client: httpx.AsyncClient) -> None:
    bot = await register(client, "Static Bot")
    body = assert_page(await client.get(f"/agents/claim/{bot.agent_id}"))
    for name, media_type, marker in (
        ("claim.js", "text/javascript", "/api/agents/claim/"),
        ("cairn.css", "text/css", "[hidden]"),
    ):
        url = re.search(rf'"(/static/{re.escape(name)}\?v=[0-9a-f]+)"', body)
        assert url is not None, name
        response = await client.get(url.group(1))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(media_type)
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "max-age" in response.headers["cache-control"]
        assert marker in response.text
    assert "innerHTML" not in (await client.get("/static/claim.js")).text


async def test_pages_are_not_in_the_api_schema(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    for page in ("/agents/claim/{agent_id}", "/agents/{username}", "/users/{username}"):
        assert page not in paths
    assert not [p for p in paths if p.startswith(("/static", "/users"))]


async def test_every_page_loads_htmx_and_the_code_styles(client: httpx.AsyncClient) -> None:
    """htmx 2 vendored from its npm package, its licence beside it, and the
    Pygments classes' stylesheet: linked from every page, served from /static."""
    body = assert_page(await client.get("/"))
    for name, media_type, marker in (
        ("htmx.min.js", "text/javascript", "htmx"),
        ("pygments.css", "text/css", ".highlight .k "),
    ):
        url = re.search(rf'"(/static/{re.escape(name)}\?v=[0-9a-f]{{12}})"', body)
        assert url is not None, name
        response = await client.get(url.group(1))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(media_type)
        assert marker in response.text
    licence = await client.get("/static/htmx.LICENSE.txt")
    assert licence.status_code == 200 and "Zero-Clause BSD" in licence.text
    # The search box on every page.
    assert element(body, "site-search") and 'action="/search"' in body
    # htmx may neither inject styles nor eval (the CSP forbids both anyway).
    assert '"includeIndicatorStyles": false' in body and '"allowEval": false' in body
