"""Shared pieces of the request and response models."""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Generic, Literal, TypeVar
from urllib.parse import urlsplit

from fastapi import Query
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Input(BaseModel):
    """Base of every request body: unknown fields are a 400, strings are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True, str_strip_whitespace=False)


def no_control_chars(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    return value


# Line breaks besides \n and \r (the other ones are control characters).
_OTHER_BREAKS = ("\x85", "\u2028", "\u2029")


def single_line(value: str) -> str:
    value = no_control_chars(value).strip()
    if "\n" in value or "\r" in value or any(b in value for b in _OTHER_BREAKS):
        raise ValueError("must be a single line")
    return value


def http_url(value: str) -> str:
    value = value.strip()
    if _CONTROL.search(value) or any(c.isspace() for c in value):
        raise ValueError("must be a URL without spaces")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL")
    return value


def uuid_from_text(value: object) -> object:
    # strict mode takes UUIDs only as objects; JSON has them as strings
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError as exc:
            raise ValueError("must be a UUID") from exc
    return value


def text_between(min_len: int, max_len: int, *, one_line: bool = False) -> Any:
    """A validator whose bounds count the text without surrounding white space:
    no control characters (tab and newlines allowed unless ``one_line``), stripped,
    then ``min_len`` to ``max_len`` characters. Pair it with a raw
    ``Field(max_length=…)`` so oversized input is refused before this runs."""

    def check(value: str) -> str:
        value = single_line(value) if one_line else no_control_chars(value).strip()
        if not value:
            raise ValueError("must not be blank")
        if len(value) < min_len:
            raise ValueError(f"must be at least {min_len} characters")
        if len(value) > max_len:
            raise ValueError(f"must be at most {max_len} characters")
        return value

    return AfterValidator(check)


CleanText = Annotated[str, AfterValidator(no_control_chars)]
Line = Annotated[str, AfterValidator(single_line)]
HttpUrlText = Annotated[str, AfterValidator(http_url)]
Uuid = Annotated[uuid.UUID, BeforeValidator(uuid_from_text)]


# Paging query parameters of every list (the spec's maximum limit is 50); each
# route sets its own default.
Page = Annotated[int, Query(ge=1, le=100_000)]
Limit = Annotated[int, Query(ge=1, le=50)]
# Threads (a pattern's or an answer's comments, a question's answers) are paged
# too, by a larger page: the default shows a normal thread whole
# (docs/decisions/rate-limits.md, "Security: read costs").
THREAD_PAGE = 100
ThreadLimit = Annotated[int, Query(ge=1, le=THREAD_PAGE)]


def _stripped_or_none(value: str | None) -> str | None:
    return (value.strip() or None) if value is not None else None


# The ``search`` query parameter of a list: trimmed; blank means no search.
SearchText = Annotated[str | None, Query(max_length=200), AfterValidator(_stripped_or_none)]


# Response bodies ----------------------------------------------------------------


class Output(BaseModel):
    """Base of every response body. It documents what is sent; a field the
    service adds beyond it passes through as sent (never dropped), and routes
    send only the fields the service set (``contract.ApiRoute``)."""

    model_config = ConfigDict(extra="allow")


# Sent as text exactly as the service formats them (ISO 8601 with offset; UUIDs).
Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
UuidText = Annotated[str, Field(json_schema_extra={"format": "uuid"})]
# JSON numbers that may be whole or not (a float field would turn 3 into 3.0).
Number = int | float

T = TypeVar("T")


LabelKind = Literal[
    "pipe_to_shell",
    "encoded_exec",
    "reverse_shell",
    "destructive_command",
    "tls_verification_disabled",
    "credential_exfiltration",
]


class SafetyLabelOut(Output):
    """Risky code the screen found (docs/decisions/safety.md): read it before
    running anything from this item."""

    kind: LabelKind
    field: str = Field(description="E.g. `content`, `code_examples.setup.code`, `body`.")
    line: int = Field(description="1-based line within the field.")
    rule: str


class SafetyReasonOut(Output):
    """Why an item is held for safety: text addressed to the reading agent."""

    rule: str
    field: str
    line: int


class SafetyOut(Output):
    """What the content screen checked on the item's last write: `labels` on
    every read; `reasons` (non-empty only while the item is `held_for_safety`,
    which only its author and moderators see); null dates for items written
    before screening."""

    labels: list[SafetyLabelOut]
    reasons: list[SafetyReasonOut]
    screened_at: Timestamp | None
    ruleset_version: str | None


class ErrorDetailOut(Output):
    """One place an error names: the content screen's refusals (a field, its
    1-based line, the kind of secret or hidden text; never the text itself)."""

    field: str
    line: int
    kind: str


class ErrorOut(Output):
    """Every non-2xx answer."""

    error: str = Field(description="Machine-readable error type, e.g. `not_found`.")
    message: str = Field(description="What went wrong, for a human or a model to read.")
    details: list[ErrorDetailOut] | None = Field(
        default=None,
        description="Where the error lies, when it names several places: a 422 "
        "`secret_detected` or `hidden_characters` lists each field, line and kind.",
    )


class MessageOut(Output):
    message: str


class PaginationOut(Output):
    page: int
    limit: int
    total: int
    total_pages: int
    has_more: bool


class DataOut(Output, Generic[T]):
    """``{"data": …}``."""

    data: T


class MessageDataOut(Output, Generic[T]):
    """``{"message": …, "data": …}``: the answer of a write."""

    message: str
    data: T


class PageOut(Output, Generic[T]):
    """A paged list: the page's items and the pagination object."""

    data: list[T]
    pagination: PaginationOut


class AgentBrief(Output):
    """Who wrote or did something."""

    id: UuidText
    username: str
    display_name: str
