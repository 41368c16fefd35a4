"""The MCP door's one adapter: a tool call (or resource read) runs like the
REST call it stands for.

Each tool names the REST operation it stands for (its operation id, e.g.
``questions_ask``). What that route checks before it runs is read once, when
the app is built, off the route's dependency tree (``deps.dependants``):
whether it needs a key (``require_caller``), takes one optionally
(``optional_caller``/``read_limit``: anonymous callers count the per-IP
``anon_read`` limit) or never looks at one, and which rate-limit rules its
``agent_limit``/``ip_limit`` dependencies count (``deps.limit_tag``). The rule
list is never written twice.

A call then runs in one transaction (``deps.transaction``: committed when the
work returns, rolled back on an error, after-commit hooks run), with the same
key check (``deps.authenticate``), limits (``deps.check_limit``) and client
address (``deps.request_ip``, trusted proxies) as REST, and calls the same
service functions. An ``AppError`` becomes a tool error (``isError``) carrying
REST's ``error`` code and message.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from sqlmodel.ext.asyncio.session import AsyncSession
from starlette.requests import Request

from serve_app import deps
from serve_app.clientip import limit_subject
from serve_app.context import AppContext
from serve_app.contract import operation_id
from serve_app.deps import Caller, LimitTag
from serve_app.errors import (
    DATABASE_RETRY_AFTER_S,
    AppError,
    Unauthorized,
    database_unavailable,
)
from serve_app.services.idempotency import Answer, KeyedCall, body_digest, request_hash
from storage.db import is_outage
from storage.models import Agent
from storage.models.base import utcnow

log = logging.getLogger("cairn.mcp")

Auth = Literal["required", "optional", "none"]
# In a tool result's ``_meta`` when it is the stored answer to an earlier call
# with the same ``idempotency_key``.
REPLAYED = "cairn/idempotent-replayed"


@dataclass(frozen=True)
class RouteRules:
    """What the REST route a tool stands for checks before its handler runs."""

    operation: str
    auth: Auth
    limits: tuple[LimitTag, ...]


def route_rules(route: APIRoute) -> RouteRules:
    """Read a route's key requirement and rate limits off its dependencies."""
    calls = [d.call for d in deps.dependants(route.dependant) if d.call is not None]
    operation = operation_id(route)
    if deps.require_human in calls:
        raise ValueError(f"{operation} is for signed-in humans; it is not an agent tool")
    auth: Auth = "none"
    if deps.require_caller in calls or deps.authenticate_briefly in calls:
        auth = "required"
    elif deps.optional_caller in calls or deps.read_limit in calls:
        auth = "optional"
    limits: list[LimitTag] = []
    for call in calls:
        tag = deps.limit_tag(call)
        if tag is not None and tag not in limits:
            limits.append(tag)
    return RouteRules(operation, auth, tuple(limits))


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
        self._rules: dict[str, RouteRules] = {}

    def route(self, operation: str) -> APIRoute:
        found = self._routes.get(operation)
        if found is None:
            raise LookupError(f"no REST operation {operation!r} for an MCP tool to stand for")
        return found

    def rules(self, operation: str) -> RouteRules:
        found = self._rules.get(operation)
        if found is None:
            found = self._rules[operation] = route_rules(self.route(operation))
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
        rules = self.rules(operation)
        request = _http_request(mctx)
        header = request.headers.get("authorization") if request is not None else None
        ip = await deps.request_ip(request, ctx) if request is not None else "unknown"
        async with deps.transaction(ctx) as db:
            caller: Caller | None = None
            if rules.auth != "none":
                token = deps.bearer_token(header)
                if token is not None:
                    caller = await deps.authenticate(ctx, db, token)
                    await deps.check_limit(ctx, "general", str(caller.agent.id))
                elif rules.auth == "required":
                    raise deps.missing_key()
                else:
                    await deps.check_limit(ctx, deps.ANON_READ, limit_subject(ip))
            for tag in rules.limits:
                if tag.subject == "ip":
                    await deps.check_limit(ctx, tag.rule, limit_subject(ip))
                elif caller is not None:
                    await deps.check_limit(ctx, tag.rule, str(caller.agent.id))
                else:
                    raise Unauthorized("This tool needs an API key.", error="missing_api_key")
            call = Call(ctx, db, caller)
            if keyed is None or caller is None:
                return jsonable_encoder(await work(call)), False
            return await _keyed(call, caller, keyed, work)

    async def tool(
        self, mctx: Context, operation: str, work: Work, keyed: Keyed | None = None
    ) -> CallToolResult:
        """``run`` as a tool result: the structured answer, or a tool error."""
        try:
            data, replayed = await self._run(mctx, operation, work, keyed)
        except AppError as exc:
            return error_result(exc.error, exc.message, exc.headers.get("Retry-After"))
        except Exception as exc:
            if is_outage(exc):  # as REST answers it: 503 database_unavailable
                body = database_unavailable()
                log.warning("database unavailable on MCP tool for %s", operation)
                return error_result(body["error"], body["message"], str(DATABASE_RETRY_AFTER_S))
            log.exception("MCP tool for %s failed", operation)
            return error_result("internal_error", "An unexpected error occurred.")
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
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
        return json.loads(stored.body), True
    data = jsonable_encoder(await work(call))
    await run.finish(Answer(200, [], json.dumps(data).encode()), utcnow())
    return data, False


def error_result(error: str, message: str, retry_after: str | None = None) -> CallToolResult:
    """A tool error with REST's error body as its structured content."""
    body: dict[str, Any] = {"error": error, "message": message}
    if retry_after is not None:
        body["retry_after"] = int(retry_after)
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
