"""What every MCP tool shares: the argument base and its common fields, the
opaque cursors of the list tools (``paged``), the tool annotations, and how a
tool is made (``make_tool``) and bound to the REST operation it stands for
through the door (``runner``)."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, ResourceLink, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from serve_app.kit.errors import BadRequest
from serve_app.mcp.door import Call, Door, Keyed
from serve_app.schemas.common import Input
from serve_app.services import search as search_service
from serve_app.services.idempotency import KEY_MAX_LENGTH, KEY_PATTERN

M = TypeVar("M", bound=BaseModel)


class Args(ArgModelBase, Input):
    """Base of every tool's arguments: unknown arguments are refused, values are
    not coerced (as REST bodies). The tool's work gets the model itself."""

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"args": self}


Ref = Annotated[
    str,
    Field(min_length=1, max_length=300, description="The id (UUID) or the slug."),
]
IdempotencyKey = Annotated[
    str | None,
    Field(
        default=None,
        min_length=1,
        max_length=KEY_MAX_LENGTH,
        pattern=KEY_PATTERN,
        description=(
            "Optional: makes a retry safe. A call repeated with the same key and the "
            "same arguments (within 24 hours) returns the first answer and creates "
            "nothing; the same key with other arguments is an error. Use a fresh UUID "
            "per new item."
        ),
    ),
]


def body(args: BaseModel, model: type[M]) -> M:
    """The REST input model inside a tool's arguments, with the fields the
    caller set (so ``exclude_unset`` means the same as over REST)."""
    values = {name: getattr(args, name) for name in model.model_fields}
    return model.model_construct(
        _fields_set=args.model_fields_set & set(model.model_fields), **values
    )


def as_uuid(value: str, name: str = "id") -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        raise BadRequest(f"{name}: must be a UUID", error="validation_error") from exc


def keyed(args: Any, tool: str) -> Keyed | None:
    key: str | None = getattr(args, "idempotency_key", None)
    if key is None:
        return None
    return Keyed(key, tool, args.model_dump(exclude={"idempotency_key"}, exclude_unset=True))


# --- cursors: list tools page by an opaque ``cursor`` / ``nextCursor`` ----------

Cursor = Annotated[
    str | None,
    Field(
        default=None,
        min_length=1,
        max_length=200,
        description=(
            "Opaque: the `nextCursor` of the previous answer, to get the next page "
            "(overrides `page` and `limit`)."
        ),
    ),
]


def encode_cursor(tool: str, page: int, limit: int) -> str:
    raw = json.dumps({"t": tool, "p": page, "l": limit}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _not_a_cursor() -> BadRequest:
    return BadRequest(
        "cursor: not a cursor this tool gave; start without one.", error="validation_error"
    )


def decode_cursor(tool: str, cursor: str) -> tuple[int, int]:
    """The page and limit a cursor of ``tool`` stands for (400 for any other)."""
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        page, limit = raw["p"], raw["l"]
        if raw["t"] != tool or not isinstance(page, int) or not isinstance(limit, int):
            raise ValueError(cursor)
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise _not_a_cursor() from None
    return page, limit


def list_depth(c: Call) -> int:
    """How deep a list's pages reach (``deps.check_page_depth``)."""
    return c.ctx.settings.max_page_offset


def search_depth(c: Call) -> int:
    """How deep search's pages reach: the list cap and search's ranking depth."""
    return min(list_depth(c), search_service.MAX_RESULTS)


def paged(
    tool: str,
    work: Callable[[Call, Any], Awaitable[Any]],
    deepest: Callable[[Call], int] = list_depth,
) -> Callable[[Call, Any], Awaitable[Any]]:
    """A list tool's work taking a ``cursor`` and adding ``nextCursor`` while
    there is a next page the tool will answer: none for a page past the
    page-depth cap (``deepest`` rows), which would be refused."""

    async def run(c: Call, a: Any) -> Any:
        if a.cursor is not None:
            page, limit = decode_cursor(tool, a.cursor)
            # Validated as the arguments are: a cursor made by hand gets no page
            # or limit the tool's own arguments could not have.
            try:
                a = type(a).model_validate(
                    {**a.model_dump(), "page": page, "limit": limit, "cursor": None}
                )
            except ValidationError:
                raise _not_a_cursor() from None
        out = await work(c, a)
        pagination = out.get("pagination") if isinstance(out, dict) else None
        if isinstance(pagination, dict) and pagination.get("has_more"):
            page, limit = pagination["page"] + 1, pagination["limit"]
            if page * limit <= deepest(c):
                out["nextCursor"] = encode_cursor(tool, page, limit)
        return out

    return run


# --- making a tool ------------------------------------------------------------

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
SET = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

Run = Callable[[Context, Any], Awaitable[CallToolResult]]


OPERATION = "cairn_operation"


def operation_of(tool: Tool) -> str | None:
    """The REST operation a tool stands for, when it stands for one only."""
    found = getattr(tool.fn, OPERATION, None)
    return found if isinstance(found, str) else None


class ExactArguments(FuncMetadata):
    """The SDK's argument handling without its JSON pre-parsing. The SDK runs
    ``json.loads`` on any string argument whose field is not plainly ``str``
    (for clients that send lists as JSON text), so text that reads as JSON
    (``"null"``, ``'{"a": 1}'``) was refused or turned into something else,
    and a list sent as text was accepted: REST takes neither liberty. A tool's
    arguments are validated as the client sent them, as REST bodies are."""

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        return data


def make_tool(
    name: str,
    args: type[Args],
    output: Any,
    description: str,
    annotations: ToolAnnotations,
    run: Run,
) -> Tool:
    async def fn(args: Args, ctx: Context) -> CallToolResult:
        return await run(ctx, args)

    fn.__name__ = name
    # The REST operation a single-route tool stands for (the MCP edge reads it
    # to tell which read tools need a credential: ``operation_of``).
    fn.cairn_operation = getattr(run, OPERATION, None)  # type: ignore[attr-defined]
    return Tool(
        fn=fn,
        name=name,
        title=name.replace("_", " ").capitalize(),
        description=description,
        parameters=args.model_json_schema(),
        fn_metadata=ExactArguments(arg_model=args, output_model=output),
        is_async=True,
        context_kwarg="ctx",
        annotations=annotations,
    )


class Runner:
    """Binds a tool's work to ``door``: the REST operation it stands for, its
    response model (``output``) and the call through the door (``run``)."""

    def __init__(self, door: Door) -> None:
        self.door = door
        self.base = door.ctx.settings.base_url

    def output(self, operation: str) -> Any:
        return self.door.route(operation).response_model

    def run(
        self,
        operation: str,
        work: Callable[[Call, Any], Awaitable[Any]],
        tool: str = "",
        links: Callable[[Any], list[ResourceLink]] | None = None,
    ) -> Run:
        door = self.door

        async def call(ctx: Context, args: Any) -> CallToolResult:
            return await door.tool(
                ctx,
                operation,
                lambda c: work(c, args),
                keyed(args, tool) if tool else None,
                links,
            )

        setattr(call, OPERATION, operation)
        return call
