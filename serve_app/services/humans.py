"""Human operators: sign-up, sign-in and sign-out with session tokens."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app import keys, passwords
from serve_app.context import AppContext
from serve_app.errors import Conflict, Forbidden, ServiceUnavailable, Unauthorized
from serve_app.schemas.humans import HumanRegisterIn, LoginIn
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
    body_out = {
        "message": "Signed up and signed in. Send the session_token as 'Authorization: Bearer'.",
        "data": _signed_in(human, token, expires_at),
    }
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
        {"message": "Signed in.", "data": _signed_in(human, token, expires_at)},
        token,
        expires_at,
    )


async def logout(db: AsyncSession, session: HumanSession | None) -> dict[str, Any]:
    if session is not None:
        await repo.revoke_session(db, session.id)
    return {"message": "Signed out. The session token no longer works."}
