"""MCP resources: a pattern and a question as markdown, by id or slug, read
like ``GET /api/patterns/{id_or_slug}`` and ``GET /api/questions/{slug}``
(same visibility: what a caller may not see is not found; same limits; a
read counts a view). Author text cannot forge the markdown's structure
(serve_app/kit/documents.py)."""

from __future__ import annotations

import uuid
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from serve_app.kit.documents import pattern_markdown, question_markdown, revision_markdown
from serve_app.kit.errors import AppError
from serve_app.mcp.door import Call, Door
from serve_app.services import patterns, questions, revisions

PATTERN_URI = "cairn://patterns/{ref}"
QUESTION_URI = "cairn://questions/{ref}"
PATTERN_REVISION_URI = "cairn://patterns/{ref}/revisions/{number}"
ANSWER_REVISION_URI = "cairn://answers/{ref}/revisions/{number}"
# JSON-RPC's "resource not found" (the MCP specification's code for it).
RESOURCE_NOT_FOUND = -32002


def _number(value: str, uri: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= 1_000_000:
        body = {"error": "validation_error", "message": "number: 1 or more", "uri": uri}
        raise MCPError(INVALID_PARAMS, "validation_error: number: 1 or more", body)
    return number


def _answer_id(value: str, uri: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError as exc:
        body = {"error": "not_found", "message": f"No answer '{value[:80]}'.", "uri": uri}
        raise MCPError(RESOURCE_NOT_FOUND, f"not_found: no answer '{value[:80]}'", body) from exc


def register(server: MCPServer, door: Door) -> None:
    async def read(ctx: Context, operation: str, uri: str, work: Any) -> str:
        try:
            text: str = await door.run(ctx, operation, work)
        except AppError as exc:
            code = RESOURCE_NOT_FOUND if exc.status == 404 else INVALID_PARAMS
            if exc.status >= 500:
                code = INTERNAL_ERROR
            body = {"error": exc.error, "message": exc.message, "uri": uri}
            raise MCPError(code, f"{exc.error}: {exc.message}", body) from exc
        return text

    @server.resource(
        PATTERN_URI,
        name="pattern",
        title="A pattern",
        description="A published pattern as markdown, by id or slug (counts a view).",
        mime_type="text/markdown",
    )
    async def pattern(ref: str, ctx: Context) -> str:
        async def work(c: Call) -> str:
            return pattern_markdown(await patterns.read(c.db, ref, c.viewer))

        return await read(ctx, "patterns_read_pattern", PATTERN_URI.format(ref=ref), work)

    @server.resource(
        QUESTION_URI,
        name="question",
        title="A question with its answers",
        description="A question and its answers as markdown, by id or slug (counts a view).",
        mime_type="text/markdown",
    )
    async def question(ref: str, ctx: Context) -> str:
        async def work(c: Call) -> str:
            return question_markdown(await questions.read(c.db, ref, c.viewer))

        return await read(ctx, "questions_read_question", QUESTION_URI.format(ref=ref), work)

    @server.resource(
        PATTERN_REVISION_URI,
        name="pattern_revision",
        title="One revision of a pattern",
        description="A pattern's fields at one revision (1: as created), as markdown.",
        mime_type="text/markdown",
    )
    async def pattern_revision(ref: str, number: str, ctx: Context) -> str:
        uri = PATTERN_REVISION_URI.format(ref=ref, number=number)
        n = _number(number, uri)

        async def work(c: Call) -> str:
            found = await revisions.one(c.db, "pattern", ref, c.viewer, n)
            return revision_markdown("pattern", ref, found["data"])

        return await read(ctx, "patterns_read_revision", uri, work)

    @server.resource(
        ANSWER_REVISION_URI,
        name="answer_revision",
        title="One revision of an answer",
        description="An answer's body at one revision (1: as posted), as markdown.",
        mime_type="text/markdown",
    )
    async def answer_revision(ref: str, number: str, ctx: Context) -> str:
        uri = ANSWER_REVISION_URI.format(ref=ref, number=number)
        n = _number(number, uri)
        answer_id = _answer_id(ref, uri)

        async def work(c: Call) -> str:
            found = await revisions.one(c.db, "answer", answer_id, c.viewer, n)
            return revision_markdown("answer", ref, found["data"])

        return await read(ctx, "answers_read_answer_revision", uri, work)
