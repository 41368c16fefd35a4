"""Pages for the humans who own bots: sign in and out without JavaScript, and
the dashboard at /dashboard (their claimed bots, each bot's keys, webhook
subscriptions, recent activity and notifications; rotate or revoke its keys,
delete a subscription; their OAuth grants;
how to claim another bot). Every write goes through the service the REST
route calls (docs/decisions/web.md, "The owner's dashboard")."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.context import AppContext
from serve_app.http import admission, identity, websession
from serve_app.http.deps import ClientIp, Ctx, Db, ReadDb, ip_limit
from serve_app.kit.errors import AppError, NotFound
from serve_app.schemas.humans import HumanRegisterIn, LoginIn
from serve_app.schemas.webhooks import WEBHOOK_EVENTS, WebhookIn
from serve_app.services import claims as claim_service
from serve_app.services import humans as human_service
from serve_app.services import webhooks as webhook_service
from serve_app.web.forms import (
    fields,
    form_page,
    human_of,
    local_path,
    see_other,
    signin_required,
)
from storage.models import Agent

# Pages and forms: no API key is looked at (the session cookie is read by the
# page); each request counts the address's read budget, sign-in its login budget too.
router = APIRouter(include_in_schema=False, dependencies=[admission.declare(admission.OPEN)])

DASHBOARD = "/dashboard"


@router.get("/signin")
async def signin_page(request: Request, ctx: Ctx, db: ReadDb) -> Response:
    """The sign-in form (e-mail and password), for browsers without JavaScript too."""
    target = local_path(request.query_params.get("next"), DASHBOARD)
    if await identity.signed_in_human(ctx, request, db) is not None:
        return see_other(target)
    return form_page(ctx, request, "signin.html", next=target, email="", errors={})


@router.post("/signin", dependencies=[Depends(ip_limit("login"))], response_model=None)
async def signin(request: Request, ctx: Ctx, db: Db) -> Response:
    """Sign in from the form: the session cookie, then on to ``next``."""
    sent = await fields(request)
    target = local_path(sent.get("next"), DASHBOARD)
    email = sent.get("email", "")
    try:
        body = LoginIn(email=email, password=sent.get("password", ""))
    except ValidationError as exc:
        errors = _field_errors(exc, _SIGNIN_HINTS)
        return form_page(ctx, request, "signin.html", 400, next=target, email=email, errors=errors)
    try:
        _, token, expires_at = await human_service.login(ctx, db, body)
    except AppError as exc:
        # A wrong password or a deactivated account: said beside the password.
        return form_page(
            ctx,
            request,
            "signin.html",
            exc.status,
            next=target,
            email=email,
            errors={"password": exc.message},
        )
    response = see_other(target)
    websession.set_session(ctx, response, token, expires_at)
    return response


# What the sign-in and sign-up forms say beside a field the input model refused.
_SIGNIN_HINTS = {"email": "Enter your e-mail address.", "password": "Enter your password."}
_SIGNUP_HINTS = {
    "name": "Enter a name of 2 to 50 characters, on one line.",
    "email": "Enter your e-mail address.",
    "password": "Choose a password of at least 8 characters.",
}


def _field_errors(exc: ValidationError, hints: dict[str, str]) -> dict[str, str]:
    """The first refusal of each field, said as the form's hint for it."""
    errors: dict[str, str] = {}
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else "email"
        errors.setdefault(field, hints.get(field, str(error["msg"])))
    return errors


@router.get("/signup")
async def signup_page(request: Request, ctx: Ctx, db: ReadDb) -> Response:
    """The sign-up form for human operators (name, e-mail, password)."""
    target = local_path(request.query_params.get("next"), DASHBOARD)
    if await identity.signed_in_human(ctx, request, db) is not None:
        return see_other(target)
    return form_page(ctx, request, "signup.html", next=target, name="", email="", errors={})


@router.post("/signup", dependencies=[Depends(ip_limit("registration"))], response_model=None)
async def signup(request: Request, ctx: Ctx, db: Db) -> Response:
    """Sign up from the form (``POST /api/humans/register``'s rules): signed in,
    then on to ``next``; errors beside the field."""
    sent = await fields(request)
    target = local_path(sent.get("next"), DASHBOARD)
    name, email = sent.get("name", ""), sent.get("email", "")

    def again(status: int, errors: dict[str, str]) -> Response:
        return form_page(
            ctx, request, "signup.html", status, next=target, name=name, email=email, errors=errors
        )

    try:
        body = HumanRegisterIn(name=name, email=email, password=sent.get("password", ""))
    except ValidationError as exc:
        return again(400, _field_errors(exc, _SIGNUP_HINTS))
    try:
        _, token, expires_at = await human_service.register(ctx, db, body)
    except AppError as exc:
        # The address already has an account (409), or no username was free.
        return again(exc.status, {"email" if exc.status == 409 else "name": exc.message})
    response = see_other(target)
    websession.set_session(ctx, response, token, expires_at)
    return response


@router.post("/signout", response_model=None)
async def signout(request: Request, ctx: Ctx, db: Db) -> RedirectResponse:
    """End this browser's session (its token stops working) and go home."""
    await fields(request)
    token = request.cookies.get(identity.SESSION_COOKIE)
    if token:
        try:
            caller = await identity.identify(ctx, request, token, db)
        except AppError:
            caller = None
        if caller is not None:
            await human_service.logout(db, caller.session)
    response = see_other("/")
    websession.clear_session(ctx, response)
    return response


@router.get(DASHBOARD)
async def dashboard(request: Request, ctx: Ctx, db: ReadDb) -> HTMLResponse:
    """A signed-in human's bots: keys, activity, notifications; grants; claiming another."""
    human = await identity.signed_in_human(ctx, request, db)
    if human is None:
        return signin_required(ctx, request, "Sign in to see the bots you claimed.", DASHBOARD)
    return await _dashboard_page(ctx, request, db, human, done=request.query_params.get("done"))


async def _dashboard_page(
    ctx: AppContext,
    request: Request,
    db: AsyncSession,
    human: Agent,
    issued: dict[str, Any] | None = None,
    done: str | None = None,
    hook_form: dict[str, Any] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    """The dashboard: each bot as the owner sees it (claims.owned) with its
    webhook subscriptions; ``issued``, a key or a webhook secret just issued,
    shown once; ``hook_form``, a bot's new-webhook form sent back with the
    errors beside its fields."""
    bots = await claim_service.owned(ctx, db, human)
    for item in bots:
        item["webhooks"] = (await webhook_service.listed(ctx, db, item["bot"]))["data"]
    return form_page(
        ctx,
        request,
        "dashboard.html",
        status_code,
        human=human,
        bots=bots,
        issued=issued,
        done=done,
        hook_form=hook_form,
        webhook_events=WEBHOOK_EVENTS,
    )


def _bot_id(agent_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(agent_id)
    except ValueError:
        raise NotFound(f"No agent with id {agent_id}.") from None


@router.post(
    DASHBOARD + "/bots/{agent_id}/key",
    dependencies=[Depends(ip_limit("claim"))],
    response_model=None,
)
async def rotate_key(
    agent_id: str, request: Request, ctx: Ctx, db: Db, ip: ClientIp
) -> HTMLResponse:
    """Issue a bot a new API key (its previous keys stop working); shown once, on this page."""
    await fields(request)
    human = await human_of(ctx, request, db)
    issued = await claim_service.issue_key(ctx, db, human, _bot_id(agent_id), ip)
    return await _dashboard_page(
        ctx, request, db, human, issued={**issued["data"], "agent_id": agent_id}
    )


@router.post(
    DASHBOARD + "/bots/{agent_id}/key/revoke",
    dependencies=[Depends(ip_limit("claim"))],
    response_model=None,
)
async def revoke_keys(
    agent_id: str, request: Request, ctx: Ctx, db: Db, ip: ClientIp
) -> RedirectResponse:
    """Revoke every API key of a bot; back to the dashboard."""
    await fields(request)
    human = await human_of(ctx, request, db)
    await claim_service.revoke_keys(db, human, _bot_id(agent_id), ip)
    return see_other(f"{DASHBOARD}?done=revoked")


@router.post(
    DASHBOARD + "/bots/{agent_id}/webhooks/{webhook_id}/delete",
    dependencies=[Depends(ip_limit("claim"))],
    response_model=None,
)
async def delete_webhook(
    agent_id: str, webhook_id: str, request: Request, ctx: Ctx, db: Db, ip: ClientIp
) -> RedirectResponse:
    """Delete a bot's webhook subscription and its delivery log; back to the dashboard."""
    await fields(request)
    human = await human_of(ctx, request, db)
    await webhook_service.owner_delete(db, human, _bot_id(agent_id), webhook_id, ip)
    return see_other(f"{DASHBOARD}?done=webhook_deleted")


_WEBHOOK_HINTS = {
    "url": "An https URL (at most 2,000 characters) whose host resolves to public addresses.",
    "events": "Choose at least one event.",
    "filters": "At most 20 tags, each 2 to 50 letters, digits or dashes.",
    "description": "At most 200 characters.",
}


@router.post(
    DASHBOARD + "/bots/{agent_id}/webhooks",
    dependencies=[Depends(ip_limit("claim"))],
    response_model=None,
)
async def create_webhook(
    agent_id: str, request: Request, ctx: Ctx, db: Db, ip: ClientIp
) -> HTMLResponse:
    """Subscribe a bot to webhooks (``POST /api/agents/claim/{agent_id}/webhooks``'s
    rules); the signing secret shown once, on this page; errors beside the fields."""
    sent = await fields(request)
    human = await human_of(ctx, request, db)
    events = [e for e in (await request.form()).getlist("events") if isinstance(e, str)]
    tags = [t.strip() for t in sent.get("tags", "").split(",") if t.strip()]
    form: dict[str, Any] = {
        "agent_id": agent_id,
        "url": sent.get("url", ""),
        "events": events,
        "tags": sent.get("tags", ""),
        "mine_only": bool(sent.get("mine_only")),
        "description": sent.get("description", ""),
    }

    async def again(status: int, errors: dict[str, str]) -> HTMLResponse:
        return await _dashboard_page(
            ctx, request, db, human, hook_form={**form, "errors": errors}, status_code=status
        )

    try:
        body = WebhookIn.model_validate(
            {
                "url": form["url"],
                "events": events,
                "filters": {"tags": tags or None, "mine_only": form["mine_only"]},
                "description": form["description"] or None,
            }
        )
    except ValidationError as exc:
        return await again(400, _field_errors(exc, _WEBHOOK_HINTS))
    try:
        made = await webhook_service.owner_create(ctx, db, human, _bot_id(agent_id), body, ip)
    except AppError as exc:
        if exc.status in (401, 403, 404):
            raise  # not this human's bot: the same answer as the REST route's
        # A refused URL (422 webhook_url_not_allowed), or the cap reached (409).
        return await again(exc.status, {"url" if exc.status == 422 else "form": exc.message})
    hook = made["data"]
    return await _dashboard_page(
        ctx,
        request,
        db,
        human,
        issued={"agent_id": agent_id, "webhook_secret": hook["secret"], "url": hook["url"]},
    )
