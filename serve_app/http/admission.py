"""The one admission layer: every request, whatever door answers it, passes
here before any work is done for it (docs/security.md, "The admission layer").

Admission is three steps, always in this order, written once (``admit``):

1. **Who is calling** (``identity``, once per HTTP request): an agent's API
   key, a human's session token or an OAuth access token a human issued for
   one of their bots (``Authorization: Bearer``; the token only where the
   rule names the scope it needs), a human's session cookie where the rule
   says so, or nobody: then the client address under the trusted-proxy rules.
2. **Their budgets**: the per-agent ``general`` limit for a known caller, a
   per-address rule (``anon_read`` unless the rule names another) for an
   anonymous one, then the route's own rules (``agent_limit``/``ip_limit``/
   ``human_limit``).
3. **Their long-lived connections** (streams): at most a few per caller and
   per address, and a fixed number per replica (``Connections``).

Each route states its rule (a ``Policy``). For FastAPI routes the rule is read
off the route's dependencies: the caller dependencies (``CurrentCaller``,
``MaybeCaller``, ``HumanCaller``, ``PublicRead``), the limit tags and the
explicit ``declare(...)``; ``gate`` (an app-wide dependency, solved first)
applies it. Other routes (the MCP transport, the API docs) are wrapped in an
``EdgeGate`` with their rule. A route with no rule is refused when the app is
built (``check``) and by a test that enumerates every route: a new door cannot
open without joining. The MCP door calls ``admit`` for each tool call with the
rule of the REST route the tool stands for.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fastapi import Depends, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from sqlmodel.ext.asyncio.session import AsyncSession
from starlette.requests import HTTPConnection
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from actors.ratelimit import Decision
from serve_app.http.identity import (
    READS,
    Caller,
    check_scope,
    client_address,
    credential,
    identify,
    missing_key,
)
from serve_app.kit import keys
from serve_app.kit.clientip import Address, limit_subject
from serve_app.kit.errors import AppError, Forbidden, RateLimited, ServiceUnavailable, Unauthorized
from serve_app.runtime.connections import Slot
from telemetry import metrics

if TYPE_CHECKING:
    from serve_app.context import AppContext

GENERAL = "general"
ANON_READ = "anon_read"
# The header an operator's monitoring sends CAIRN_OPERATOR_TOKEN in.
OPERATOR_HEADER = "x-operator-token"

Auth = Literal["none", "optional", "required", "human"]

# Where admission leaves its answer for the route (``admitted``) and the
# connection slots the outermost middleware gives back (``SlotKeeper``).
_ADMITTED = "cairn.admitted"
_SLOTS = "cairn.slots"
# ``admit``, as its refusals are counted.
_Admit = TypeVar("_Admit", bound=Callable[..., Awaitable[Any]])


# --- the rule --------------------------------------------------------------


@dataclass(frozen=True)
class LimitTag:
    """A route's own rate-limit rule: ``rule`` counted for the authenticated
    agent, the signed-in human or the client address."""

    subject: Literal["agent", "human", "ip"]
    rule: str


@dataclass(frozen=True)
class Policy:
    """A route's admission rule.

    ``auth``: ``none`` (no credential is looked at), ``optional`` (a sent key
    is checked and counts the agent's budget), ``required`` (an API key or a
    human's session token) or ``human`` (a signed-in human, token or cookie).
    ``anonymous``: the per-address rule a caller without a credential counts
    (None: only the route's own ``limits``). ``long_lived``: the answer is a
    stream that holds one of the caller's connection slots while it is open.
    ``scope``: the OAuth scope an access token needs here (None: access
    tokens are refused; they are bound to the MCP server). ``counted``: False
    where a caller is identified but their ``general`` budget not counted:
    at the MCP edge, where each call inside counts on its own, and on search,
    which counts its own per-address rule for everyone. ``reads``: the request only
    reads, whatever its method (an MCP call of read tools), so its key may be
    answered by the key cache as a GET's is. ``write_flag``: a query
    parameter that makes a GET a write when it is true (the spec's
    ``GET /api/notifications?mark_read=true``, ``writes``). ``key_scope``:
    the API-key scope the route needs whatever the method (``admin`` on the
    staff routes, ``webhooks`` on the webhook subscriptions); None: ``read``
    for a read, ``write`` for a write (docs/decisions/api-keys.md)."""

    auth: Auth
    limits: tuple[LimitTag, ...] = ()
    anonymous: str | None = ANON_READ
    long_lived: bool = False
    scope: str | None = None
    counted: bool = True
    reads: bool = False
    write_flag: str | None = None
    key_scope: str | None = None


# The MCP transport's protocol calls and the pages count the read budget.
READ = Policy("optional")
# No credential looked at; the address's read budget.
OPEN = Policy("none")
# A stream that needs a key.
KEYED_STREAM = Policy("required", long_lived=True)
# Nothing counted at the edge: each call inside is admitted on its own
# (MCP tool calls, by the rule of the REST route each stands for).
PER_CALL = Policy("none", anonymous=None)


@dataclass
class Admitted:
    """What admission found: the caller (None: anonymous), the client address
    and the ``X-RateLimit-*`` headers of the last rule counted."""

    caller: Caller | None
    ip: str
    headers: dict[str, str] = field(default_factory=dict)
    # ``ip`` as ``client_address`` parsed it (None: parse ``ip`` when needed).
    address: Address | str | None = None

    @functools.cached_property
    def ip_subject(self) -> str:
        """The per-address rate-limit key (``limit_subject``), worked out once."""
        return limit_subject(self.address if self.address is not None else self.ip)


_BOOL = TypeAdapter(bool)


def _false(value: str) -> bool:
    try:
        return _BOOL.validate_python(value) is False
    except ValidationError:
        return False


def writes(conn: HTTPConnection, policy: Policy) -> bool:
    """Whether a request is a write: any method but GET and HEAD, and a GET
    whose ``policy.write_flag`` is sent with any value but a false one (what
    the route reads as true, or refuses)."""
    if conn.scope.get("method") not in READS:
        return True
    flag = policy.write_flag
    return flag is not None and not all(_false(v) for v in conn.query_params.getlist(flag))


# --- step 2: budgets ------------------------------------------------------------


# The header names admission sets, encoded once (``raw_headers``).
_RAW_NAMES = {
    name: name.lower().encode("latin-1")
    for name in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")
}


def raw_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """``headers`` as ASGI header lines."""
    return [
        (_RAW_NAMES.get(name) or name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in headers.items()
    ]


def limit_headers(decision: Decision) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(decision.limit),
        "X-RateLimit-Remaining": str(decision.remaining),
        "X-RateLimit-Reset": str(int(decision.reset_at)),
    }


def _counted(admit: _Admit) -> _Admit:
    """Count each refusal of ``admit`` by its error code (telemetry/metrics.py)."""

    @functools.wraps(admit)
    async def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return await admit(*args, **kwargs)
        except AppError as exc:
            metrics.ADMISSION_REFUSALS.labels(exc.error).inc()
            raise

    return counted  # type: ignore[return-value]


async def charge(ctx: AppContext, rule_name: str, subject: str) -> dict[str, str]:
    """Count one hit of ``rule_name`` for ``subject``: the ``X-RateLimit-*``
    headers of the answer, or 429 when over the limit."""
    rule = ctx.rules[rule_name]
    decision = await ctx.limiter.hit(rule, subject)
    headers = limit_headers(decision)
    if not decision.allowed:
        metrics.RATE_LIMITED.labels(rule_name).inc()
        headers["Retry-After"] = str(decision.retry_after(time.time()))
        raise RateLimited(
            f"Rate limit exceeded for {rule_name.replace('_', ' ')}: {rule.limit} requests "
            f"per {rule.window_s} seconds. Retry after {headers['Retry-After']} seconds.",
            headers=headers,
        )
    return headers


@_counted
async def admit(
    ctx: AppContext,
    conn: HTTPConnection | None,
    policy: Policy,
    db: AsyncSession | None = None,
) -> Admitted:
    """Admit one request (or one MCP tool call) under ``policy``: identify the
    caller, count their budgets, and, for a long-lived answer, take one of
    their connection slots (given back when the answer ends). Raises the
    ``AppError`` to answer with (401, 403, 429, 503). ``db``: a session to
    check the key on (a new short one when None). ``conn`` None: a call from
    inside the process, with no client."""
    address = client_address(ctx, conn) if conn is not None else "unknown"
    admitted = Admitted(caller=None, ip=str(address), address=address)
    if policy.auth != "none":
        token = credential(conn, human=policy.auth == "human")
        if token is not None:
            read = policy.reads or (conn is not None and not writes(conn, policy))
            caller = await identify(ctx, conn, token, db, read)
            needed = policy.key_scope or (keys.KEY_READ if read else keys.KEY_WRITE)
            check_scope(caller, policy.scope, needed)
            if policy.auth == "human" and (not caller.agent.is_human or caller.session is None):
                raise Forbidden(
                    "A human must do this, signed in with a session (not an agent's API key).",
                    error="human_required",
                )
            admitted.caller = caller
            if policy.counted:
                admitted.headers = await charge(ctx, GENERAL, str(caller.agent.id))
        elif policy.auth == "required":
            raise missing_key()
    if admitted.caller is None and policy.anonymous is not None:
        admitted.headers = await charge(ctx, policy.anonymous, admitted.ip_subject)
    for tag in policy.limits:
        if tag.subject == "ip":
            subject = admitted.ip_subject
        elif admitted.caller is None:
            raise Unauthorized("This needs an API key.", error="missing_api_key")
        else:
            subject = str(admitted.caller.agent.id)
        admitted.headers = await charge(ctx, tag.rule, subject)
    if policy.long_lived and conn is not None:
        slots: list[Slot] | None = conn.scope.get(_SLOTS)
        if slots is None:  # no SlotKeeper around the app: nobody would give it back
            raise ServiceUnavailable("This server takes no long-lived connections.")
        slots.append(ctx.connections.take(_holder(admitted), admitted.ip_subject))
    return admitted


def _holder(admitted: Admitted) -> str:
    caller = admitted.caller
    return f"agent:{caller.agent.id}" if caller is not None else admitted.ip_subject


def is_operator(ctx: AppContext, conn: HTTPConnection) -> bool:
    """True when the request carries CAIRN_OPERATOR_TOKEN (compared in
    constant time; never true while the setting is unset)."""
    configured = ctx.settings.operator_token
    sent = conn.headers.get(OPERATOR_HEADER)
    if configured is None or not sent:
        return False
    return hmac.compare_digest(sent.encode(), configured.get_secret_value().encode())


# --- step 3: long-lived connections ----------------------------------------------


class SlotKeeper:
    """The outermost middleware: gives back the connection slots a request
    took once its answer has ended (sent, failed or abandoned by the client),
    whichever door admitted it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        slots: list[Slot] = []
        scope[_SLOTS] = slots
        try:
            await self.app(scope, receive, send)
        finally:
            for slot in slots:
                slot.release()


# --- the rule of each route ----------------------------------------------------


_POLICY_ATTR = "cairn_policy"
_TAG_ATTR = "cairn_limit"
_WRITE_FLAG_ATTR = "cairn_write_flag"
_KEY_SCOPE_ATTR = "cairn_key_scope"


def admitted(request: Request) -> Admitted:
    """What admission found for this request (``gate`` ran first)."""
    found: Admitted | None = request.scope.get(_ADMITTED)
    if found is None:  # a route that escaped the gate: refuse rather than guess
        raise Forbidden("This request was not admitted.", error="not_admitted")
    return found


# The caller dependencies: what a route asks for states its rule; ``gate``
# has already admitted the caller when these run.


async def require_caller(request: Request) -> Caller:
    """The authenticated agent (an API key or a human's session token)."""
    caller = admitted(request).caller
    if caller is None:
        raise missing_key()
    return caller


async def optional_caller(request: Request) -> Caller | None:
    """The caller when a key was sent, else None (counted by address)."""
    return admitted(request).caller


async def read_limit(request: Request) -> None:
    """A public read that does not look at the caller: a sent key is still
    checked and counts the agent's budget, no key counts the address's."""
    admitted(request)


async def require_human(request: Request) -> Caller:
    """A signed-in human: a session token as Bearer, or the session cookie."""
    caller = admitted(request).caller
    if caller is None:
        raise Unauthorized(
            "Sign in as a human first (POST /api/humans/login).", error="not_signed_in"
        )
    return caller


async def long_lived() -> None:
    """Marks a route whose answer is a stream: it holds a connection slot."""


def _tagged(dep: Callable[..., Awaitable[None]], attr: str, value: object) -> Any:
    setattr(dep, attr, value)
    return dep


def declare(policy: Policy) -> Any:
    """A route's explicit rule (for a route that takes no caller dependency)."""

    async def _declared() -> None:
        return None

    return Depends(_tagged(_declared, _POLICY_ATTR, policy))


def limit(subject: Literal["agent", "human", "ip"], rule_name: str) -> Any:
    """A dependency marking ``rule_name`` as one of the route's own rules."""

    async def _rule() -> None:
        return None

    return _tagged(_rule, _TAG_ATTR, LimitTag(subject, rule_name))


def write_flag(name: str) -> Any:
    """A dependency marking the query parameter ``name`` as one that makes the
    route's GET a write when true (``Policy.write_flag``)."""

    async def _flag() -> None:
        return None

    return _tagged(_flag, _WRITE_FLAG_ATTR, name)


def key_scope(scope: str) -> Any:
    """A dependency marking the API-key scope a route needs whatever its
    method (``Policy.key_scope``): on a router's ``dependencies`` it marks
    each of its routes."""
    if scope not in keys.KEY_SCOPES:
        raise ValueError(f"unknown API key scope {scope!r}")

    async def _scope() -> None:
        return None

    return Depends(_tagged(_scope, _KEY_SCOPE_ATTR, scope))


def limit_tag(call: object) -> LimitTag | None:
    tag = getattr(call, _TAG_ATTR, None)
    return tag if isinstance(tag, LimitTag) else None


def dependants(root: Dependant) -> Iterator[Dependant]:
    """A route's dependency tree, the route itself included."""
    stack = [root]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.dependencies)


def policy_of(dependant: Dependant) -> Policy | None:
    """The rule a FastAPI route states through its dependencies (None: none)."""
    calls = [d.call for d in dependants(dependant) if d.call is not None]
    declared = [p for c in calls if isinstance(p := getattr(c, _POLICY_ATTR, None), Policy)]
    tags: list[LimitTag] = []
    for call in calls:
        tag = limit_tag(call)
        if tag is not None and tag not in tags:
            tags.append(tag)
    if declared:
        base = declared[0]
    elif require_human in calls:
        base = Policy("human")
    elif require_caller in calls:
        base = Policy("required")
    elif optional_caller in calls or read_limit in calls:
        base = Policy("optional")
    elif tags:
        # Routes such as registration and login count their own per-address rule.
        base = Policy("none", anonymous=None)
    else:
        return None
    flags = [f for c in calls if isinstance(f := getattr(c, _WRITE_FLAG_ATTR, None), str)]
    scopes = [f for c in calls if isinstance(f := getattr(c, _KEY_SCOPE_ATTR, None), str)]
    return replace(
        base,
        limits=base.limits + tuple(t for t in tags if t not in base.limits),
        long_lived=base.long_lived or long_lived in calls,
        write_flag=base.write_flag or (flags[0] if flags else None),
        key_scope=base.key_scope or (scopes[0] if scopes else None),
    )


# By dependant id (an unhashable dataclass; the entry keeps it alive).
_POLICIES: dict[int, tuple[Dependant, Policy | None]] = {}


def route_policy(route: object) -> Policy | None:
    """The rule of a matched FastAPI route, worked out once per route."""
    dependant: Dependant | None = getattr(route, "dependant", None)
    if dependant is None:
        return None
    cached = _POLICIES.get(id(dependant))
    if cached is None:
        cached = _POLICIES[id(dependant)] = (dependant, policy_of(dependant))
    return cached[1]


async def gate(request: Request, response: Response) -> None:
    """Admission for every FastAPI route (installed on the whole app, solved
    before the route's own dependencies)."""
    policy = route_policy(request.scope.get("route"))
    if policy is None:
        raise Forbidden("This route declares no admission rule.", error="not_admitted")
    found = await admit(request.app.state.ctx, request, policy)
    request.scope[_ADMITTED] = found
    if found.headers:
        # Admission runs first: none of these is set yet, so the lines are
        # added as they are (MutableHeaders.update looks for each one first).
        response.headers.raw.extend(raw_headers(found.headers))


# --- routes that are not FastAPI routes -----------------------------------------

# Given the request's method and, for a POST, its body: the rule to apply.
Classifier = Callable[[str, bytes | None], Policy]


class EdgeGate:
    """Admission in front of a route FastAPI does not run (the MCP transport,
    the API docs): the same ``admit``, then the route with the rate-limit
    headers added to its answer. ``rule`` is a fixed ``Policy`` or a
    ``Classifier`` that reads the (already size-limited) body first.
    ``challenge``: the ``WWW-Authenticate`` value a refusal (401, or 403
    ``insufficient_scope``) of this door carries, given the error code."""

    def __init__(
        self,
        app: ASGIApp,
        rule: Policy | Classifier,
        challenge: Callable[[str], str] | None = None,
    ) -> None:
        self.app = app
        self.rule = rule
        self.challenge = challenge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method", "GET")
        body: bytes | None = None
        if isinstance(self.rule, Policy):
            policy = self.rule
        else:
            if method == "POST":
                body, receive = await _buffered(receive)
            policy = self.rule(method, body)
        conn = HTTPConnection(scope)
        try:
            found = await admit(scope["app"].state.ctx, conn, policy)
        except (Unauthorized, Forbidden) as exc:
            if self.challenge is not None and (
                exc.status == 401 or exc.error == "insufficient_scope"
            ):
                exc.headers["WWW-Authenticate"] = self.challenge(exc.error)
            raise
        scope[_ADMITTED] = found
        extra = raw_headers(found.headers)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        if policy.long_lived:
            max_age = scope["app"].state.ctx.settings.stream_max_age_s
            await _until(self.app, max_age, scope, receive, send_with_headers)
        else:
            await self.app(scope, receive, send_with_headers)


async def _until(app: ASGIApp, seconds: float, scope: Scope, receive: Receive, send: Send) -> None:
    """Run ``app`` for at most ``seconds``: then it is cancelled, and an answer
    it had begun is ended with its last (empty) chunk. A stream admitted once
    lasts no longer than ``stream_max_age_s``, as the notification stream does:
    the client reconnects and is admitted again, so a revoked key or a
    deactivated account stops there and gives back its connection slot."""
    started = ended = False

    async def tracked(message: Message) -> None:
        nonlocal started, ended
        if message["type"] == "http.response.start":
            started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            ended = True
        await send(message)

    try:
        await asyncio.wait_for(app(scope, receive, tracked), timeout=seconds)
    except TimeoutError:
        if started and not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """Read the whole body (its size is bounded by the body-limit middleware)
    and a ``receive`` that hands it over again."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"", receive  # the client left
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def guard(
    route: BaseRoute, rule: Policy | Classifier, challenge: Callable[[str], str] | None = None
) -> BaseRoute:
    """Put a non-FastAPI route behind admission with ``rule`` (and the
    ``challenge`` its refusals carry)."""
    if not isinstance(route, Route | Mount):
        raise TypeError(f"cannot guard {route!r}")
    route.app = EdgeGate(route.app, rule, challenge)
    return route


def edge_rule(route: BaseRoute) -> Policy | Classifier | None:
    """The rule an ``EdgeGate`` applies to a non-FastAPI route (None: unguarded)."""
    app = getattr(route, "app", None)
    return app.rule if isinstance(app, EdgeGate) else None


def unruled(routes: Iterable[BaseRoute]) -> list[str]:
    """Every route (included routers' and mounted apps' too) that states no
    admission rule, as 'METHODS path'."""
    missing: list[str] = []
    for route in routes:
        original = getattr(route, "original_router", None)  # an included router
        if original is not None:
            missing.extend(unruled(original.routes))
        elif isinstance(route, APIRoute):
            if policy_of(route.dependant) is None:
                missing.append(f"{','.join(sorted(route.methods or ()))} {route.path}")
        elif edge_rule(route) is None:
            methods = ",".join(sorted(getattr(route, "methods", None) or ())) or "*"
            missing.append(f"{methods} {getattr(route, 'path', repr(route))}")
    return missing


def check(routes: Iterable[BaseRoute]) -> None:
    """Refuse to build an app with a route that states no admission rule."""
    missing = unruled(routes)
    if missing:
        raise RuntimeError(
            "Routes without an admission rule (serve_app/http/admission.py): " + "; ".join(missing)
        )
