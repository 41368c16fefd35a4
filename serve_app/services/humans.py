"""Human operators: sign-up, sign-in and sign-out with session tokens."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from actors.dispatch.dispatcher import VERIFY_TOKEN_PREFIX
from serve_app.context import AppContext
from serve_app.kit import hooks, keys, passwords
from serve_app.kit.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    RateLimited,
    ServiceUnavailable,
    Unauthorized,
)
from serve_app.schemas.humans import HumanRegisterIn, LoginIn
from serve_app.services import agents, screening, views
from serve_app.services.views import iso
from storage.models import Agent, HumanSession
from storage.models.base import utcnow
from storage.repositories import humans as repo

_ATTEMPTS = 8


def _email_taken() -> Conflict:
    return Conflict("An account with this e-mail already exists; sign in.", error="email_taken")


async def _open_session(ctx: AppContext, db: AsyncSession, human: Agent) -> tuple[str, datetime]:
    token = keys.session_token()
    expires_at = utcnow() + timedelta(days=ctx.settings.session_ttl_days)
    await repo.open_session(db, human.id, keys.hash_secret(ctx.secret, token), expires_at)
    return token, expires_at


def _signed_in(human: Agent, token: str, expires_at: datetime) -> dict[str, Any]:
    return {
        "agent_id": str(human.id),
        "username": human.username,
        "display_name": human.display_name,
        "is_human": True,
        "session_token": token,
        "expires_at": iso(expires_at),
    }


async def register(
    ctx: AppContext, db: AsyncSession, body: HumanRegisterIn
) -> tuple[dict[str, Any], str, datetime]:
    """Create a human profile and sign it in; returns the body, token and expiry."""
    await screening.check_unheld(
        db, agents.profile_fields({"display_name": body.name}), kind="profile"
    )
    if await repo.email_taken(db, body.email):
        raise _email_taken()
    password_hash = await passwords.hash_password(body.password)
    base = keys.username_base(body.name)
    for _ in range(_ATTEMPTS):
        username = f"{base}_{keys.username_suffix()}"
        human_id = await repo.insert_human(
            db, username=username, name=body.name, email=body.email, password_hash=password_hash
        )
        if human_id is not None:
            break
        if await repo.email_taken(db, body.email):  # lost a race for the address
            raise _email_taken()
    else:
        raise ServiceUnavailable("Could not allocate a unique username; please retry.")
    human = Agent(id=human_id, username=username, name=body.name, display_name=body.name)
    token, expires_at = await _open_session(ctx, db, human)
    message = "Signed up and signed in. Send the session_token as 'Authorization: Bearer'."
    if ctx.settings.mail_enabled:
        # The first verification mail goes out unasked (it counts toward the
        # hourly throttle like any other).
        await _queue_verification(ctx, db, human_id, body.email)
        message += f" A link to confirm {body.email} is on its way."
    body_out = views.envelope(message, _signed_in(human, token, expires_at))
    return body_out, token, expires_at


async def login(
    ctx: AppContext, db: AsyncSession, body: LoginIn
) -> tuple[dict[str, Any], str, datetime]:
    human = await repo.by_email(db, body.email)
    # Verified even for an unknown address: equal time either way.
    ok = await passwords.verify_password(human.password_hash if human else None, body.password)
    if human is None or not ok or human.password_hash is None:
        raise Unauthorized("Wrong e-mail or password.", error="invalid_credentials")
    if not human.is_active:
        raise Forbidden("This account has been deactivated.", error="account_inactive")
    if passwords.needs_rehash(human.password_hash):
        await repo.set_password_hash(db, human.id, await passwords.hash_password(body.password))
    token, expires_at = await _open_session(ctx, db, human)
    return (
        views.envelope("Signed in.", _signed_in(human, token, expires_at)),
        token,
        expires_at,
    )


async def logout(db: AsyncSession, session: HumanSession | None) -> dict[str, Any]:
    if session is not None:
        await repo.revoke_session(db, session.id)
    return views.envelope("Signed out. The session token no longer works.")


# Address verification ---------------------------------------------------------------

_HOUR = timedelta(hours=1)


async def _queue_verification(
    ctx: AppContext, db: AsyncSession, human_id: uuid.UUID, email: str
) -> datetime:
    """Queue a verification mail unless the human or the address has had
    ``email_verify_per_hour`` of them in the last hour (429). The caller holds
    the human's row lock (or has just created it), so two requests are
    counted one after the other."""
    now = utcnow()
    sent, oldest = await repo.recent_verifications(db, human_id, email, now - _HOUR)
    limit = ctx.settings.email_verify_per_hour
    if sent >= limit:
        reset = (oldest or now) + _HOUR
        retry_after = max(1, int((reset - now).total_seconds()) + 1)
        raise RateLimited(
            f"At most {limit} verification e-mails per hour go to one account or address."
            f" Retry after {retry_after} seconds.",
            headers={
                "Retry-After": str(retry_after),
                "X-RateLimit-Limit": str(limit),
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset": str(int(reset.timestamp())),
            },
        )
    expires_at = now + timedelta(hours=ctx.settings.email_verify_ttl_hours)
    await repo.queue_verification(db, human_id, email, expires_at)
    hooks.wake_dispatcher(db)
    return expires_at


async def request_verification(ctx: AppContext, db: AsyncSession, human: Agent) -> dict[str, Any]:
    """(Re)send the link that confirms the signed-in human's address."""
    if not ctx.settings.mail_enabled:
        raise ServiceUnavailable(
            "This server sends no e-mail (CAIRN_SMTP_URL is unset).", error="mail_disabled"
        )
    found = await repo.address_locked(db, human.id)
    email, verified_at = found if found is not None else (None, None)
    if email is None:
        raise BadRequest("This account has no e-mail address.", error="no_email")
    if verified_at is not None:
        raise Conflict(f"{email} is already confirmed.", error="email_already_verified")
    expires_at = await _queue_verification(ctx, db, human.id, email)
    return views.envelope(
        f"A link to confirm {email} is on its way; it works once.",
        {"email": email, "email_verified": False, "expires_at": iso(expires_at)},
    )


async def confirm_email(ctx: AppContext, db: AsyncSession, token: str) -> dict[str, Any]:
    """Spend a mailed token: the address it was sent to is verified."""
    found = None
    if token.startswith(VERIFY_TOKEN_PREFIX):
        found = await repo.confirm_address(db, keys.hash_secret(ctx.secret, token))
    if found is None:
        raise BadRequest(
            "This confirmation link is unknown, used, expired, or for an address the account"
            " no longer has; ask for a new one (POST /api/humans/me/email/verify).",
            error="invalid_token",
        )
    human_id, email = found
    return views.envelope(
        f"{email} is confirmed.",
        {"agent_id": str(human_id), "email": email, "email_verified": True},
    )
