"""The ``Idempotency-Key`` header on REST routes: a thin adapter over
``services.idempotency.KeyedCall``.

A route opts in with ``dependencies=[..., idempotent(CurrentCaller)]`` (or
``HumanCaller``, or ``idempotent()`` for an anonymous registration, whose key
must be unguessable: it alone guards the stored answer). That
dependency runs once the caller and the request's transaction are known:
it takes the key's lock and looks it up, and either lets the handler run or
stops it with the stored answer. ``finishing`` (installed on every route by
``contract.ApiRoute``) then stores the answer the client is about to get,
byte for byte, in the same transaction, which the ``Db`` dependency commits
after the handler returns. Without the header nothing of this runs.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Annotated, Any

from fastapi import Depends, Header, Request, Response
from fastapi.params import Depends as DependsParam

from serve_app.http.deps import Caller, Ctx, Db
from serve_app.services.idempotency import (
    KEY_MAX_LENGTH,
    KEY_PATTERN,
    Answer,
    KeyedCall,
    body_digest,
    request_hash,
    require_strong_key,
)
from storage.models.base import utcnow
from telemetry import metrics

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"

_KEY_RULES = (
    "The same key with a different request is a 422, a retry while the first is "
    "still running a 409."
)
_EXAMPLE = "5f0c4b1e-8a4e-4c1d-9a57-0d3c2b8f6e21"

KeyHeader = Annotated[
    str | None,
    Header(
        alias=HEADER,
        min_length=1,
        max_length=KEY_MAX_LENGTH,
        pattern=KEY_PATTERN,
        description=(
            "Makes a retry safe: a request sent again with the same key (by the same "
            "caller, within CAIRN_IDEMPOTENCY_TTL_HOURS, 24 by default) gets the first "
            "answer again, with the header `Idempotent-Replayed: true`, and creates "
            "nothing. 1 to 255 printable ASCII characters; send a fresh random UUID "
            "(version 4) per new request. " + _KEY_RULES
        ),
        examples=[_EXAMPLE],
    ),
]

# On a route without an API key (a registration) the key is the only proof
# that a retry comes from whoever sent the first request.
AnonymousKeyHeader = Annotated[
    str | None,
    Header(
        alias=HEADER,
        min_length=1,
        max_length=KEY_MAX_LENGTH,
        pattern=KEY_PATTERN,
        description=(
            "Makes a retry safe: a request sent again with the same key (from any "
            "address, within CAIRN_IDEMPOTENCY_TTL_HOURS, 24 by default) gets the first "
            "answer again, new credentials included, with the header "
            "`Idempotent-Replayed: true`, and creates nothing. The key alone guards that "
            "answer, so it must be unguessable: send a fresh random UUID (version 4) per "
            "new request (or at least 32 random characters of A-Z, a-z, 0-9, `_`, `-`); "
            "anything else is a 400 `weak_idempotency_key`. " + _KEY_RULES
        ),
        examples=[_EXAMPLE],
    ),
]

# Headers of the first answer that belong to that moment, not to the answer.
_NOT_STORED = {"content-length", "date", "server", "retry-after"}
_STATE_CALL = "idempotency_call"
_STATE_BODY = "idempotency_body"


class _Replay(Exception):
    """Stops the handler: the key was used before, here is its answer."""

    def __init__(self, answer: Answer, current: Response) -> None:
        super().__init__("replay")
        self.answer = answer
        # This request's own headers (its rate-limit counts) go out as well.
        self.current = [
            (name, value)
            for name, value in current.headers.items()
            if not name.startswith("content-")
        ]


def note_body(request: Request, *parts: bytes) -> None:
    """For a body the route reads itself (a multipart upload, whose boundary
    changes on every retry): what of it makes two requests the same. Hashed
    only when the request carries a key."""
    setattr(request.state, _STATE_BODY, parts)


async def _fingerprint(request: Request) -> bytes:
    parts: tuple[bytes, ...] | None = getattr(request.state, _STATE_BODY, None)
    if parts is not None:
        digest = body_digest(*parts)
    else:
        raw = await request.body()
        try:
            # Key order and spacing do not make a JSON body a different request.
            canonical = json.dumps(
                json.loads(raw), sort_keys=True, separators=(",", ":"), ensure_ascii=False
            ).encode()
        except ValueError:
            canonical = raw
        digest = body_digest(canonical)
    target = request.url.path
    if request.url.query:
        target += "?" + request.url.query
    return request_hash(request.method, target, digest)


def _scope(request: Request, who: Caller | None) -> str:
    if who is not None:
        return f"agent:{who.agent.id}"
    # Anonymous: the key is the proof (require_strong_key), not the address,
    # which other clients may share (a NAT) and the sender may change.
    route = request.scope.get("route")
    return f"anon:{getattr(route, 'path', request.url.path)}"


def idempotent(caller: Any = None) -> DependsParam:
    """The dependency that makes a creating route honour ``Idempotency-Key``.
    ``caller`` is the route's own caller dependency (``CurrentCaller``,
    ``HumanCaller``, …: the same annotation, so it is solved once); keys are
    scoped to that caller. With None (a registration, no API key) the key must
    be unguessable and is scoped to the route alone: whoever holds it gets the
    stored answer, from any address."""

    async def _gate(
        request: Request,
        response: Response,
        ctx: Any,
        db: Any,
        who: Caller | None = None,
        key: str | None = None,
    ) -> None:
        if key is None:
            return
        if who is None:
            require_strong_key(key)
        call = KeyedCall(
            session=db,
            secret=ctx.secret,
            scope=_scope(request, who),
            key=key,
            request_hash=await _fingerprint(request),
            ttl=timedelta(hours=ctx.settings.idempotency_ttl_hours),
        )
        stored = await call.begin(utcnow())
        if stored is not None:
            raise _Replay(stored, response)
        setattr(request.state, _STATE_CALL, call)

    # FastAPI reads the parameters from the signature: the caller's annotation
    # is only known here.
    param = inspect.Parameter
    params = [
        param("request", param.POSITIONAL_OR_KEYWORD, annotation=Request),
        param("response", param.POSITIONAL_OR_KEYWORD, annotation=Response),
        param("ctx", param.POSITIONAL_OR_KEYWORD, annotation=Ctx),
        param("db", param.POSITIONAL_OR_KEYWORD, annotation=Db),
    ]
    if caller is not None:
        params.append(param("who", param.POSITIONAL_OR_KEYWORD, annotation=caller))
    header = KeyHeader if caller is not None else AnonymousKeyHeader
    params.append(param("key", param.POSITIONAL_OR_KEYWORD, annotation=header, default=None))
    _gate.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return Depends(_gate)


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def finishing(handler: Handler) -> Handler:
    """Wrap a route's request handler: a replay becomes the stored answer; a
    keyed request's successful answer is stored before the transaction (still
    open here: the ``Db`` dependency commits once this returns) commits."""

    async def run(request: Request) -> Response:
        try:
            response = await handler(request)
        except _Replay as replay:
            answer = replay.answer
            out = Response(content=answer.body, status_code=answer.status)
            for name, value in [*replay.current, *answer.headers]:
                out.headers.append(name, value)
            out.headers[REPLAYED] = "true"
            metrics.IDEMPOTENT_REPLAYS.labels("rest").inc()
            return out
        call: KeyedCall | None = getattr(request.state, _STATE_CALL, None)
        if call is not None:
            headers = [
                (name, value)
                for name, value in response.headers.items()
                if name not in _NOT_STORED and not name.startswith("x-ratelimit-")
            ]
            await call.finish(Answer(response.status_code, headers, bytes(response.body)), utcnow())
        return response

    return run
