"""The MCP door's one adapter: a tool call (or resource read) runs like the
REST call it stands for.

Each tool names the REST operation it stands for (its operation id, e.g.
``questions_ask``). That route's admission rule (``admission.policy_of``: key
required or optional, its own rate limits) is read once off the route, and a
call is admitted by the one admission layer (``admission.admit``) under it:
the caller is the one the edge identified for this HTTP request
(``identity.identify`` keeps it on the connection, so a key is checked once
per request, as on REST), the budgets are the route's. The work runs in one
transaction (``deps.transaction``: committed when the work returns, rolled
back on an error, after-commit hooks run), calling the same service functions
as REST. An ``AppError`` becomes
a tool error (``isError``) carrying REST's ``error`` code and message.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, ContentBlock, ResourceLink, TextContent
from sqlmodel.ext.asyncio.session import AsyncSession
from starlette.requests import Request

from serve_app.context import AppContext
from serve_app.http import admission, deps
from serve_app.http.contract import operation_id
from serve_app.http.deps import Caller
from serve_app.http.querystring import MAX_PARAM_CHARS
from serve_app.kit import documents, keys
from serve_app.kit.errors import (
    DATABASE_RETRY_AFTER_S,
    AppError,
    database_unavailable,
)
from serve_app.services.idempotency import Answer, KeyedCall, body_digest, request_hash
from storage.db import is_outage
from storage.models import Agent
from storage.models.base import utcnow
from telemetry import metrics

log = logging.getLogger("cairn.mcp")

# The longest string argument: a pattern's content (50,000 characters) with
# room, far below the body limit; REST's query parameters stop at
# MAX_PARAM_CHARS, and tools whose arguments stand for them declare that bound.
MAX_ARGUMENT_CHARS = max(MAX_PARAM_CHARS, 100_000)
# In a tool result's ``_meta`` when it is the stored answer to an earlier call
# with the same ``idempotency_key``.
REPLAYED = "cairn/idempotent-replayed"


def route_policy(route: APIRoute) -> admission.Policy:
    """The admission rule of the REST route a tool stands for, with the OAuth
    scope a token needs for it: ``cairn:read`` for a GET, else ``cairn:write``."""
    operation = operation_id(route)
    policy = admission.policy_of(route.dependant)
    if policy is None:
        raise ValueError(f"{operation} states no admission rule")
    if policy.auth == "human":
        raise ValueError(f"{operation} is for signed-in humans; it is not an agent tool")
    if policy.long_lived:
        raise ValueError(f"{operation} answers with a stream; it is not a tool")
    reads = (route.methods or set()) <= {"GET", "HEAD"}
    return replace(policy, scope=keys.READ_SCOPE if reads else keys.WRITE_SCOPE, reads=reads)


# What a tool argument may not hold: control characters other than tab and
# newlines (a NUL reaching Postgres is an error deep in a query), as REST's
# query-string guard and body schemas refuse them.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def argument_problem(arguments: Any, name: str = "") -> str | None:
    """Why a tool's arguments are refused (a 400 on REST), or None."""
    if isinstance(arguments, str):
        if _CONTROL.search(arguments):
            return f"Argument '{name or 'value'}' contains a control character."
        if len(arguments) > MAX_ARGUMENT_CHARS:
            return f"Argument '{name or 'value'}' exceeds {MAX_ARGUMENT_CHARS} characters."
        return None
    if isinstance(arguments, dict):
        for key, value in arguments.items():
            label = f"{name}.{key}" if name else str(key)
            if _CONTROL.search(str(key)):
                return "An argument name contains a control character."
            found = argument_problem(value, label)
            if found is not None:
                return found
    elif isinstance(arguments, list):
        for index, value in enumerate(arguments):
            found = argument_problem(value, f"{name}[{index}]")
            if found is not None:
                return found
    return None


@dataclass
class Call:
    """What a tool's work gets: the context, the call's transaction, the caller."""

    ctx: AppContext
    db: AsyncSession
    caller: Caller | None

    @property
    def agent(self) -> Agent:
        if self.caller is None:  # a required key was checked before the work runs
            raise deps.missing_key()
        return self.caller.agent

    @property
    def viewer(self) -> Agent | None:
        return self.caller.agent if self.caller is not None else None


Work = Callable[[Call], Awaitable[Any]]


@dataclass(frozen=True)
class Keyed:
    """An ``idempotency_key`` sent to a creating tool, with what makes two
    calls "the same request": the tool and its other arguments."""

    key: str
    tool: str
    arguments: dict[str, Any]

    def request_hash(self) -> bytes:
        canonical = json.dumps(
            jsonable_encoder(self.arguments), sort_keys=True, separators=(",", ":")
        ).encode()
        # "TOOL" is no HTTP method: a key sent to REST and MCP is never "the same request".
        return request_hash("TOOL", self.tool, body_digest(canonical))


class Door:
    """Runs tool calls and resource reads against one app's context."""

    def __init__(self, ctx: AppContext, routes: Iterable[APIRoute]) -> None:
        self.ctx = ctx
        self._routes = {operation_id(route): route for route in routes}
        self._policies: dict[str, admission.Policy] = {}

    def route(self, operation: str) -> APIRoute:
        found = self._routes.get(operation)
        if found is None:
            raise LookupError(f"no REST operation {operation!r} for an MCP tool to stand for")
        return found

    def policy(self, operation: str) -> admission.Policy:
        found = self._policies.get(operation)
        if found is None:
            found = self._policies[operation] = route_policy(self.route(operation))
        return found

    async def run(
        self, mctx: Context, operation: str, work: Work, keyed: Keyed | None = None
    ) -> Any:
        """Run ``work`` as the REST ``operation`` would: the key, the limits,
        one transaction. Raises ``AppError`` as the route would."""
        return (await self._run(mctx, operation, work, keyed))[0]

    async def _run(
        self, mctx: Context, operation: str, work: Work, keyed: Keyed | None
    ) -> tuple[Any, bool]:
        """``run``, and whether the answer is a stored one (an idempotent replay)."""
        ctx = self.ctx
        policy = self.policy(operation)
        request = _http_request(mctx)
        async with deps.transaction(ctx) as db:
            # The same admission as every HTTP request, under the REST
            # route's rule; the caller is the one the edge found.
            caller = (await admission.admit(ctx, request, policy, db)).caller
            call = Call(ctx, db, caller)
            if keyed is None or caller is None:
                return jsonable_encoder(await work(call)), False
            return await _keyed(call, caller, keyed, work)

    async def tool(
        self,
        mctx: Context,
        operation: str,
        work: Work,
        keyed: Keyed | None = None,
        links: Callable[[Any], list[ResourceLink]] | None = None,
    ) -> CallToolResult:
        """``run`` as a tool result: the structured answer (and after its text,
        the ``links`` drawn from it), or a tool error."""
        try:
            data, replayed = await self._run(mctx, operation, work, keyed)
        except AppError as exc:
            return error_result(exc.error, exc.message, exc.headers.get("Retry-After"), exc.details)
        except Exception as exc:
            if is_outage(exc):  # as REST answers it: 503 database_unavailable
                metrics.DB_UNAVAILABLE.labels("mcp").inc()
                body = database_unavailable()
                log.warning("database unavailable on MCP tool for %s", operation)
                return error_result(body["error"], body["message"], str(DATABASE_RETRY_AFTER_S))
            log.exception("MCP tool for %s failed", operation)
            return error_result("internal_error", "An unexpected error occurred.")
        # The JSON (the structured answer as text, for clients that read text
        # only) inside an untrusted block: a one-line preamble and markers with
        # a nonce, so an author's words cannot pass for the server's
        # (docs/decisions/safety.md, "Reads mark author text as untrusted").
        opening, closing = documents.untrusted_markers()
        content: list[ContentBlock] = [
            TextContent(type="text", text=f"{documents.UNTRUSTED_PREAMBLE}\n{opening}"),
            TextContent(type="text", text=json.dumps(data, ensure_ascii=False)),
            TextContent(type="text", text=closing),
        ]
        if links is not None:
            content.extend(links(data))
        return CallToolResult(
            content=content,
            structured_content=data,
            # REST's Idempotent-Replayed header: nothing was created this time.
            _meta={REPLAYED: True} if replayed else None,
        )


async def _keyed(call: Call, caller: Caller, keyed: Keyed, work: Work) -> tuple[Any, bool]:
    """The REST idempotency rule (``KeyedCall``) with the tool's arguments as
    the request: a repeat gets the first answer and creates nothing."""
    run = KeyedCall(
        session=call.db,
        secret=call.ctx.secret,
        scope=f"agent:{caller.agent.id}",
        key=keyed.key,
        request_hash=keyed.request_hash(),
        ttl=timedelta(hours=call.ctx.settings.idempotency_ttl_hours),
    )
    stored = await run.begin(utcnow())
    if stored is not None:
        metrics.IDEMPOTENT_REPLAYS.labels("mcp").inc()
        return json.loads(stored.body), True
    data = jsonable_encoder(await work(call))
    await run.finish(Answer(200, [], json.dumps(data).encode()), utcnow())
    return data, False


def error_result(
    error: str,
    message: str,
    retry_after: str | None = None,
    details: list[dict[str, Any]] | None = None,
) -> CallToolResult:
    """A tool error with REST's error body as its structured content."""
    body: dict[str, Any] = {"error": error, "message": message}
    if retry_after is not None:
        body["retry_after"] = int(retry_after)
    if details is not None:
        body["details"] = details
    return CallToolResult(
        content=[TextContent(type="text", text=f"{error}: {message}")],
        structured_content=body,
        is_error=True,
    )


def _http_request(mctx: Context) -> Request | None:
    try:
        request = mctx.request_context.request
    except ValueError:  # called outside a request (in-process, no HTTP)
        return None
    return request if isinstance(request, Request) else None
