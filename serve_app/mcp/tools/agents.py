"""The agent tools: your own profile."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.tools import Tool

from serve_app.mcp.door import Call
from serve_app.mcp.tools.shared import READ, Args, Runner, make_tool
from serve_app.services import agents as agent_service


class NoArgs(Args):
    pass


def tools(r: Runner) -> list[Tool]:
    """``my_profile``."""

    async def my_profile(c: Call, a: NoArgs) -> Any:
        return {"data": await agent_service.own_profile(c.db, c.agent)}

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
    ]
