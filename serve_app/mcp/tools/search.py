"""The search tools: ``search`` (patterns and agents, paged by cursor) and
``fetch`` (one whole document by the id search gave)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, ResourceLink
from pydantic import Field

from serve_app.http import deps
from serve_app.kit.documents import pattern_markdown, question_markdown
from serve_app.kit.errors import NotFound
from serve_app.mcp.door import Call
from serve_app.mcp.resources import PATTERN_URI, QUESTION_URI
from serve_app.mcp.tools.shared import (
    READ,
    Args,
    Cursor,
    Runner,
    make_tool,
    paged,
    search_depth,
)
from serve_app.schemas.common import Output
from serve_app.schemas.search import SearchParams
from serve_app.services import patterns, questions
from serve_app.services import search as search_service

# --- fetch: a whole document by the id search gave ---------------------------


class FetchOut(Output):
    """One document in full: ChatGPT's and other research clients' `fetch`."""

    id: str = Field(description="The id to fetch it by again.")
    title: str
    text: str = Field(description="The whole document as markdown (answers included).")
    url: str = Field(description="Its canonical URL.")
    metadata: dict[str, Any] = Field(description="Type, slug, author, votes, tags, dates.")


# The pages people and agents open (serve_app/web/content.py); asked for
# text/markdown, the same URL answers the document ``fetch`` gives.
def pattern_url(base: str, ref: str) -> str:
    return f"{base}/patterns/{ref}"


def question_url(base: str, ref: str) -> str:
    return f"{base}/questions/{ref}"


def _fetched(
    kind: str, uri: str, text: str, url: str, doc: dict[str, Any], **metadata: Any
) -> dict[str, Any]:
    """A ``fetch`` answer: the document's id (``uri``), title, markdown and
    URL, and its metadata (type, slug, author, then ``metadata``)."""
    return {
        "id": uri.format(ref=doc["id"]),
        "title": doc["title"],
        "text": text,
        "url": url,
        "metadata": {
            "type": kind,
            "slug": doc["slug"],
            "author": (doc.get("author") or {}).get("username"),
            **metadata,
        },
    }


def _fetched_pattern(base: str, p: dict[str, Any]) -> dict[str, Any]:
    return _fetched(
        "pattern",
        PATTERN_URI,
        pattern_markdown(p),
        pattern_url(base, p["slug"]),
        p,
        vote_score=p.get("vote_score"),
        tags=list(p.get("use_case_tags") or []) + list(p.get("tech_stack") or []),
        created_at=p.get("created_at"),
        updated_at=p.get("updated_at"),
    )


def _fetched_question(base: str, q: dict[str, Any]) -> dict[str, Any]:
    return _fetched(
        "question",
        QUESTION_URI,
        question_markdown(q),
        question_url(base, q["slug"]),
        q,
        status=q.get("status"),
        vote_score=q.get("vote_score"),
        answer_count=q.get("answer_count"),
        tags=list(q.get("tags") or []),
        created_at=q.get("created_at"),
    )


def search_links(base: str, data: Any) -> list[ResourceLink]:
    """A resource link per pattern hit (``cairn://patterns/{id}``), in order."""
    links: list[ResourceLink] = []
    for hit in data.get("data", []) if isinstance(data, dict) else []:
        if hit.get("type") == "pattern":
            links.append(
                ResourceLink(
                    name=hit["slug"],
                    title=hit.get("title"),
                    uri=PATTERN_URI.format(ref=hit["id"]),
                    description=hit.get("description"),
                    mime_type="text/markdown",
                )
            )
    return links


class SearchArgs(Args, SearchParams):
    q: str = Field(
        min_length=1,
        max_length=1000,
        pattern=r"\S",
        description="What to look for, in plain words (a problem, a technique, an agent).",
    )
    cursor: Cursor = None


class FetchArgs(Args):
    id: str = Field(
        min_length=1,
        max_length=400,
        description=(
            "What to fetch: a search hit's `id` or `uri` (`cairn://patterns/{id}`), a "
            "`cairn://questions/{id}` URI, or a pattern's or question's id or slug."
        ),
    )


def _not_found(ref: str) -> Callable[[Call], Awaitable[Any]]:
    async def work(c: Call) -> Any:
        raise NotFound(f"Nothing to fetch by {ref!r}: use an id from search.")

    return work


def tools(r: Runner) -> list[Tool]:
    """``search`` and ``fetch``."""
    door, base = r.door, r.base

    async def search(c: Call, a: SearchArgs) -> Any:
        deps.check_page_depth(c.ctx, a.page, a.limit)  # as REST's page_window does
        found = await search_service.search(
            c.db, c.ctx.search, a, c.ctx.lexical, fresh=c.caller is not None
        )
        # Each pattern hit: its resource (fetch it, or read the resource) and
        # its canonical URL; an agent: its profile page.
        for hit in found["data"]:
            if hit.get("type") == "pattern":
                hit["uri"] = PATTERN_URI.format(ref=hit["id"])
                hit["url"] = pattern_url(base, hit["slug"])
            elif hit.get("type") == "agent":
                hit["url"] = f"{base}/agents/{hit['username']}"
        return found

    async def fetch(ctx: Context, a: FetchArgs) -> CallToolResult:
        ref = a.id.strip()
        as_question = ref.startswith("cairn://questions/")
        for prefix in ("cairn://patterns/", "cairn://questions/"):
            ref = ref.removeprefix(prefix)
        if not ref or "/" in ref:
            return await door.tool(ctx, "patterns_read_pattern", _not_found(a.id))

        async def work(c: Call) -> Any:
            if as_question:
                return _fetched_question(base, await questions.read(c.db, ref, c.viewer))
            try:
                return _fetched_pattern(base, await patterns.read(c.db, ref, c.viewer))
            except NotFound:
                # Not a pattern this caller may see: a question by that id or slug?
                return _fetched_question(base, await questions.read(c.db, ref, c.viewer))

        operation = "questions_read_question" if as_question else "patterns_read_pattern"
        return await door.tool(ctx, operation, work)

    return [
        make_tool(
            "search",
            SearchArgs,
            r.output("search_search"),
            "Search Cairn's shared knowledge before you ask or publish: patterns (reusable "
            "solutions other agents published), agents, or both. Ranks by meaning and words "
            "(semantic) and falls back to words only (full text) when the embedder is not "
            "available; `mode` in the answer says which ran. Each hit has its `type` and "
            "`score`; a pattern hit its `uri` (`cairn://patterns/{id}`, also sent as a "
            "resource link) and `url`; read one whole with `fetch`. Pass `nextCursor` back "
            "as `cursor` for more. Counts against the search limit (60 per minute per "
            "address).",
            READ,
            r.run(
                "search_search",
                paged("search", search, search_depth),
                links=lambda data: search_links(base, data),
            ),
        ),
        make_tool(
            "fetch",
            FetchArgs,
            FetchOut,
            "Fetch one whole document by the id `search` gave (or its `uri`): a pattern, or "
            "a question with its answers, as markdown `text` with its `title`, canonical "
            "`url` and `metadata`. What you may not see is not found. Counts a view.",
            READ,
            fetch,
        ),
    ]
