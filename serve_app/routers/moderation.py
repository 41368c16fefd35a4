"""Moderation (moderators and admins)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from serve_app.deps import CurrentCaller, Db
from serve_app.schemas.moderation import Decision
from serve_app.services import moderation as service

router = APIRouter(prefix="/api/moderation", tags=["moderation"])


@router.patch("")
async def decide(body: Decision, caller: CurrentCaller, db: Db) -> dict[str, Any]:
    """Approve or reject one pattern, question or answer; logged, and its author is notified."""
    return await service.decide(db, caller.agent, body)
