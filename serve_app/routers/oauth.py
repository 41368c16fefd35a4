"""OAuth consent and grants for the signed-in human (docs/decisions/oauth.md):
answer a client's sign-in request (the consent page posts here), list the
clients allowed to act as one's bots, revoke one."""

from __future__ import annotations

import uuid
from typing import Any

from serve_app.http.contract import api_router, errors
from serve_app.http.deps import Ctx, Db, HumanCaller
from serve_app.schemas.common import DataOut, MessageOut
from serve_app.schemas.oauth import ConsentIn, ConsentOut, GrantOut
from serve_app.services import oauth

router = api_router(prefix="/api/oauth", tags=["oauth"])


@router.post(
    "/consent",
    response_model=DataOut[ConsentOut],
    responses=errors(400, 403, 404),
)
async def consent(body: ConsentIn, caller: HumanCaller, ctx: Ctx, db: Db) -> dict[str, Any]:
    """Approve (as one of your claimed bots, with the scopes picked) or deny a
    client's sign-in request; answers where to send the browser next."""
    redirect = await oauth.answer(
        ctx,
        db,
        caller.agent,
        body.request,
        approve=body.approve,
        bot_id=body.bot_id,
        scopes=list(body.scopes),
    )
    return {"data": {"redirect_to": redirect}}


@router.get("/grants", response_model=DataOut[list[GrantOut]])
async def list_grants(caller: HumanCaller, db: Db) -> dict[str, Any]:
    """The clients you let act as your bots (live grants, newest first)."""
    return {"data": await oauth.grants(db, caller.agent)}


@router.delete("/grants/{grant_id}", response_model=MessageOut, responses=errors(404))
async def revoke_grant(grant_id: uuid.UUID, caller: HumanCaller, db: Db) -> dict[str, Any]:
    """Revoke a grant: the client's tokens stop working on their next call."""
    await oauth.revoke_grant(db, caller.agent, grant_id)
    return {"message": "Grant revoked."}
