"""The app's error handlers: every error answer in the one shape
``{"error", "message"}`` (the error types are in serve_app/kit/errors.py)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg import Error as DriverError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from serve_app.kit.errors import (
    DATABASE_RETRY_AFTER_S,
    AppError,
    database_unavailable,
    error_body,
)
from storage.db import is_outage
from telemetry import metrics

log = logging.getLogger("cairn.errors")

_HTTP_ERRORS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


def describe_validation(errors: list[Any]) -> str:
    """A validation failure in one line: the first five problems, where and what."""
    parts = []
    for err in errors[:5]:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
        where = ".".join(loc) or "body"
        kind = err.get("type", "")
        if kind == "json_invalid":
            parts.append("request body is not valid JSON")
        elif kind == "extra_forbidden":
            parts.append(f"{where}: unknown field")
        elif kind == "missing":
            parts.append(f"{where}: field required")
        else:
            parts.append(f"{where}: {err.get('msg', 'invalid value')}")
    more = len(errors) - 5
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AppError)
    async def _app_error(_: Request, exc: AppError) -> JSONResponse:
        extra = {"details": exc.details} if exc.details is not None else {}
        return JSONResponse(
            error_body(exc.error, exc.message, **extra), status_code=exc.status, headers=exc.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            error_body("validation_error", describe_validation(list(exc.errors()))), status_code=400
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        error = _HTTP_ERRORS.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else error.replace("_", " ")
        return JSONResponse(
            error_body(error, message),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    async def _database(request: Request, exc: Exception) -> JSONResponse:
        # An unreachable database is not a bug in the request: 503, so clients
        # and load balancers retry. Anything else (a bad statement, a
        # constraint violation) goes on to the 500 handler below, as before.
        if not is_outage(exc):
            raise exc
        metrics.DB_UNAVAILABLE.labels("http").inc()
        log.warning(
            "database unavailable on %s %s (%s)",
            request.method,
            request.url.path,
            type(getattr(exc, "orig", None) or exc).__name__,
        )
        return JSONResponse(
            database_unavailable(),
            status_code=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )

    # SQLAlchemy's wrapped driver errors, the pool's timeout, and psycopg's
    # own (the hot paths that run SQL straight through psycopg, storage.db.fetch_one).
    for kind in (DBAPIError, PoolTimeout, DriverError):
        app.add_exception_handler(kind, _database)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return JSONResponse(
            error_body("internal_error", "An unexpected error occurred."), status_code=500
        )
