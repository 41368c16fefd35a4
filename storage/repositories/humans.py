"""SQL for human operators: sign-up, sign-in sessions, password hashes."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import delete, text, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.db import fetch_one
from storage.models import Agent, HumanSession
from storage.models.base import utcnow
from storage.repositories import rows

# Column names come from our own tables, never from input.
_LIVE_SESSION = (
    f"SELECT {rows.aliased_columns('s', HumanSession)}, {rows.aliased_columns('a', Agent)}"  # noqa: S608
    " FROM human_sessions s JOIN agents a ON a.id = s.agent_id"
    " WHERE s.token_hash = %(token_hash)s AND s.revoked_at IS NULL AND s.expires_at > now()"
)

# A clash on username or e-mail inserts nothing and returns no row: the caller
# tells the two apart (e-mail taken is a 409, a username clash draws again).
_REGISTER = text(
    """
    WITH human AS (
        INSERT INTO agents (id, username, name, display_name, is_human, email, password_hash)
        VALUES (:id, :username, :name, :name, true, :email, :password_hash)
        ON CONFLICT DO NOTHING
        RETURNING id
    ), prefs AS (
        INSERT INTO email_preferences (agent_id) SELECT id FROM human
    )
    SELECT id FROM human
    """
)


async def insert_human(
    session: AsyncSession, *, username: str, name: str, email: str, password_hash: str
) -> uuid.UUID | None:
    """Create a human profile with its e-mail preferences; None on a clash."""
    human_id = uuid.uuid4()
    conn = await session.connection()
    result = await conn.execute(
        _REGISTER.bindparams(
            id=human_id, username=username, name=name, email=email, password_hash=password_hash
        )
    )
    return human_id if result.first() is not None else None


async def email_taken(session: AsyncSession, email: str) -> bool:
    result = await session.exec(
        select(col(Agent.id)).where(text("lower(email) = lower(:email)")).params(email=email)
    )
    return result.first() is not None


async def by_email(session: AsyncSession, email: str) -> Agent | None:
    result = await session.exec(
        select(Agent)
        .where(col(Agent.is_human).is_(True), text("lower(email) = lower(:email)"))
        .params(email=email)
    )
    return result.first()


async def set_password_hash(session: AsyncSession, agent_id: uuid.UUID, password_hash: str) -> None:
    await session.exec(
        update(Agent).where(col(Agent.id) == agent_id).values(password_hash=password_hash)
    )


async def open_session(
    session: AsyncSession, agent_id: uuid.UUID, token_hash: bytes, expires_at: datetime
) -> HumanSession:
    # Sessions that can no longer be used are dropped as new ones open.
    await session.exec(
        delete(HumanSession).where(
            col(HumanSession.agent_id) == agent_id,
            (col(HumanSession.expires_at) < utcnow()) | col(HumanSession.revoked_at).isnot(None),
        )
    )
    row = HumanSession(agent_id=agent_id, token_hash=token_hash, expires_at=expires_at)
    session.add(row)
    await session.flush()
    return row


async def live_session(
    session: AsyncSession, token_hash: bytes
) -> tuple[HumanSession, Agent] | None:
    """The unexpired, unrevoked session with this token hash and its human (detached)."""
    row = await fetch_one(session, _LIVE_SESSION, {"token_hash": token_hash})
    if row is None:
        return None
    return rows.from_aliased(row, "s", HumanSession), rows.from_aliased(row, "a", Agent)


async def revoke_session(session: AsyncSession, session_id: uuid.UUID) -> None:
    await session.exec(
        update(HumanSession)
        .where(col(HumanSession.id) == session_id, col(HumanSession.revoked_at).is_(None))
        .values(revoked_at=utcnow())
    )


# Address verification ------------------------------------------------------------

_LOCK_ADDRESS = text(
    "SELECT email, email_verified_at FROM agents WHERE id = :id AND is_human FOR UPDATE"
)
_RECENT = text(
    """
    SELECT count(*), min(created_at) FROM email_verifications
    WHERE (agent_id = :agent OR email = :email) AND created_at > :since
    """
)
_QUEUE = text(
    """
    WITH request AS (
        INSERT INTO email_verifications (id, agent_id, email, expires_at)
        VALUES (gen_random_uuid(), :agent, :email, :expires_at)
        RETURNING id
    )
    INSERT INTO mail_outbox (id, verification_id, recipient_id, to_address)
    SELECT gen_random_uuid(), id, :agent, :email FROM request
    """
)
# Single use: the token's row is spent by the same statement that verifies
# the address, and only while the account still has the address it was sent to.
_CONFIRM = text(
    """
    WITH spent AS (
        UPDATE email_verifications SET used_at = now()
        WHERE token_hash = :token_hash AND used_at IS NULL AND expires_at > now()
        RETURNING agent_id, email
    ), verified AS (
        UPDATE agents a SET email_verified_at = now()
        FROM spent
        WHERE a.id = spent.agent_id AND a.email = spent.email AND a.is_active
        RETURNING a.id, a.email
    ), others AS (
        UPDATE email_verifications SET used_at = now()
        WHERE agent_id IN (SELECT id FROM verified) AND used_at IS NULL
          AND token_hash IS DISTINCT FROM :token_hash
    )
    SELECT id, email FROM verified
    """
)


async def address_locked(
    session: AsyncSession, human_id: uuid.UUID
) -> tuple[str | None, datetime | None] | None:
    """The human's address and when it was verified, the row locked (so two
    requests of one human are counted one after the other); None if no human."""
    conn = await session.connection()
    row = (await conn.execute(_LOCK_ADDRESS.bindparams(id=human_id))).first()
    return None if row is None else (row[0], row[1])


async def recent_verifications(
    session: AsyncSession, human_id: uuid.UUID, email: str, since: datetime
) -> tuple[int, datetime | None]:
    """How many verification mails went to this human or this address since
    ``since``, and when the oldest of them was asked for."""
    conn = await session.connection()
    count, oldest = (
        await conn.execute(_RECENT.bindparams(agent=human_id, email=email, since=since))
    ).one()
    return int(count), oldest


async def queue_verification(
    session: AsyncSession, human_id: uuid.UUID, email: str, expires_at: datetime
) -> None:
    """A verification request and its outbox message (the dispatcher makes the token)."""
    conn = await session.connection()
    await conn.execute(_QUEUE.bindparams(agent=human_id, email=email, expires_at=expires_at))


async def confirm_address(session: AsyncSession, token_hash: bytes) -> tuple[uuid.UUID, str] | None:
    """Spend the token and verify the address it was sent to: (human, address),
    or None for an unknown, used or expired token or a changed address."""
    conn = await session.connection()
    row = (await conn.execute(_CONFIRM.bindparams(token_hash=token_hash))).first()
    return None if row is None else (row[0], row[1])
