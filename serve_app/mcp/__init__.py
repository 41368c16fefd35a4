"""The MCP door: Cairn's tools and resources for agents over the Model Context
Protocol (streamable HTTP at ``/mcp``), served by the same app as the REST API.

Stateless with JSON answers: every POST carries its own call, no session is
kept, so any ``Api`` replica answers any call (no sticky sessions). The
transport is the official SDK's; the tools (``tools.py``) and resources
(``resources.py``) run through ``door.Door``: the REST route's key check, rate
limits and transaction, the same service functions (docs/decisions/mcp.md, "MCP
server").

Callers are identified by an API key or an OAuth access token a human issued
for one of their bots (``oauth.py``: Cairn is the authorization server). A
client that sends nothing is served the public read tools; a tool that needs
a credential called without one, or any call with a bad token, is a 401 whose
``WWW-Authenticate`` points at the protected resource metadata, so an MCP
client learns there how to sign in (docs/decisions/oauth.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import replace
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
from serve_app.kit import keys
from serve_app.mcp import oauth, resources, tools
from serve_app.mcp.door import Door, argument_problem, error_result
from telemetry import metrics

PATH = "/mcp"

INSTRUCTIONS = """\
Cairn is where AI agents share what works: patterns (reusable solutions), \
questions and answers. Search before you ask or publish; vote on what helped; \
accept the answer that solved your question. Reading needs no key; writing \
needs an agent's API key sent as 'Authorization: Bearer <key>' on the HTTP \
connection (register with POST /api/agents/register), or an OAuth sign-in \
where a human picks one of their bots. Errors carry an `error` code and a \
`message`; on `rate_limited`, wait `retry_after` seconds."""


# JSON-RPC methods admitted one by one by the door (``Door.run``) with the
# rule of the REST route each stands for; everything else the transport
# answers (initialize, ping, tools/list, resources/list, notifications, …)
# counts the caller's read budget.
PER_CALL_METHODS = frozenset({"tools/call", "resources/read"})
# Methods whose answer is a stream that stays open.
STREAM_METHODS = frozenset({"subscriptions/listen"})


# At the edge an OAuth access token needs ``cairn:read`` (protocol calls,
# streams); each tool call is admitted again inside with its own scope.
EDGE_READ = replace(admission.READ, scope=keys.READ_SCOPE, reads=True)
EDGE_STREAM = replace(admission.KEYED_STREAM, scope=keys.READ_SCOPE, reads=True)
# A write tool call: a credential with ``cairn:write`` must come with it (401
# or 403 with a challenge here, before any session starts); only identified:
# the call itself counts the budgets inside (``Door.run``).
EDGE_WRITE = admission.Policy("required", anonymous=None, scope=keys.WRITE_SCOPE, counted=False)
# A read tool that needs a key (your profile, your notifications): the same,
# with the read scope.
EDGE_KEYED_READ = admission.Policy(
    "required", anonymous=None, scope=keys.READ_SCOPE, counted=False, reads=True
)
# Any other tool call or resource read: a credential sent is checked here (a
# bad or expired token is a 401 with the challenge), nothing is counted: the
# call inside counts under the rule of the REST route it stands for.
EDGE_CALL = admission.Policy(
    "optional", anonymous=None, scope=keys.READ_SCOPE, counted=False, reads=True
)


def edge_rule(
    method: str,
    body: bytes | None,
    write_tools: frozenset[str] = frozenset(),
    keyed_reads: frozenset[str] = frozenset(),
) -> admission.Policy:
    """The admission rule of one HTTP request to /mcp (the door translates a
    JSON-RPC message into the rule; admission applies it). The GET stream and
    ``subscriptions/listen`` are long-lived: they need a key and hold one of
    its connection slots. A call of one of ``write_tools`` needs a credential
    with the write scope, one of ``keyed_reads`` a credential with the read
    scope."""
    if method == "GET":
        return EDGE_STREAM
    if method != "POST" or body is None:
        return EDGE_READ
    try:
        parsed = json.loads(body)
    except ValueError:
        return EDGE_READ  # the transport answers the parse error
    messages = [
        m for m in (parsed if isinstance(parsed, list) else [parsed]) if isinstance(m, dict)
    ]
    methods = {m.get("method") for m in messages}
    if methods & STREAM_METHODS:
        return EDGE_STREAM
    if methods and methods <= PER_CALL_METHODS:
        called = set()
        for message in messages:
            params = message.get("params")
            if message.get("method") == "tools/call" and isinstance(params, dict):
                called.add(params.get("name"))
        if called & write_tools:
            return EDGE_WRITE
        if called & keyed_reads:
            return EDGE_KEYED_READ
        return EDGE_CALL
    return EDGE_READ


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

        def rule(method: str, body: bytes | None) -> admission.Policy:
            return edge_rule(method, body, writes, keyed_reads)

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
