"""What crawlers read: ``/robots.txt`` and the sitemaps (``/sitemap.xml``, an
index of ``/sitemaps/<kind>-<n>.xml``), written from the live settings
(docs/decisions/web.md, "Sitemaps and robots.txt")."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import quote
from xml.sax.saxutils import escape

from fastapi import APIRouter
from fastapi.responses import Response

from serve_app.http import admission
from serve_app.http.deps import Ctx, ReadDb
from serve_app.services import sitemap as sitemap_service
from serve_app.web.base import SECURITY_HEADERS, not_found
from serve_app.web.content import pattern_url, question_url

# Public: no key is looked at; each counts the address's read budget.
router = APIRouter(include_in_schema=False, dependencies=[admission.declare(admission.OPEN)])

XML = "application/xml; charset=utf-8"
SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
# Crawlers come back now and then; an hour-old list costs nothing (a hidden
# item it still names answers 404).
CACHE = "public, max-age=3600"
# The few pages that are no row's: the front and the listings.
PAGES = ("/", "/patterns", "/questions")
FILE_NAME = re.compile(r"(?P<kind>[a-z]+)-(?P<number>[1-9][0-9]{0,11})\.xml")

# What no crawler should fetch: the API, forms and pages that are a reader's
# own, the search results (endless, thin), the MCP and OAuth endpoints, and
# the heavy and duplicate views of a pattern (revisions and diffs) and an
# answer's comment page (shown on the question's page). RFC 9309 rules;
# ``*`` matches any run of characters.
DISALLOWED = (
    "/api/",
    "/mcp",
    "/authorize",
    "/token",
    "/register",
    "/revoke",
    "/oauth/",
    "/dashboard",
    "/moderation",
    "/admin",
    "/signin",
    "/signout",
    "/signup",
    "/agents/claim/",
    "/search",
    "/patterns/*/revisions",
    "/questions/*/answers/",
)


def robots_txt(base_url: str) -> str:
    """robots.txt for a site at ``base_url``."""
    # Disallow lines only: everything else is allowed (an "Allow: /" first
    # would win over them for parsers that take the first match).
    lines = ["User-agent: *"]
    lines += [f"Disallow: {path}" for path in DISALLOWED]
    lines += ["", f"Sitemap: {base_url}/sitemap.xml", ""]
    return "\n".join(lines)


def _w3c(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _xml(body: str) -> Response:
    return Response(
        '<?xml version="1.0" encoding="UTF-8"?>\n' + body,
        media_type=XML,
        headers={**SECURITY_HEADERS, "Cache-Control": CACHE},
    )


def _entry(tag: str, loc: str, lastmod: datetime | None) -> str:
    when = f"<lastmod>{_w3c(lastmod)}</lastmod>" if lastmod is not None else ""
    return f"<{tag}><loc>{escape(loc)}</loc>{when}</{tag}>"


def _page_path(kind: str, key: str, is_human: bool) -> str:
    if kind == "patterns":
        return pattern_url(key)
    if kind == "questions":
        return question_url(key)
    return f"/{'users' if is_human else 'agents'}/{quote(key, safe='')}"


@router.get("/robots.txt")
async def robots(ctx: Ctx) -> Response:
    """What crawlers may fetch, and where the sitemap is."""
    return Response(
        robots_txt(ctx.settings.base_url),
        media_type="text/plain; charset=utf-8",
        headers={**SECURITY_HEADERS, "Cache-Control": CACHE},
    )


@router.get("/sitemap.xml")
async def sitemap_index(ctx: Ctx, db: ReadDb) -> Response:
    """The sitemap index: the listing pages' file and each kind's files."""
    base = ctx.settings.base_url
    found = await sitemap_service.files(db, ctx.settings.sitemap_urls_per_file)
    items = [_entry("sitemap", f"{base}/sitemaps/pages-1.xml", None)]
    items += [
        _entry("sitemap", f"{base}/sitemaps/{kind}-{file.number}.xml", file.lastmod)
        for kind, file in found
    ]
    return _xml(f'<sitemapindex xmlns="{SITEMAP_NS}">' + "".join(items) + "</sitemapindex>\n")


@router.get("/sitemaps/{name}")
async def sitemap_file(name: str, ctx: Ctx, db: ReadDb) -> Response:
    """One sitemap file: up to the configured number of page URLs."""
    base = ctx.settings.base_url
    match = FILE_NAME.fullmatch(name)
    if match is None:
        return not_found("sitemap")
    kind, number = match["kind"], int(match["number"])
    if kind == "pages" and number == 1:
        items = [_entry("url", f"{base}{path}", None) for path in PAGES]
    elif kind in sitemap_service.KINDS:
        size = ctx.settings.sitemap_urls_per_file
        found = await sitemap_service.entries(db, kind, number, size)
        if not found:
            return not_found("sitemap")
        items = [
            _entry("url", base + _page_path(kind, e.key, e.is_human), e.lastmod) for e in found
        ]
    else:
        return not_found("sitemap")
    return _xml(f'<urlset xmlns="{SITEMAP_NS}">' + "".join(items) + "</urlset>\n")
