"""The MCP server: the SDK's server with Cairn's tools and resources
(``CairnMCP``), and ``McpDoor``, which builds it, puts its HTTP route behind
the admission layer (``edge.edge_rule``) and runs its session manager for the
app's lifetime."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from fastapi.routing import APIRoute
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, InputRequiredResult
from pydantic import ValidationError
from starlette.routing import BaseRoute

from serve_app.context import AppContext
from serve_app.http import admission
from serve_app.http.error_handlers import describe_validation
from serve_app.mcp import oauth, resources, tools
from serve_app.mcp.door import Door, argument_problem, error_result
from serve_app.mcp.edge import edge_rule
from serve_app.mcp.instructions import INSTRUCTIONS
from telemetry import metrics

PATH = "/mcp"


# A tool error's code answered as a server error on REST (the rest are 4xx).
_SERVER_ERRORS = frozenset(
    {"internal_error", "database_unavailable", "service_unavailable", "bad_gateway"}
)


def tool_status(result: Any) -> str:
    """The status class REST would answer a tool call's result with."""
    if not getattr(result, "is_error", False):
        return "2xx"
    body = getattr(result, "structured_content", None) or {}
    return "5xx" if body.get("error") in _SERVER_ERRORS else "4xx"


class CairnMCP(MCPServer[Any]):
    """The SDK's server, answering invalid tool arguments as REST answers an
    invalid body: a ``validation_error`` with the same one-line description."""

    # The tools' names (a call to another is counted as ``unknown``).
    tool_names: frozenset[str] = frozenset()

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """A tool call, counted and timed under its tool's name (door ``mcp``)."""
        t0 = time.perf_counter()
        status = "5xx"
        try:
            result = await self._call_tool(name, arguments, context)
            status = tool_status(result)
            return result
        finally:
            tool = name if name in self.tool_names else "unknown"
            metrics.REQUEST_SECONDS.labels("mcp", tool).observe(time.perf_counter() - t0)
            metrics.REQUESTS.labels("mcp", tool, status).inc()

    async def _call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None
    ) -> CallToolResult | InputRequiredResult:
        problem = argument_problem(arguments)
        if problem is not None:
            return error_result("validation_error", problem)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return error_result(
                    "validation_error", describe_validation(list(exc.__cause__.errors()))
                )
            raise


class McpDoor:
    """The built MCP server: its HTTP route, and its session manager to run
    for the app's lifetime (``running``)."""

    def __init__(self, ctx: AppContext, routes: Iterable[APIRoute]) -> None:
        door = Door(ctx, routes)
        root = logging.getLogger()
        # MCPServer() calls logging.basicConfig; with a handler present that is a
        # no-op, so building the app never reconfigures the process's logging.
        guard = logging.NullHandler() if not root.handlers else None
        if guard is not None:
            root.addHandler(guard)
        built = tools.build(door)
        try:
            self.server = CairnMCP(
                name="cairn",
                title="Cairn",
                description="The knowledge-sharing service for AI agents.",
                instructions=INSTRUCTIONS,
                version="0.1.0",
                tools=built,
            )
            self.server.tool_names = frozenset(t.name for t in built)
        finally:
            if guard is not None:
                root.removeHandler(guard)
        resources.register(self.server, door)
        app = self.server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            # A network service authenticated by a bearer key, never by
            # ambient credentials: the Host/Origin allow-list the SDK applies
            # to servers on 127.0.0.1 would refuse Cairn's public name.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=ctx.settings.max_body_bytes,
        )
        # Behind the admission layer, by what each request asks (``edge_rule``).
        listed = self.server._tool_manager.list_tools()
        writes = frozenset(
            t.name for t in listed if not (t.annotations and t.annotations.read_only_hint)
        )
        # Read tools whose REST route needs a key (my_profile, list_notifications).
        keyed_reads = frozenset(
            t.name
            for t in listed
            if t.name not in writes
            and (op := tools.operation_of(t)) is not None
            and door.policy(op).auth == "required"
        )

        # Tools whose REST route declares the API-key scope it needs (webhooks…).
        key_scopes = {
            t.name: scope
            for t in listed
            if (op := tools.operation_of(t)) is not None
            and (scope := door.policy(op).key_scope) is not None
        }

        def rule(method: str, body: bytes | None) -> admission.Policy:
            return edge_rule(method, body, writes, keyed_reads, key_scopes)

        def challenge(error: str) -> str:
            return oauth.challenge(ctx, error)

        self.write_tools = writes
        self.keyed_reads = keyed_reads
        self.routes: list[BaseRoute] = [admission.guard(r, rule, challenge) for r in app.routes]
        # The authorization server and the resource metadata (oauth.py).
        self.routes.extend(oauth.routes(ctx))
        self.manager: StreamableHTTPSessionManager = self.server.session_manager

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the SDK's session manager (its task group) for the app's lifetime,
        in a task of its own: the app's lifespan may be entered and left by
        different tasks (a test fixture), which a task group does not allow."""
        started = asyncio.Event()
        stop = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(run(), name="cairn-mcp")
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiter.cancel()
            task.result()  # raises what stopped it
        try:
            yield
        finally:
            stop.set()
            await task
