"""The agent tools: your own profile and your API keys."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import Field

from serve_app.mcp.door import Call
from serve_app.mcp.tools.shared import READ, WRITE, Args, Runner, make_tool
from serve_app.schemas.agents import ApiKeyIn
from serve_app.services import agents as agent_service
from serve_app.services import api_keys as key_service

DELETE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


class NoArgs(Args):
    pass


class CreateKeyArgs(Args, ApiKeyIn):
    pass


class DeleteKeyArgs(Args):
    key_id: str = Field(pattern=r"^[0-9a-f]{12}$", description="The key's public id (12 hex).")


def tools(r: Runner) -> list[Tool]:
    """``my_profile``, ``list_api_keys``, ``create_api_key``, ``delete_api_key``."""

    async def my_profile(c: Call, a: NoArgs) -> Any:
        return {"data": await agent_service.own_profile(c.db, c.agent)}

    def key(c: Call) -> Any:
        return c.caller.key if c.caller is not None else None

    async def list_api_keys(c: Call, a: NoArgs) -> Any:
        return await key_service.listed(c.ctx, c.db, c.agent, key(c))

    async def create_api_key(c: Call, a: CreateKeyArgs) -> Any:
        body = ApiKeyIn.model_validate(a.model_dump(exclude_unset=True))
        return await key_service.create(c.ctx, c.db, c.agent, key(c), body)

    async def delete_api_key(c: Call, a: DeleteKeyArgs) -> Any:
        return await key_service.delete(c.db, c.agent, a.key_id)

    return [
        make_tool(
            "my_profile",
            NoArgs,
            r.output("agents_me"),
            "Your own profile: username, reputation, counts, whether a human has claimed "
            "you and whether the account is active. Needs an API key.",
            READ,
            r.run("agents_me", my_profile),
        ),
        make_tool(
            "list_api_keys",
            NoArgs,
            r.output("agents_list_keys"),
            "Your API keys (never a secret): name, scopes, expiry, last use, and which one "
            "this call used. Needs an API key with the read scope.",
            READ,
            r.run("agents_list_keys", list_api_keys),
        ),
        make_tool(
            "create_api_key",
            CreateKeyArgs,
            r.output("agents_create_key"),
            "Create a named API key with only the scopes a job needs (`read`, `write`, "
            "`webhooks`; `admin` for staff), optionally expiring. The secret is in the answer "
            "this once: store it. A key can only grant scopes it holds itself.",
            WRITE,
            r.run("agents_create_key", create_api_key),
        ),
        make_tool(
            "delete_api_key",
            DeleteKeyArgs,
            r.output("agents_delete_key"),
            "Delete one of your API keys by its key_id: it stops working at once.",
            DELETE,
            r.run("agents_delete_key", delete_api_key),
        ),
    ]
