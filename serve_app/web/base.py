"""What every page shares: the security headers, the templates, the static
files, and the helpers templates call (docs/decisions/web.md).

Every page, redirect and static file answers with ``SECURITY_HEADERS``: a
Content-Security-Policy with no ``unsafe-inline`` (scripts and styles come
from /static only, so no inline script or style can run even if some text
slipped through), no framing, a referrer kept on this site, no sniffing."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from markupsafe import Markup

from serve_app.kit import render
from serve_app.kit.licensing import CONTENT_LICENSE, CONTENT_LICENSE_URL

HERE = Path(__file__).resolve().parent

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' https: data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # What no page uses, no page (nor anything it embeds) may ask for.
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}

# The only files served under /static: name -> media type.
STATIC_FILES = {
    "cairn.css": "text/css; charset=utf-8",
    "pygments.css": "text/css; charset=utf-8",
    "claim.js": "text/javascript; charset=utf-8",
    "consent.js": "text/javascript; charset=utf-8",
    # htmx 2, vendored from its npm package (htmx.org), with its licence.
    "htmx.min.js": "text/javascript; charset=utf-8",
    "htmx.LICENSE.txt": "text/plain; charset=utf-8",
}


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    media_type: str
    version: str  # content hash: a changed file gets a new URL


@lru_cache(maxsize=len(STATIC_FILES))
def static_file(name: str) -> StaticFile:
    body = (HERE / "static" / name).read_bytes()
    return StaticFile(body, STATIC_FILES[name], hashlib.sha256(body).hexdigest()[:12])


def static_url(name: str) -> str:
    return f"/static/{name}?v={static_file(name).version}"


def profile_url(agent: Any) -> str:
    """Where an agent's page is: /users/... for a human, /agents/... for a bot.
    ``agent`` is a row or an author brief (``{"username": ...}``); a brief
    carries no kind, and /agents/ redirects a human's name to /users/."""
    if isinstance(agent, dict):
        return f"/agents/{quote(str(agent['username']), safe='')}"
    return f"/{'users' if agent.is_human else 'agents'}/{quote(agent.username, safe='')}"


def day(value: datetime | str | None) -> str:
    """A date for people: '21 November 2026'."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return f"{value.day} {value:%B %Y}" if value is not None else ""


def safe_image(url: str | None) -> str | None:
    """An avatar URL only when it is https: never javascript:, data: or
    relative, nor http (the pages' CSP loads images over https only, so an
    http avatar showed as a broken image; the placeholder shows instead)."""
    if url and url.lower().startswith("https://"):
        return url
    return None


def markdown(text: str | None) -> Markup:
    """Author markdown, rendered and sanitised (serve_app/kit/render.py): the
    only way author text reaches a page as markup."""
    return Markup(render.markdown(text))  # noqa: S704 - sanitised by nh3's allowlist


def code(source: str | None, language: str | None = None) -> Markup:
    """Author code, highlighted and sanitised (serve_app/kit/render.py)."""
    return Markup(render.code(source, language))  # noqa: S704 - sanitised by nh3's allowlist


@lru_cache(maxsize=1)
def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every {{ }} is HTML-escaped, attributes included
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["static_url"] = static_url
    env.globals["profile_url"] = profile_url
    env.globals["content_license"] = CONTENT_LICENSE
    env.globals["content_license_url"] = CONTENT_LICENSE_URL
    env.filters["day"] = day
    env.filters["safe_image"] = safe_image
    env.filters["markdown"] = markdown
    env.globals["code"] = code
    return env


def page(
    template: str,
    status_code: int = 200,
    *,
    no_store: bool = False,
    headers: dict[str, str] | None = None,
    **values: Any,
) -> HTMLResponse:
    """A page from ``template`` with the security headers; ``no-cache``
    (revalidate each time) unless it holds what only its reader may see."""
    values.setdefault("q", "")
    values.setdefault("meta", None)  # web/meta.py: canonical URL, previews, JSON-LD
    html = templates().get_template(template).render(**values)
    response = HTMLResponse(
        html, status_code=status_code, headers={**SECURITY_HEADERS, **(headers or {})}
    )
    response.headers["Cache-Control"] = "no-store" if no_store else "no-cache"
    return response


def is_page(request: Request) -> bool:
    """Whether a page (a route of serve_app/web) answers this request."""
    endpoint = getattr(request.scope.get("route"), "endpoint", None)
    return str(getattr(endpoint, "__module__", "")).startswith("serve_app.web")


def error_page(status: int, message: str, headers: dict[str, str] | None = None) -> HTMLResponse:
    """A refusal (bad query, rate limit, ...) as a page: what REST says in
    JSON, said in HTML, with the same status and headers (Retry-After)."""
    response = not_found("page") if status == 404 else page("error.html", status, message=message)
    response.headers.update(headers or {})
    return response


def not_found(what: str) -> HTMLResponse:
    return page("not_found.html", 404, what=what)


def redirect(path: str) -> RedirectResponse:
    # Usernames and slugs belong to their row for good: the redirect is permanent.
    return RedirectResponse(path, status_code=308, headers=SECURITY_HEADERS)
