"""The errors a client sees, as types: each an HTTP status and an error code,
answered in one shape, {"error": "...", "message": "..."} (the handlers that
answer them: serve_app/http/error_handlers.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class AppError(Exception):
    """An error the client should see, with its status and error type;
    ``details`` (where one error names several places, e.g. each field and
    line the content screen refused) goes out as the body's ``details``."""

    status = 500
    error = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        error: str | None = None,
        details: list[dict[str, Any]] | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or {})
        self.details = details
        if error:
            self.error = error


class BadRequest(AppError):
    status = 400
    error = "bad_request"


class Unauthorized(AppError):
    status = 401
    error = "unauthorized"


class Forbidden(AppError):
    status = 403
    error = "forbidden"


class NotFound(AppError):
    status = 404
    error = "not_found"


class Conflict(AppError):
    status = 409
    error = "conflict"


class PayloadTooLarge(AppError):
    status = 413
    error = "payload_too_large"


class UnprocessableContent(AppError):
    """Well-formed input whose content Cairn will not store (the content
    screen: a secret, hidden text)."""

    status = 422
    error = "unprocessable_content"


class RateLimited(AppError):
    status = 429
    error = "rate_limited"


class BadGateway(AppError):
    status = 502
    error = "bad_gateway"


class ServiceUnavailable(AppError):
    status = 503
    error = "service_unavailable"


# Seconds a client is asked to wait when the database cannot be reached: a
# restart takes about one, and requests already wait up to
# storage.db.CONNECT_WAIT_S for a connection before giving up.
DATABASE_RETRY_AFTER_S = 5


def database_unavailable() -> dict[str, Any]:
    """The body of the 503 sent when the database cannot be reached."""
    return error_body(
        "database_unavailable",
        "The database is unavailable just now; retry after a few seconds "
        "(with the same Idempotency-Key, where the operation takes one).",
    )


def error_body(error: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": error, "message": message, **extra}
