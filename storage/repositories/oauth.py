"""SQL for OAuth: clients, pending consents, grants, codes and tokens."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, or_, update
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.db import fetch_one
from storage.models import Agent, OAuthClient, OAuthCode, OAuthGrant, OAuthRequest, OAuthToken
from storage.models.base import utcnow
from storage.repositories import rows

# Clients ----------------------------------------------------------------------------


async def client(session: AsyncSession, client_id: str) -> OAuthClient | None:
    return await session.get(OAuthClient, client_id)


async def save_client(
    session: AsyncSession,
    client_id: str,
    kind: str,
    info: dict[str, Any],
    secret_hash: bytes | None,
) -> None:
    """Insert a client, or refresh a metadata document's copy."""
    now = utcnow()
    values = {
        "client_id": client_id,
        "kind": kind,
        "info": info,
        "secret_hash": secret_hash,
        "created_at": now,
        "fetched_at": now,
    }
    statement = insert(OAuthClient).values(**values)
    await session.exec(
        statement.on_conflict_do_update(
            index_elements=["client_id"],
            set_={"info": statement.excluded.info, "fetched_at": statement.excluded.fetched_at},
        )
    )


async def mark_exchanged(session: AsyncSession, client_id: str) -> None:
    """Note a client's first code exchange: from then on it is kept."""
    await session.exec(
        update(OAuthClient)
        .where(col(OAuthClient.client_id) == client_id, col(OAuthClient.exchanged_at).is_(None))
        .values(exchanged_at=utcnow())
    )


async def drop_unused_clients(session: AsyncSession, older_than: datetime) -> int:
    """Delete the clients stored before ``older_than`` that no code exchange
    ever used (their pending requests and unexchanged grants go with them)."""
    result = await session.exec(
        delete(OAuthClient).where(
            col(OAuthClient.exchanged_at).is_(None), col(OAuthClient.created_at) < older_than
        )
    )
    return int(result.rowcount)


# Consents waiting for a human ------------------------------------------------------


async def add_request(
    session: AsyncSession, client_id: str, params: dict[str, Any], expires_at: datetime
) -> uuid.UUID:
    # Requests nobody answered are dropped as new ones come.
    await session.exec(delete(OAuthRequest).where(col(OAuthRequest.expires_at) < utcnow()))
    row = OAuthRequest(client_id=client_id, params=params, expires_at=expires_at)
    session.add(row)
    await session.flush()
    return row.id


async def live_request(session: AsyncSession, request_id: uuid.UUID) -> OAuthRequest | None:
    result = await session.exec(
        select(OAuthRequest).where(
            col(OAuthRequest.id) == request_id, col(OAuthRequest.expires_at) > utcnow()
        )
    )
    return result.first()


async def take_request(session: AsyncSession, request_id: uuid.UUID) -> OAuthRequest | None:
    """Remove and return the live request (a consent is answered once: of
    two answers at once, the second finds nothing)."""
    result = await session.exec(
        rows.locking(
            select(OAuthRequest).where(
                col(OAuthRequest.id) == request_id, col(OAuthRequest.expires_at) > utcnow()
            )
        )
    )
    found = result.first()
    if found is None:
        return None
    await session.exec(delete(OAuthRequest).where(col(OAuthRequest.id) == request_id))
    return found


# Grants ---------------------------------------------------------------------------------


async def add_grant(
    session: AsyncSession, human_id: uuid.UUID, bot_id: uuid.UUID, client_id: str, scopes: list[str]
) -> OAuthGrant:
    grant = OAuthGrant(human_id=human_id, bot_id=bot_id, client_id=client_id, scopes=scopes)
    session.add(grant)
    await session.flush()
    return grant


async def grants_of(
    session: AsyncSession, human_id: uuid.UUID
) -> list[tuple[OAuthGrant, Agent, OAuthClient]]:
    """The live grants a human gave, newest first, with their bot and client."""
    result = await session.exec(
        select(OAuthGrant, Agent, OAuthClient)
        .join(Agent, col(Agent.id) == col(OAuthGrant.bot_id))
        .join(OAuthClient, col(OAuthClient.client_id) == col(OAuthGrant.client_id))
        .where(col(OAuthGrant.human_id) == human_id, col(OAuthGrant.revoked_at).is_(None))
        .order_by(col(OAuthGrant.created_at).desc())
    )
    return list(result.all())


async def revoke_grant(session: AsyncSession, grant_id: uuid.UUID, human_id: uuid.UUID) -> bool:
    """Revoke a human's live grant and every token under it; False when none."""
    now = utcnow()
    result = await session.exec(
        update(OAuthGrant)
        .where(
            col(OAuthGrant.id) == grant_id,
            col(OAuthGrant.human_id) == human_id,
            col(OAuthGrant.revoked_at).is_(None),
        )
        .values(revoked_at=now)
    )
    if not result.rowcount:
        return False
    await session.exec(
        update(OAuthToken)
        .where(col(OAuthToken.grant_id) == grant_id, col(OAuthToken.revoked_at).is_(None))
        .values(revoked_at=now)
    )
    return True


# Codes -------------------------------------------------------------------------------------


async def add_code(session: AsyncSession, code: OAuthCode) -> None:
    session.add(code)
    await session.flush()


async def code(session: AsyncSession, code_hash: bytes) -> tuple[OAuthCode, OAuthGrant] | None:
    """A code (spent or not) with its grant."""
    result = await session.exec(
        select(OAuthCode, OAuthGrant)
        .join(OAuthGrant, col(OAuthGrant.id) == col(OAuthCode.grant_id))
        .where(col(OAuthCode.code_hash) == code_hash)
    )
    found = result.first()
    return (found[0], found[1]) if found is not None else None


async def spend_code(session: AsyncSession, code_hash: bytes) -> bool:
    """Mark an unspent, unexpired code spent; False when another exchange won."""
    result = await session.exec(
        update(OAuthCode)
        .where(
            col(OAuthCode.code_hash) == code_hash,
            col(OAuthCode.used_at).is_(None),
            col(OAuthCode.expires_at) > utcnow(),
        )
        .values(used_at=utcnow())
    )
    return bool(result.rowcount)


# Tokens ------------------------------------------------------------------------------------


async def add_token(session: AsyncSession, token: OAuthToken) -> None:
    session.add(token)
    await session.flush()


async def token(session: AsyncSession, token_hash: bytes) -> tuple[OAuthToken, OAuthGrant] | None:
    """A token (spent, revoked or not) with its grant."""
    result = await session.exec(
        select(OAuthToken, OAuthGrant)
        .join(OAuthGrant, col(OAuthGrant.id) == col(OAuthToken.grant_id))
        .where(col(OAuthToken.token_hash) == token_hash)
    )
    found = result.first()
    return (found[0], found[1]) if found is not None else None


async def spend_refresh(session: AsyncSession, token_hash: bytes) -> bool:
    """Mark a live refresh token used (rotated); False when it was not live."""
    result = await session.exec(
        update(OAuthToken)
        .where(
            col(OAuthToken.token_hash) == token_hash,
            col(OAuthToken.kind) == "refresh",
            col(OAuthToken.used_at).is_(None),
            col(OAuthToken.revoked_at).is_(None),
            col(OAuthToken.expires_at) > utcnow(),
        )
        .values(used_at=utcnow())
    )
    return bool(result.rowcount)


async def revoke_family(session: AsyncSession, family_id: uuid.UUID) -> int:
    result = await session.exec(
        update(OAuthToken)
        .where(col(OAuthToken.family_id) == family_id, col(OAuthToken.revoked_at).is_(None))
        .values(revoked_at=utcnow())
    )
    return int(result.rowcount)


async def drop_expired(session: AsyncSession, keep_spent: timedelta) -> None:
    """Delete the tokens that can no longer be used (by the expires_at index)
    and the codes never spent that expired. A spent code stays ``keep_spent``
    after it was spent (the refresh-token lifetime): a replay, however late,
    is recognised and revokes what the code gave."""
    now = utcnow()
    await session.exec(delete(OAuthToken).where(col(OAuthToken.expires_at) < now))
    await session.exec(
        delete(OAuthCode).where(
            or_(
                col(OAuthCode.used_at).is_(None) & (col(OAuthCode.expires_at) < now),
                col(OAuthCode.used_at) < now - keep_spent,
            )
        )
    )


# Column names come from our own tables, never from input.
_LIVE_ACCESS = (
    f"SELECT {rows.aliased_columns('t', OAuthToken)}, {rows.aliased_columns('g', OAuthGrant)},"  # noqa: S608
    f" {rows.aliased_columns('a', Agent)}"
    " FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id"
    " JOIN agents a ON a.id = g.bot_id"
    " JOIN agents h ON h.id = g.human_id"
    " WHERE t.token_hash = %(token_hash)s AND t.kind = 'access' AND t.revoked_at IS NULL"
    " AND t.expires_at > now() AND g.revoked_at IS NULL AND h.is_active"
)


async def live_access(
    session: AsyncSession, token_hash: bytes
) -> tuple[OAuthToken, OAuthGrant, Agent] | None:
    """The live access token with this hash, its grant and its bot, while the
    human who gave the grant is active (hot path: every call made with a
    token; rows come back detached)."""
    row = await fetch_one(session, _LIVE_ACCESS, {"token_hash": token_hash})
    if row is None:
        return None
    return (
        rows.from_aliased(row, "t", OAuthToken),
        rows.from_aliased(row, "g", OAuthGrant),
        rows.from_aliased(row, "a", Agent),
    )
