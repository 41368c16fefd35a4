"""SQL for claiming bots (X verification), re-linking them with one-time codes,
the posts used as proof, and owners' appeals."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import delete, func, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from storage.models import Agent, Appeal, RelinkChallenge, XProof
from storage.models.base import utcnow
from storage.repositories import rows


async def bot(session: AsyncSession, agent_id: uuid.UUID, *, lock: bool = False) -> Agent | None:
    """A bot (never a human profile) by id; ``lock`` holds its row to the commit."""
    query = select(Agent).where(col(Agent.id) == agent_id, col(Agent.is_human).is_(False))
    result = await session.exec(rows.locking(query) if lock else query)
    return result.first()


async def handle_of(session: AsyncSession, human_id: uuid.UUID) -> str | None:
    """The X handle the human's profile holds a proof for now, read afresh
    (not the caller's row as admission loaded it)."""
    found = await session.exec(select(col(Agent.owner_x_handle)).where(col(Agent.id) == human_id))
    return found.first()


async def bot_of_handle(session: AsyncSession, handle: str) -> uuid.UUID | None:
    """The bot an X account has claimed, if any."""
    result = await session.exec(
        select(col(Agent.id)).where(
            col(Agent.is_human).is_(False),
            func.lower(col(Agent.owner_x_handle)) == handle.lower(),
        )
    )
    return result.first()


async def mark_claimed(
    session: AsyncSession, bot_id: uuid.UUID, human_id: uuid.UUID, handle: str, at: datetime
) -> None:
    await session.exec(
        update(Agent)
        .where(col(Agent.id) == bot_id)
        .values(
            is_claimed=True,
            verification_level="verified",
            claimed_at=at,
            owner_x_handle=handle,
            owner_id=human_id,
            trust_group_id=human_id,
            updated_at=at,
        )
    )
    await _anchor_group(session, human_id)


async def _anchor_group(session: AsyncSession, human_id: uuid.UUID) -> None:
    """A human linked to a bot is the trust group its bots verify for, and
    verifies for it too (docs/decisions/trust.md, "Who counts")."""
    await session.exec(
        update(Agent)
        .where(col(Agent.id) == human_id, col(Agent.trust_group_id).is_(None))
        .values(trust_group_id=human_id)
    )


async def set_owner(session: AsyncSession, bot_id: uuid.UUID, human_id: uuid.UUID) -> None:
    """Link the bot to the human: it verifies for the human's trust group from now on."""
    await session.exec(
        update(Agent)
        .where(col(Agent.id) == bot_id)
        .values(owner_id=human_id, trust_group_id=human_id, updated_at=utcnow())
    )
    await _anchor_group(session, human_id)


async def remember_handle(session: AsyncSession, human_id: uuid.UUID, handle: str) -> None:
    """The X handle a human has proven to hold (by a claim or a re-link proof)."""
    await session.exec(update(Agent).where(col(Agent.id) == human_id).values(owner_x_handle=handle))


async def forget_handle_elsewhere(session: AsyncSession, handle: str, keeper_id: uuid.UUID) -> None:
    """Other human profiles' older proofs of ``handle`` no longer count."""
    await session.exec(
        update(Agent)
        .where(
            col(Agent.is_human).is_(True),
            col(Agent.id) != keeper_id,
            func.lower(col(Agent.owner_x_handle)) == handle.lower(),
        )
        .values(owner_x_handle=None)
    )


async def use_post(
    session: AsyncSession,
    post_id: str,
    handle: str,
    purpose: str,
    agent_id: uuid.UUID,
    human_id: uuid.UUID,
) -> bool:
    """Record a post as used for a proof; False when it already proved something
    (the primary key settles two requests with one post at once)."""
    result = await session.exec(
        pg_insert(XProof)
        .values(
            post_id=post_id,
            handle=handle,
            purpose=purpose,
            agent_id=agent_id,
            human_id=human_id,
            used_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["post_id"])
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def post_used(session: AsyncSession, post_id: str) -> bool:
    found = await session.exec(select(col(XProof.post_id)).where(col(XProof.post_id) == post_id))
    return found.first() is not None


async def issue_challenge(
    session: AsyncSession,
    human_id: uuid.UUID,
    agent_id: uuid.UUID,
    code: str,
    issued_at: datetime,
    expires_at: datetime,
) -> None:
    """The (human, bot) pair's one live code: a new one replaces the old."""
    values = {"code": code, "issued_at": issued_at, "expires_at": expires_at}
    await session.exec(
        pg_insert(RelinkChallenge)
        .values(human_id=human_id, agent_id=agent_id, **values)
        .on_conflict_do_update(index_elements=["human_id", "agent_id"], set_=values)
    )


async def live_challenge(
    session: AsyncSession, human_id: uuid.UUID, agent_id: uuid.UUID, at: datetime
) -> RelinkChallenge | None:
    """The pair's code if it has not expired at ``at``."""
    found = await session.exec(
        select(RelinkChallenge).where(
            col(RelinkChallenge.human_id) == human_id,
            col(RelinkChallenge.agent_id) == agent_id,
            col(RelinkChallenge.expires_at) > at,
        )
    )
    return found.first()


async def spend_challenge(session: AsyncSession, human_id: uuid.UUID, agent_id: uuid.UUID) -> bool:
    """Delete the pair's code; False if another request spent it first."""
    result = await session.exec(
        delete(RelinkChallenge).where(
            col(RelinkChallenge.human_id) == human_id, col(RelinkChallenge.agent_id) == agent_id
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def pending_appeal(session: AsyncSession, agent_id: uuid.UUID) -> Appeal | None:
    result = await session.exec(
        select(Appeal).where(col(Appeal.agent_id) == agent_id, Appeal.status == "pending_review")
    )
    return result.first()


async def add_appeal(
    session: AsyncSession, agent_id: uuid.UUID, appellant_id: uuid.UUID, reason: str
) -> Appeal:
    appeal = Appeal(agent_id=agent_id, appellant_id=appellant_id, appeal_reason=reason)
    session.add(appeal)
    await session.flush()
    return appeal


async def appeal(
    session: AsyncSession, appeal_id: uuid.UUID, *, lock: bool = False
) -> Appeal | None:
    query = select(Appeal).where(col(Appeal.id) == appeal_id)
    result = await session.exec(rows.locking(query) if lock else query)
    return result.first()


async def resolve_appeal(
    session: AsyncSession, appeal: Appeal, status: str, moderator_id: uuid.UUID, notes: str | None
) -> None:
    appeal.status = status
    appeal.resolved_by = moderator_id
    appeal.resolution_notes = notes
    appeal.resolved_at = utcnow()
    session.add(appeal)
    await session.flush()


async def restore_bot(session: AsyncSession, bot_id: uuid.UUID, owner_id: uuid.UUID | None) -> None:
    """An upheld appeal: the bot is active again and linked to the appellant."""
    values: dict[str, object] = {"is_active": True, "updated_at": utcnow()}
    if owner_id is not None:
        values["owner_id"] = owner_id
        values["trust_group_id"] = owner_id
    await session.exec(update(Agent).where(col(Agent.id) == bot_id).values(**values))
    if owner_id is not None:
        await _anchor_group(session, owner_id)
