"""What every page with a form shares: the signed-in human, the form's CSRF
token, the posted fields (serve_app/http/websession.py holds the token's
rule; docs/decisions/web.md, "Forms: one CSRF token, cookies")."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.http import identity, websession
from serve_app.kit.errors import Unauthorized
from serve_app.web.base import SECURITY_HEADERS, page
from storage.models import Agent

# The longest form field a page accepts (a moderator's notes are the longest).
FIELD_MAX = 8000


async def fields(request: Request) -> dict[str, str]:
    """The posted form's text fields (the first of each name), its CSRF token
    checked first: 403 ``csrf_refused`` without the right one."""
    form = await request.form()
    ctx: AppContext = request.app.state.ctx
    websession.check(ctx, request, form.get(websession.CSRF_FIELD))
    return {
        name: value[:FIELD_MAX]
        for name, value in form.multi_items()
        if isinstance(value, str) and name != websession.CSRF_FIELD
    }


async def human_of(ctx: AppContext, request: Request, db: AsyncSession) -> Agent:
    """The signed-in human a form acts for (401 page without one)."""
    human = await identity.signed_in_human(ctx, request, db)
    if human is None:
        raise Unauthorized("Sign in first (/signin).", error="not_signed_in")
    return human


def form_page(
    ctx: AppContext,
    request: Request,
    template: str,
    status_code: int = 200,
    **values: Any,
) -> HTMLResponse:
    """A page holding forms: never cached, its forms carrying the visitor's token."""
    token = websession.FormToken(ctx, request)
    response = page(
        template,
        status_code,
        no_store=True,
        csrf_field=websession.CSRF_FIELD,
        csrf=token.value,
        **values,
    )
    token.bind(response)
    return response


def signin_required(
    ctx: AppContext, request: Request, reason: str, next_path: str | None = None
) -> HTMLResponse:
    """The sign-in form (401) on a page that needs a signed-in human: back to
    ``next_path`` (this page by default) once signed in."""
    return form_page(
        ctx,
        request,
        "signin.html",
        401,
        next=next_path or here(request),
        email="",
        errors={},
        reason=reason,
    )


def see_other(path: str) -> RedirectResponse:
    """After a form's write: 303 to the page that shows its outcome (a reload does not repost)."""
    return RedirectResponse(path, status_code=303, headers=SECURITY_HEADERS)


def here(request: Request) -> str:
    """This request's path and query: where a sign-in form sends the visitor back."""
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


def local_path(value: str | None, default: str) -> str:
    """A ``next`` address only when it is a path on this site (no open redirect)."""
    if value and value.startswith("/") and not value.startswith(("//", "/\\")):
        return value
    return default
