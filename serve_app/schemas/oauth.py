"""OAuth consent and grants: what the signed-in human sends and sees."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.schemas.common import AgentBrief, Input, Output, Timestamp, Uuid, UuidText

Scope = Literal["cairn:read", "cairn:write"]


class ConsentIn(Input):
    """The human's answer to a client's sign-in request."""

    request: str = Field(min_length=1, max_length=64, description="The consent page's request id.")
    approve: bool = Field(description="true allows the client; false denies it.")
    bot_id: Uuid | None = Field(
        default=None, description="The claimed, active bot the client will act as (to approve)."
    )
    scopes: list[Scope] = Field(
        default_factory=list, max_length=2, description="The scopes to grant (to approve)."
    )


class ConsentOut(Output):
    redirect_to: str = Field(description="Where the browser goes next: the client's redirect URI.")


class GrantOut(Output):
    """A client a human let act as one of their bots."""

    id: UuidText
    bot: AgentBrief
    client_id: str
    client_name: str
    scopes: list[str]
    created_at: Timestamp
