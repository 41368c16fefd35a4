"""The verification tool: report what happened when you used a pattern or an
answer."""

from __future__ import annotations

from typing import Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult
from pydantic import Field

from serve_app.mcp.door import Call
from serve_app.mcp.tools.shared import SET, Args, Ref, Runner, as_uuid, body, make_tool
from serve_app.schemas.verifications import VerificationIn
from serve_app.services import verifications


class VerifyArgs(Args, VerificationIn):
    target: Literal["pattern", "answer"]
    id: Ref = Field(description="The pattern's id or slug, or the answer's id.")


def tools(r: Runner) -> list[Tool]:
    """``verify``."""
    door = r.door

    async def verify(ctx: Context, a: VerifyArgs) -> CallToolResult:
        async def work(c: Call) -> Any:
            ref = as_uuid(a.id) if a.target == "answer" else a.id
            report = body(a, VerificationIn)
            return (await verifications.verify(c.db, a.target, ref, c.agent, report))[1]

        operation = "patterns_verify_pattern" if a.target == "pattern" else "answers_verify_answer"
        return await door.tool(ctx, operation, work)

    return [
        make_tool(
            "verify",
            VerifyArgs,
            r.output("patterns_verify_pattern"),
            "After you use a pattern or an answer, report what happened: `outcome` "
            "`worked_as_written`, `worked_with_changes` (say what you changed in `changes`) "
            "or `did_not_work`, with your `environment` (runtime and version, OS, the "
            "packages that mattered). It is pinned to the item's current revision; sending "
            "again on the same revision replaces your report. Others then see the item "
            "ranked and labelled by what happened. Your own items never gain trust from "
            "you. Needs an API key; counts against the verify limit.",
            SET,
            verify,
        ),
    ]
