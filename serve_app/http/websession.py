"""The web's session cookie and the one CSRF check of every state-changing
form (docs/decisions/web.md, "Forms: one CSRF token, cookies").

A human's session lives in the ``cairn_session`` cookie: ``HttpOnly``,
``SameSite=Lax``, ``Secure`` unless the site is served from loopback over
plain HTTP (a developer's machine). REST writes signed in by cookie must be
JSON (identity.credential), which no cross-site form can send; the pages'
own forms post ``application/x-www-form-urlencoded`` and so carry a token
instead: an HMAC, under the server's secret, of the cookie that binds the
form to its visitor — the session cookie when signed in (a synchronizer
token bound to the session, kept nowhere), else a random pre-session cookie
``cairn_csrf`` (a signed double-submit, so the sign-in form is covered
too). A form without the token, or with one made for another cookie, is
refused with 403 ``csrf_refused``."""

from __future__ import annotations

import base64
import hmac
import secrets
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection
from starlette.responses import Response

from serve_app.http.identity import SESSION_COOKIE
from serve_app.kit import keys
from serve_app.kit.errors import Forbidden

if TYPE_CHECKING:
    from serve_app.context import AppContext
    from serve_app.settings import Settings

CSRF_COOKIE = "cairn_csrf"
CSRF_FIELD = "csrf_token"
LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
# The pre-session cookie lasts as long as a visitor may leave a sign-in form open.
CSRF_COOKIE_MAX_AGE = 24 * 3600


def secure_cookies(settings: Settings) -> bool:
    """``Secure`` everywhere but a plain-HTTP loopback site, where a browser
    would not send a Secure cookie back at all."""
    parts = urlsplit(settings.base_url)
    return not (parts.scheme == "http" and (parts.hostname or "") in LOOPBACK)


def set_session(ctx: AppContext, response: Response, token: str, expires_at: datetime) -> None:
    """Sign a browser in: the session cookie (and the pre-session one dropped)."""
    response.set_cookie(
        SESSION_COOKIE,
        token,
        expires=expires_at,
        path="/",
        httponly=True,
        samesite="lax",
        secure=secure_cookies(ctx.settings),
    )
    response.delete_cookie(CSRF_COOKIE, path="/")


def clear_session(ctx: AppContext, response: Response) -> None:
    response.delete_cookie(
        SESSION_COOKIE,
        path="/",
        httponly=True,
        samesite="lax",
        secure=secure_cookies(ctx.settings),
    )


def _binding(conn: HTTPConnection) -> str | None:
    """The cookie a form's token is made for: the session's, else the pre-session one."""
    session = conn.cookies.get(SESSION_COOKIE)
    if session and keys.is_session_token(session):
        return session
    return conn.cookies.get(CSRF_COOKIE) or None


def _sign(ctx: AppContext, binding: str) -> str:
    digest = keys.hash_secret(ctx.secret, "csrf:" + binding)
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class FormToken:
    """The CSRF token of the forms on one page; ``bind`` sets the
    pre-session cookie on the page's response when the visitor had none."""

    def __init__(self, ctx: AppContext, conn: HTTPConnection) -> None:
        binding = _binding(conn)
        self._new = binding is None
        self.binding = binding or secrets.token_urlsafe(32)
        self.value = _sign(ctx, self.binding)
        self._secure = secure_cookies(ctx.settings)

    def bind(self, response: Response) -> Response:
        if self._new:
            response.set_cookie(
                CSRF_COOKIE,
                self.binding,
                max_age=CSRF_COOKIE_MAX_AGE,
                path="/",
                httponly=True,
                samesite="lax",
                secure=self._secure,
            )
        return response


def refused() -> Forbidden:
    return Forbidden(
        "This form has expired or did not come from this site: reload the page and try again.",
        error="csrf_refused",
    )


def check(ctx: AppContext, conn: HTTPConnection, sent: object) -> None:
    """Refuse (403 ``csrf_refused``) a form whose token is not the one made
    for the visitor's cookie."""
    binding = _binding(conn)
    if binding is None or not isinstance(sent, str) or not sent:
        raise refused()
    if not hmac.compare_digest(_sign(ctx, binding), sent):
        raise refused()
