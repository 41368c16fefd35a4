"""The published contract (/openapi.json): the route class every API router
uses, the documented error answers of each operation, and stable operation ids.

Response models describe what a route sends; the JSON on the wire is what the
service built (``response_model_exclude_unset``: no field it left out is
filled in with a default, and fields beyond the model pass through, see
``schemas.common.Output``). Which error statuses an operation can return is
derived from what it depends on (a key, a rate limit, a body, path or query
parameters; every operation may answer 400, one with a path parameter 404)
plus what the route itself declares with ``errors(...)``; every operation may
answer 503 ``database_unavailable`` (with ``Retry-After``) while the
database cannot be reached; FastAPI's
422, which Cairn never sends (validation is a 400), is removed.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from serve_app.http import admission, idempotency
from serve_app.http.admission import dependants
from serve_app.schemas.common import ErrorOut

ERROR_TEXT = {
    400: "Invalid input: a body, path or query parameter that fails validation "
    "(`validation_error`), or a rule of the operation.",
    401: "Missing or invalid API key (or session, where a human signs in).",
    403: "The caller may not do this (not the owner, not staff, deactivated account, …).",
    404: "No such resource, or one the caller may not see.",
    409: "Conflicts with the current state (already exists, already done, in progress).",
    413: "The request body is too large.",
    414: "The request URI is too long (`uri_too_long`, answered by the edge).",
    415: "The request body has the wrong media type.",
    422: "Unprocessable: the `Idempotency-Key` was used before with a different request, "
    "or the content screen refused the text (`secret_detected`, `hidden_characters`, "
    "`instructions_detected`; `details` names each field, line and kind).",
    429: "Rate limit exceeded; retry after `Retry-After` seconds.",
    502: "An outside service (X, the captcha verifier) failed to answer.",
    503: "A part the operation needs is unavailable just now (`database_unavailable`: "
    "the database cannot be reached); retry after `Retry-After` seconds.",
}

_INTEGER = {"schema": {"type": "integer"}}
RATE_LIMIT_HEADERS = {
    "Retry-After": {"description": "Seconds until the window resets.", **_INTEGER},
    "X-RateLimit-Limit": {"description": "Requests allowed in the window.", **_INTEGER},
    "X-RateLimit-Remaining": {"description": "Requests left in the window.", **_INTEGER},
    "X-RateLimit-Reset": {"description": "Unix time at which the window resets.", **_INTEGER},
}
_RETRY_AFTER = {"Retry-After": RATE_LIMIT_HEADERS["Retry-After"]}


def _error_response(status: int) -> dict[str, Any]:
    out: dict[str, Any] = {"model": ErrorOut, "description": ERROR_TEXT[status]}
    if status == 429:
        out["headers"] = RATE_LIMIT_HEADERS
    elif status == 503:
        out["headers"] = _RETRY_AFTER
    return out


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: the error statuses its own rules can
    return, beyond those its dependencies imply (added by ``install``)."""
    return {status: _error_response(status) for status in statuses}


def created(**targets: tuple[str, dict[str, str]]) -> dict[str, Any]:
    """OpenAPI links of a create response, for clients and stateful fuzzers to
    follow create -> read -> update -> delete. Each target is (operation id,
    {parameter: runtime expression}), e.g.
    ``created(read=("patterns_read_pattern", {"id_or_slug": "$response.body#/data/id"}))``;
    put it in the route's ``responses={201: created(...)}``."""
    return {
        "links": {
            name: {"operationId": op, "parameters": params}
            for name, (op, params) in targets.items()
        }
    }


class ApiRoute(APIRoute):
    """Sends exactly the fields the service set (none filled in by defaults);
    stores the answer of a request sent with an ``Idempotency-Key``."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        kwargs["response_model_exclude_unset"] = True
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return idempotency.finishing(super().get_route_handler())


def api_router(**kwargs: Any) -> APIRouter:
    return APIRouter(route_class=ApiRoute, **kwargs)


def operation_id(route: APIRoute) -> str:
    """``<tag>_<function>``: stable, readable, and what OpenAPI links name."""
    return f"{route.tags[0]}_{route.name}" if route.tags else route.name


# --- statuses implied by what a route depends on ---------------------------------


def _calls(dependant: Dependant) -> Iterable[Callable[..., Any]]:
    return (d.call for d in dependants(dependant) if d.call is not None)


def _has_params(dependant: Dependant) -> tuple[bool, bool]:
    """(a path parameter, a body) anywhere in the tree."""
    tree = list(dependants(dependant))
    return any(d.path_params for d in tree), any(d.body_params for d in tree)


# Dependencies by name (closures made by a factory share its qualified name).
_KEYED = "idempotent.<locals>._gate"  # serve_app.http.idempotency.idempotent
# Idempotency-Key: malformed or, on a registration, guessable (400), in
# progress (409), reused (422).
_KEYED_STATUSES = (400, 409, 422)


def admission_statuses(policy: admission.Policy | None) -> set[int]:
    """What the admission layer may answer under ``policy``: a bad or
    missing credential (401) or a deactivated account (403), an exhausted
    budget or too many open streams (429), a full replica (503)."""
    statuses: set[int] = set()
    if policy is None:
        return statuses
    if policy.auth != "none":
        statuses.update((401, 403, 429))
    if policy.anonymous is not None or policy.limits:
        statuses.add(429)
    if policy.long_lived:
        statuses.update((429, 503))
    return statuses


REPLAYED_HEADER = {
    idempotency.REPLAYED: {
        "description": "`true` when this is the stored answer to an earlier request "
        "with the same `Idempotency-Key` (nothing was created this time).",
        "schema": {"type": "string", "enum": ["true"]},
    }
}


def is_keyed(route: APIRoute) -> bool:
    """Whether the route honours an ``Idempotency-Key``."""
    return any(getattr(call, "__qualname__", "") == _KEYED for call in _calls(route.dependant))


def implied_statuses(route: APIRoute) -> set[int]:
    statuses = admission_statuses(admission.policy_of(route.dependant))
    if is_keyed(route):
        statuses.update(_KEYED_STATUSES)
    # Every operation: the query-string guard (serve_app/http/querystring.py) and
    # the Content-Length check (http/bodylimit.py) answer 400 before any
    # route runs, whatever parameters the route itself declares.
    statuses.add(400)
    # Every operation: while the database cannot be reached, the error
    # handlers answer 503 database_unavailable with Retry-After
    # (serve_app/kit/errors.py). Each route reads or writes the database, through
    # its caller's key if not otherwise, so none is left out.
    statuses.add(503)
    # Every operation: the edge (HAProxy, serve_app/launch/haproxy_shim.py)
    # answers a request URI over MAX_URI_BYTES with a JSON 414 before any
    # replica sees it, whatever the route.
    statuses.add(414)
    path, body = _has_params(route.dependant)
    if path:
        # A path parameter names a resource (an id, a slug, a username), and
        # one that does not exist, or that the caller may not see, is a 404.
        statuses.add(404)
    if body:
        statuses.add(413)
    return statuses


def api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    """Every APIRoute, those of included routers too, as their routers hold them."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        original = getattr(route, "original_router", None)  # an included router
        if original is not None:
            yield from api_routes(original.routes)


def install(app: FastAPI) -> None:
    """Document every operation's errors and drop the 422 Cairn never sends.
    Call it once every router is included and before the first request (the
    app copies each route's ``responses`` when it first resolves its routes)."""
    for route in api_routes(app.routes):
        if route.include_in_schema:
            for status in sorted(implied_statuses(route)):
                route.responses.setdefault(status, _error_response(status))
            if is_keyed(route):
                success = route.responses.setdefault(route.status_code or 200, {})
                success.setdefault("headers", {}).update(REPLAYED_HEADER)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            for path_item in schema.get("paths", {}).values():
                for operation in path_item.values():
                    responses = operation.get("responses", {})
                    validation = responses.get("422", {})
                    if "HTTPValidationError" in str(validation.get("content", "")):
                        del responses["422"]
            components = schema.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                components.pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
