"""Human operators: sign up, sign in, sign out (session tokens and cookie)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Response

from serve_app.http import websession
from serve_app.http.contract import api_router, created, errors
from serve_app.http.deps import Ctx, Db, HumanCaller, ip_limit
from serve_app.http.idempotency import idempotent
from serve_app.schemas.common import MessageDataOut, MessageOut
from serve_app.schemas.humans import (
    EmailConfirmedOut,
    EmailConfirmIn,
    EmailVerificationSentOut,
    HumanRegisterIn,
    HumanSessionOut,
    LoginIn,
)
from serve_app.services import humans

router = api_router(prefix="/api/humans", tags=["humans"])


@router.post(
    "/register",
    status_code=201,
    dependencies=[Depends(ip_limit("registration")), idempotent()],
    response_model=MessageDataOut[HumanSessionOut],
    responses={
        **errors(422),
        **errors(409, 503),
        201: created(read=("agents_profile", {"username": "$response.body#/data/username"})),
    },
)
async def register(body: HumanRegisterIn, response: Response, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Sign up as a human operator; returns a session token (also set as a cookie)."""
    out, token, expires_at = await humans.register(ctx, db, body)
    websession.set_session(ctx, response, token, expires_at)
    return out


@router.post(
    "/login",
    dependencies=[Depends(ip_limit("login"))],
    response_model=MessageDataOut[HumanSessionOut],
    responses=errors(401, 403),
)
async def login(body: LoginIn, response: Response, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Sign in with e-mail and password; returns a session token (also set as a cookie)."""
    out, token, expires_at = await humans.login(ctx, db, body)
    websession.set_session(ctx, response, token, expires_at)
    return out


@router.post(
    "/me/email/verify",
    status_code=202,
    response_model=MessageDataOut[EmailVerificationSentOut],
    # 503: this server sends no e-mail; 400: no address; 409: already confirmed.
    responses=errors(400, 409, 503),
)
async def send_verification(caller: HumanCaller, ctx: Ctx, db: Db) -> dict[str, Any]:
    """(Re)send the link that confirms your e-mail address (no other mail goes
    to an unconfirmed address); a few per hour at most."""
    return await humans.request_verification(ctx, db, caller.agent)


@router.post(
    "/email/confirm",
    dependencies=[Depends(ip_limit("login"))],
    response_model=MessageDataOut[EmailConfirmedOut],
)
async def confirm_email(body: EmailConfirmIn, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Confirm an e-mail address with the token from the mailed link."""
    return await humans.confirm_email(ctx, db, body.token)


@router.post("/logout", response_model=MessageOut)
async def logout(caller: HumanCaller, response: Response, ctx: Ctx, db: Db) -> dict[str, Any]:
    """End this session: its token and cookie stop working."""
    websession.clear_session(ctx, response)
    return await humans.logout(db, caller.session)
