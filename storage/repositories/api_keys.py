"""SQL for API keys.

Triggers (migration 0019) send an agent's id on ``CHANNEL`` when one of its
keys is revoked, replaced or deleted, or its standing changes: each
replica's cache of verified keys forgets it (serve_app/runtime/keycache.py).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.db import Listener, execute, fetch_values
from storage.models import Agent, ApiKey
from storage.models.base import utcnow
from storage.repositories import rows

LAST_USED_GRANULARITY = timedelta(seconds=60)
CHANNEL = "cairn_credentials"
LISTENER_NAME = "cairn-credential-listener"


# Column names come from our own tables, never from input. A human's password
# hash is no part of a key check: it stays in Postgres (and out of the
# replicas' key caches); so does the search tsvector (``loaded_columns``).
_KEY_COLUMNS = rows.loaded_columns(ApiKey)
_AGENT_COLUMNS = tuple(c for c in rows.loaded_columns(Agent) if c != "password_hash")
_LIVE_BY_KEY_ID = (
    f"SELECT {', '.join(f'k.{c}' for c in _KEY_COLUMNS)},"  # noqa: S608
    f" {', '.join(f'a.{c}' for c in _AGENT_COLUMNS)}"
    " FROM api_keys k JOIN agents a ON a.id = k.agent_id"
    " WHERE k.key_id = %(key_id)s AND k.revoked_at IS NULL"
    " AND (k.expires_at IS NULL OR k.expires_at > now())"
)
_SPLIT = len(_KEY_COLUMNS)
_KEY_HASH = _KEY_COLUMNS.index("key_hash")
_AGENT_ID = _SPLIT + _AGENT_COLUMNS.index("id")
_IS_ACTIVE = _SPLIT + _AGENT_COLUMNS.index("is_active")
_EXPIRES_AT = _KEY_COLUMNS.index("expires_at")


@dataclass(frozen=True, slots=True)
class KeyRow:
    """A live key joined to its agent, as the database answered: the values
    alone, in the query's column order (what a replica's key cache keeps,
    about a kilobyte; ``models`` makes the rows a request uses)."""

    values: tuple[Any, ...]

    @property
    def key_hash(self) -> bytes:
        found: bytes = self.values[_KEY_HASH]
        return found

    @property
    def agent_id(self) -> uuid.UUID:
        found: uuid.UUID = self.values[_AGENT_ID]
        return found

    @property
    def expires_at(self) -> datetime | None:
        found: datetime | None = self.values[_EXPIRES_AT]
        return found

    @property
    def agent_active(self) -> bool:
        return bool(self.values[_IS_ACTIVE])

    def models(self) -> tuple[ApiKey, Agent]:
        """New detached rows (each call its own: callers may change them).
        Writes go through explicit UPDATE statements."""
        values = self.values
        key = rows.detached(ApiKey, dict(zip(_KEY_COLUMNS, values[:_SPLIT], strict=True)))
        agent = dict(zip(_AGENT_COLUMNS, values[_SPLIT:], strict=True))
        agent["password_hash"] = agent["search_vector"] = None
        return key, rows.detached(Agent, agent)


async def live_row(session: AsyncSession, key_id: str) -> KeyRow | None:
    """The live key with this id joined to its agent (hot path: every
    authenticated request the key cache cannot answer)."""
    found = await fetch_values(session, _LIVE_BY_KEY_ID, {"key_id": key_id})
    return None if found is None else KeyRow(found)


async def live_by_key_id(session: AsyncSession, key_id: str) -> tuple[ApiKey, Agent] | None:
    """The live key with this id and its agent, both detached."""
    row = await live_row(session, key_id)
    return None if row is None else row.models()


async def live_for_agent(session: AsyncSession, agent_id: uuid.UUID) -> ApiKey | None:
    """The agent's oldest live key that has not expired (its ``default`` key
    unless that one was deleted)."""
    result = await session.exec(
        select(ApiKey)
        .where(
            col(ApiKey.agent_id) == agent_id,
            col(ApiKey.revoked_at).is_(None),
            _unexpired(),
        )
        .order_by(col(ApiKey.created_at), col(ApiKey.id))
        .limit(1)
    )
    return result.first()


def _unexpired() -> Any:
    return or_(col(ApiKey.expires_at).is_(None), col(ApiKey.expires_at) > func.now())


async def listed(session: AsyncSession, agent_id: uuid.UUID) -> list[ApiKey]:
    """The agent's keys that are not revoked (expired ones too: they count
    towards the cap until deleted), oldest first."""
    result = await session.exec(
        select(ApiKey)
        .where(col(ApiKey.agent_id) == agent_id, col(ApiKey.revoked_at).is_(None))
        .order_by(col(ApiKey.created_at), col(ApiKey.id))
    )
    return list(result.all())


async def revoke_all(session: AsyncSession, agent_id: uuid.UUID) -> int:
    result = await session.exec(
        update(ApiKey)
        .where(col(ApiKey.agent_id) == agent_id, col(ApiKey.revoked_at).is_(None))
        .values(revoked_at=utcnow())
    )
    return int(result.rowcount)


async def revoke_one(session: AsyncSession, agent_id: uuid.UUID, key_id: str) -> ApiKey | None:
    """Revoke one of the agent's live keys by its public key id (None: no such key)."""
    result = await session.exec(
        update(ApiKey)
        .where(
            col(ApiKey.agent_id) == agent_id,
            col(ApiKey.key_id) == key_id,
            col(ApiKey.revoked_at).is_(None),
        )
        .values(revoked_at=utcnow())
        .returning(ApiKey)
    )
    row = result.first()
    return None if row is None else row[0]


async def insert(
    session: AsyncSession,
    agent_id: uuid.UUID,
    key_id: str,
    key_hash: bytes,
    *,
    name: str = "default",
    scopes: list[str] | None = None,
    expires_at: datetime | None = None,
) -> ApiKey:
    key = ApiKey(agent_id=agent_id, key_id=key_id, key_hash=key_hash, name=name)
    if scopes is not None:
        key.scopes = scopes
    key.expires_at = expires_at
    session.add(key)
    await session.flush()
    return key


def use_due(last_used_at: datetime | None, now: datetime) -> bool:
    """Whether a use at ``now`` is worth recording: at most once a minute
    per key (so reads are not writes)."""
    return last_used_at is None or now - last_used_at >= LAST_USED_GRANULARITY


# Never moves a key's time back (two replicas' batches may cross).
_RECORD_USE = (
    "UPDATE api_keys k SET last_used_at = u.at"
    " FROM unnest(%(ids)s::uuid[], %(ats)s::timestamptz[]) AS u(id, at)"
    " WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)"
)


async def record_use(session: AsyncSession, uses: list[tuple[uuid.UUID, datetime]]) -> int:
    """Set many keys' ``last_used_at`` in one statement (serve_app/runtime/
    lastuse.py batches them); the number of keys changed."""
    ids = [key_id for key_id, _ in uses]
    ats = [at for _, at in uses]
    return await execute(session, _RECORD_USE, {"ids": ids, "ats": ats})


def credential_listener(database_url: str, check_s: float) -> Listener:
    """A listener for credential changes (``CHANNEL``): each message is the
    agent ids of changes as they commit (``storage.db.Listener``)."""
    return Listener(database_url, CHANNEL, check_s, LISTENER_NAME)


def listen_changes(
    database_url: str, on_ready: Callable[[], Awaitable[None]], check_s: float
) -> AsyncIterator[list[str]]:
    """The agent ids of each credential change, as they commit."""
    return credential_listener(database_url, check_s).messages(on_ready)
