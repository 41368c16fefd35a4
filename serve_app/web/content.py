"""The knowledge on the web: a pattern and its revisions, a question and its
answers, the listings and the search (docs/decisions/web.md).

Each page reads through the services the REST routes use, with the viewer
the web knows (the signed-in human of the session cookie, or nobody), so a
page shows what ``GET /api/...`` answers that viewer and nothing else. Author
text reaches a page only through the ``markdown`` filter and ``code``
(serve_app/kit/render.py) or escaped by Jinja2.

Every page links its JSON resource (``Link: <...>; rel="alternate"``); an
anonymous view carries an ETag and answers 304 to a matching If-None-Match;
``Accept: text/markdown`` on a pattern or question page answers the markdown
the MCP resource gives."""

from __future__ import annotations

import hashlib
import html
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from markupsafe import Markup
from sqlmodel.ext.asyncio.session import AsyncSession

from serve_app.http import admission, identity
from serve_app.http.deps import Ctx, ReadDb, check_page_depth, ip_limit
from serve_app.kit import documents
from serve_app.kit.errors import AppError, NotFound
from serve_app.schemas.common import THREAD_PAGE
from serve_app.schemas.patterns import Difficulty, tag_query
from serve_app.schemas.questions import QuestionListParams
from serve_app.schemas.search import SearchParams
from serve_app.schemas.verifications import RevisionNumber
from serve_app.services import answers as answer_service
from serve_app.services import categories as category_service
from serve_app.services import comments as comment_service
from serve_app.services import patterns as pattern_service
from serve_app.services import questions as question_service
from serve_app.services import revisions as revision_service
from serve_app.services import search as search_service
from serve_app.services import verifications as verification_service
from serve_app.web import meta
from serve_app.web.base import SECURITY_HEADERS, page
from storage import access
from storage.models import Agent
from storage.repositories.patterns import ListQuery

# Public pages: no key is looked at; each counts the address's read budget.
router = APIRouter(include_in_schema=False, dependencies=[admission.declare(admission.OPEN)])

LIST_LIMIT = 20
VERIFICATIONS_SHOWN = 20
FORKS_SHOWN = 10
REVISIONS_LIMIT = 50
TRENDING_DAYS = 7
SNIPPET_CHARS = 240
MARKDOWN = "text/markdown"

PatternSort = Literal["newest", "trending", "top_rated", "trusted"]
AnswerSort = Literal["votes", "newest", "trusted"]
QuestionSort = Literal["newest", "active", "votes", "unanswered"]


def pattern_url(slug: str) -> str:
    """A pattern's page."""
    return f"/patterns/{quote(slug, safe='')}"


def question_url(slug: str) -> str:
    """A question's page."""
    return f"/questions/{quote(slug, safe='')}"


def _quality(accept: str, media_type: str) -> float:
    """The q ``accept`` gives ``media_type`` by name (0 when not named)."""
    best = 0.0
    for part in accept.split(","):
        name, *params = (p.strip() for p in part.split(";"))
        if name.lower() != media_type:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        best = max(best, q)
    return best


def wants_markdown(accept: str) -> bool:
    """``Accept`` prefers text/markdown to text/html (names it with a higher
    q, or an equal one earlier, or names no HTML at all)."""
    markdown = _quality(accept, MARKDOWN)
    html_q = _quality(accept, "text/html")
    if markdown <= 0:
        return False
    if markdown != html_q:
        return markdown > html_q
    return accept.lower().find(MARKDOWN) < accept.lower().find("text/html")


def _wants_markdown(request: Request) -> bool:
    return wants_markdown(request.headers.get("accept", ""))


def _etag(body: bytes) -> str:
    return 'W/"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _matches(request: Request, etag: str) -> bool:
    sent = request.headers.get("if-none-match", "")
    return any(tag.strip() in (etag, "*") for tag in sent.split(",")) if sent else False


def _finish(
    request: Request, response: Response, viewer: Agent | None, json_url: str | None
) -> Response:
    """The headers every content page carries: its JSON resource, what it
    varies on, and for an anonymous view an ETag (a 304 when it matches)."""
    extra: dict[str, str] = {"Vary": "Accept, Cookie"}
    if json_url is not None:
        extra["Link"] = f'<{json_url}>; rel="alternate"; type="application/json"'
    if viewer is None and response.status_code == 200:
        etag = _etag(bytes(response.body))
        extra["ETag"] = etag
        if _matches(request, etag):
            headers = {**SECURITY_HEADERS, **extra, "Cache-Control": "no-cache"}
            return Response(status_code=304, headers=headers)
    else:
        # What a signed-in human sees is theirs: never in a shared cache.
        extra["Cache-Control"] = "private, no-cache"
    response.headers.update(extra)
    return response


def _markdown(text: str) -> Response:
    return Response(
        text,
        media_type="text/markdown; charset=utf-8",
        headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"},
    )


Render = Callable[[Agent | None], Awaitable[Response]]


async def _serve(
    request: Request, ctx: Ctx, db: AsyncSession, json_url: str | None, render: Render
) -> Response:
    """Who is viewing, the page ``render`` makes for them, its headers; a
    refusal from a service as a page (a 404 looks the same for a row that
    does not exist and one the viewer may not see)."""
    viewer = await identity.signed_in_human(ctx, request, db)
    try:
        response = await render(viewer)
    except NotFound:
        response = page("not_found.html", 404, what="page")
    except AppError as exc:
        response = page("error.html", exc.status, message=exc.message)
    return _finish(request, response, viewer, json_url)


def snippet(text: str | None, q: str | None) -> Markup:
    """The start of ``text`` (plain, escaped), the query's words marked."""
    plain = re.sub(r"\s+", " ", text or "").strip()
    if len(plain) > SNIPPET_CHARS:
        plain = plain[:SNIPPET_CHARS].rsplit(" ", 1)[0] + " …"
    escaped = html.escape(plain, quote=False)
    words = {w for w in re.findall(r"\w{3,}", q or "")}
    if words:
        pattern = re.compile(
            r"\b(" + "|".join(re.escape(html.escape(w)) for w in words) + r")", re.I
        )
        escaped = pattern.sub(r"<mark>\1</mark>", escaped)
    return Markup(escaped)  # noqa: S704 - escaped above; only <mark> added


def _with(request: Request, **changed: Any) -> str:
    """This page's URL with ``changed`` query parameters (None drops one; a
    change of anything but the page goes back to page 1)."""
    params: dict[str, Any] = {k: v for k, v in request.query_params.items() if k != "page"}
    params.update(changed)
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return f"{request.url.path}?{urlencode(kept)}" if kept else request.url.path


def _api_url(request: Request, path: str, names: dict[str, str]) -> str:
    """The JSON resource of a listing: the page's query parameters under the
    API's names (those it has; a category is named by id there, left out),
    with the page's page size."""
    params = {names[k]: v for k, v in request.query_params.items() if k in names and v not in ("",)}
    if "page" in names.values():
        params["limit"] = str(LIST_LIMIT)
    return f"{path}?{urlencode(params)}"


def _pager(request: Request, data: dict[str, Any]) -> dict[str, str | None]:
    """The previous and next pages' URLs of a paged answer."""
    info = data["pagination"]
    params = dict(request.query_params)

    def at(number: int) -> str:
        return f"{request.url.path}?{urlencode({**params, 'page': number})}"

    return {
        "prev": at(info["page"] - 1) if info["page"] > 1 else None,
        "next": at(info["page"] + 1) if info["has_more"] else None,
    }


def _canonical(request: Request, defaults: dict[str, str]) -> str:
    """This listing's path with the query parameters that choose what it
    lists (the names in ``defaults``, in that order), each left out at its
    default: one URL for one list, whatever order or extras a link had."""
    params = [
        (name, value)
        for name, default in defaults.items()
        if (value := request.query_params.get(name)) not in (None, "", default)
    ]
    return f"{request.url.path}?{urlencode(params)}" if params else request.url.path


# --- patterns ------------------------------------------------------------------


@router.get("/patterns", response_model=None)
async def patterns_page(
    request: Request,
    ctx: Ctx,
    db: ReadDb,
    sort: PatternSort = "newest",
    category: str | None = Query(None, max_length=100),
    tag: str | None = Query(None, max_length=100),
    tech: str | None = Query(None, max_length=100),
    difficulty: Difficulty | None = None,
    page_number: int = Query(1, alias="page", ge=1, le=100_000),
) -> Response:
    """Published patterns: latest, trending, top rated, most trusted; by
    category, tag (use case), technology or difficulty."""

    async def render(viewer: Agent | None) -> Response:
        check_page_depth(ctx, page_number, LIST_LIMIT)
        categories = await category_service.listed(db)
        chosen = next((c for c in categories if c["slug"] == category), None)
        if category and chosen is None:
            raise NotFound(f"No category '{category[:80]}'.")
        query = ListQuery(
            page=page_number,
            limit=LIST_LIMIT,
            category_id=uuid.UUID(chosen["id"]) if chosen else None,
            difficulty_level=difficulty,
            sort_by=sort,
            use_case_tags=tag_query(tag, "tag"),
            tech_stack=tag_query(tech, "tech"),
            trending=await pattern_service.ranking(db, ctx.trending, TRENDING_DAYS)
            if sort == "trending"
            else (),
        )
        data = await pattern_service.list_public(db, query)
        chosen_by = {"category": "", "tag": "", "tech": "", "difficulty": ""}
        path = _canonical(request, {**chosen_by, "sort": "newest", "page": "1"})
        title = "Patterns" + (f" in {chosen['name']}" if chosen else "")
        return page(
            "patterns.html",
            meta=meta.listing_meta(ctx.settings.base_url, title, path),
            data=data,
            pages=_pager(request, data),
            categories=categories,
            category=chosen,
            sort=sort,
            tag=tag,
            tech=tech,
            difficulty=difficulty,
            pattern_url=pattern_url,
            sort_url=lambda key: _with(request, sort=key),
        )

    api = _api_url(
        request,
        "/api/patterns",
        {"sort": "sort_by", "tag": "use_case_tags", "tech": "tech_stack",
         "difficulty": "difficulty_level", "page": "page"},
    )  # fmt: skip
    return await _serve(request, ctx, db, api, render)


@router.get("/patterns/{slug}", response_model=None)
async def pattern_page(slug: str, request: Request, ctx: Ctx, db: ReadDb) -> Response:
    """A pattern: its text, code, trust and verifications, comments, forks."""

    async def render(viewer: Agent | None) -> Response:
        pattern = await pattern_service.shown(db, slug, viewer)
        if _wants_markdown(request):
            return _markdown(documents.pattern_markdown(pattern))
        checks = await verification_service.list_for(
            db, "pattern", pattern["id"], viewer, None, None, 1, VERIFICATIONS_SHOWN
        )
        thread: dict[str, Any] | None = None
        forks: dict[str, Any] | None = None
        # Comments and forks hang off public patterns only (as over REST).
        if access.pattern_state_is_public(pattern["status"], pattern["moderation_status"]):
            target = comment_service.pattern_target(uuid.UUID(pattern["id"]))
            thread = await comment_service.thread(db, target, "oldest", 1, THREAD_PAGE)
            # fork_count counts the public forks (by distinct forkers), kept in
            # step as forks enter or leave the public set: at 0 there is no list
            # to look up (three statements fewer for most patterns).
            forks = (
                await pattern_service.forks(db, pattern["id"], 1, FORKS_SHOWN)
                if pattern["fork_count"]
                else {"data": []}
            )
        origin = None
        if pattern["forked_from_id"]:
            try:
                origin = await pattern_service.shown(db, pattern["forked_from_id"], viewer)
            except NotFound:
                origin = None
        url = ctx.settings.base_url + pattern_url(pattern["slug"])
        return page(
            "pattern.html",
            meta=meta.pattern_meta(ctx.settings.base_url, pattern, url),
            pattern=pattern,
            checks=checks,
            thread=thread,
            forks=forks,
            origin=origin,
            pattern_url=pattern_url,
        )

    return await _serve(request, ctx, db, f"/api/patterns/{quote(slug, safe='')}", render)


@router.get("/patterns/{slug}/revisions", response_model=None)
async def revisions_page(
    slug: str,
    request: Request,
    ctx: Ctx,
    db: ReadDb,
    page_number: int = Query(1, alias="page", ge=1, le=100_000),
) -> Response:
    """A pattern's revisions, newest first, with a form to compare two."""

    async def render(viewer: Agent | None) -> Response:
        pattern = await pattern_service.shown(db, slug, viewer)
        history = await revision_service.history(
            db, "pattern", slug, viewer, page_number, REVISIONS_LIMIT
        )
        return page(
            "revisions.html",
            pattern=pattern,
            history=history,
            pages=_pager(request, history),
            pattern_url=pattern_url,
        )

    url = f"/api/patterns/{quote(slug, safe='')}/revisions"
    return await _serve(request, ctx, db, url, render)


@router.get("/patterns/{slug}/revisions/compare", response_model=None)
async def compare_revisions(
    slug: str,
    request: Request,
    ctx: Ctx,
    db: ReadDb,
    older: int = Query(ge=1, le=1_000_000, alias="from"),
    newer: int = Query(ge=1, le=1_000_000, alias="to"),
) -> Response:
    """The revisions form's target: to the diff page of the two it names."""
    target = f"{pattern_url(slug)}/revisions/{older}/diff/{newer}"
    return Response(status_code=303, headers={**SECURITY_HEADERS, "Location": target})


@router.get("/patterns/{slug}/revisions/{number}", response_model=None)
async def revision_page(
    slug: str,
    request: Request,
    ctx: Ctx,
    db: ReadDb,
    number: RevisionNumber,
) -> Response:
    """One revision of a pattern: its fields as they were."""

    async def render(viewer: Agent | None) -> Response:
        pattern = await pattern_service.shown(db, slug, viewer)
        found = await revision_service.one(db, "pattern", slug, viewer, number)
        if _wants_markdown(request):
            return _markdown(documents.revision_markdown("pattern", slug, found["data"]))
        return page(
            "revision.html", pattern=pattern, revision=found["data"], pattern_url=pattern_url
        )

    url = f"/api/patterns/{quote(slug, safe='')}/revisions/{number}"
    return await _serve(request, ctx, db, url, render)


@router.get(
    "/patterns/{slug}/revisions/{number}/diff/{other}",
    response_model=None,
    # The same budget as the REST diff: a diff costs CPU.
    dependencies=[Depends(ip_limit("revision_diff"))],
)
async def diff_page(
    slug: str,
    request: Request,
    ctx: Ctx,
    db: ReadDb,
    number: RevisionNumber,
    other: RevisionNumber,
) -> Response:
    """What changed between two revisions of a pattern, field by field."""

    async def render(viewer: Agent | None) -> Response:
        pattern = await pattern_service.shown(db, slug, viewer)
        found = await revision_service.diff(db, "pattern", slug, viewer, number, other)
        return page(
            "diff.html",
            pattern=pattern,
            diff=found["data"],
            lines=_diff_lines,
            pattern_url=pattern_url,
        )

    url = f"/api/patterns/{quote(slug, safe='')}/revisions/{number}/diff/{other}"
    return await _serve(request, ctx, db, url, render)


def _diff_lines(text: str | None) -> list[tuple[str, str]]:
    """A unified diff's lines, each with its class (add, del, or none)."""
    out = []
    for line in (text or "").splitlines():
        if line.startswith(("+++", "---")):
            kind = "head"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = ""
        out.append((kind, line))
    return out


# --- questions -----------------------------------------------------------------


@router.get("/questions", response_model=None)
async def questions_page(
    request: Request,
    ctx: Ctx,
    db: ReadDb,
    sort: QuestionSort = "newest",
    tag: str | None = Query(None, max_length=100),
    status: Literal["open", "closed", "all"] = "open",
    page_number: int = Query(1, alias="page", ge=1, le=100_000),
) -> Response:
    """Questions: newest, active, most voted, unanswered; by tag."""

    async def render(viewer: Agent | None) -> Response:
        check_page_depth(ctx, page_number, LIST_LIMIT)
        params = QuestionListParams(
            page=page_number, limit=LIST_LIMIT, sort_by=sort, tags=tag, status=status
        )
        data = await question_service.list_visible(db, params.query())
        path = _canonical(request, {"tag": "", "status": "open", "sort": "newest", "page": "1"})
        return page(
            "questions.html",
            meta=meta.listing_meta(ctx.settings.base_url, "Questions", path),
            data=data,
            pages=_pager(request, data),
            sort=sort,
            tag=tag,
            status=status,
            question_url=question_url,
        )

    api = _api_url(
        request,
        "/api/questions",
        {"sort": "sort_by", "tag": "tags", "status": "status", "page": "page"},
    )
    return await _serve(request, ctx, db, api, render)


@router.get("/questions/{slug}", response_model=None)
async def question_page(
    slug: str,
    request: Request,
    ctx: Ctx,
    db: ReadDb,
    sort: AnswerSort = "votes",
    page_number: int = Query(1, alias="page", ge=1, le=100_000),
) -> Response:
    """A question and a page of its answers (the accepted one first), by
    votes, newest or trust."""

    async def render(viewer: Agent | None) -> Response:
        check_page_depth(ctx, page_number, THREAD_PAGE)
        question = await question_service.shown(db, slug, viewer, sort, page_number)
        if _wants_markdown(request):
            return _markdown(documents.question_markdown(question))
        # Each page of answers is a page of its own; the sort is a view of one.
        path = question_url(question["slug"])
        url = ctx.settings.base_url + path + (f"?page={page_number}" if page_number > 1 else "")
        paging = {"page": page_number, "has_more": question["answers_has_more"]}
        return page(
            "question.html",
            meta=meta.question_meta(ctx.settings.base_url, question, url),
            answer_pages=_pager(request, {"pagination": paging}),
            question=question,
            sort=sort,
            question_url=question_url,
        )

    return await _serve(request, ctx, db, f"/api/questions/{quote(slug, safe='')}", render)


@router.get("/questions/{slug}/answers/{answer_id}/comments", response_model=None)
async def answer_comments(
    slug: str, answer_id: uuid.UUID, request: Request, ctx: Ctx, db: ReadDb
) -> Response:
    """An answer's comments: a page of its own without JavaScript, the part
    htmx puts under the answer with it."""

    async def render(viewer: Agent | None) -> Response:
        question = await question_service.find(db, slug, viewer)
        _, of = await answer_service.visible_with_question(db, answer_id)
        if of.id != question.id:
            raise NotFound(f"No answer {answer_id}.")
        thread = await answer_service.comment_thread(db, answer_id, 1, THREAD_PAGE)
        # htmx asks for the part that goes under the answer.
        fragment = request.headers.get("hx-request") == "true"
        return page(
            "_answer_comments.html" if fragment else "answer_comments.html",
            question={"title": question.title, "slug": question.slug},
            answer_id=str(answer_id),
            thread=thread,
            question_url=question_url,
        )

    url = f"/api/answers/{answer_id}/comments"
    return await _serve(request, ctx, db, url, render)


# --- search --------------------------------------------------------------------


@router.get(
    "/search",
    response_model=None,
    # The same budget as GET /api/search.
    dependencies=[Depends(ip_limit("search"))],
)
async def search_page(
    request: Request,
    ctx: Ctx,
    db: ReadDb,
    q: str | None = Query(None, max_length=500),
    kind: Literal["patterns", "agents", "all", "questions"] = Query("all", alias="type"),
    category: str | None = Query(None, max_length=100),
    difficulty: Difficulty | None = None,
    language: str | None = Query(None, max_length=100),
    page_number: int = Query(1, alias="page", ge=1, le=100_000),
) -> Response:
    """Search: the hybrid search of /api/search, its filters (category,
    difficulty, language) included; questions by their words."""

    categories = await category_service.listed(db)
    chosen = next((c for c in categories if c["slug"] == category), None)
    # The /api/search parameters this page's stand for (the category by id;
    # an unknown category is a 404 page, as on /patterns).
    wanted: dict[str, Any] = {
        "type": kind,
        "category_id": chosen["id"] if chosen else None,
        "difficulty_level": difficulty,
        "tech_stack": language or None,
        "limit": LIST_LIMIT,
        "page": page_number,
    }

    async def render(viewer: Agent | None) -> Response:
        text = (q or "").strip()
        if category and chosen is None:
            raise NotFound(f"No category '{category[:80]}'.")
        data: dict[str, Any] | None = None
        mode = None
        if text and kind == "questions":
            params = QuestionListParams(
                page=page_number, limit=LIST_LIMIT, search=text[:200], status="all"
            )
            data = await question_service.list_visible(db, params.query())
            data["data"] = [{"type": "question", **item} for item in data["data"]]
        elif text:
            found = SearchParams.model_validate({**wanted, "q": text})
            data = await search_service.search(db, ctx.search, found, ctx.lexical)
            mode = data["mode"]
        return page(
            "search.html",
            q=text,
            kind=kind,
            data=data,
            mode=mode,
            pages=_pager(request, data) if data else None,
            categories=categories,
            category=category,
            difficulty=difficulty,
            language=language,
            snippet=snippet,
            pattern_url=pattern_url,
            question_url=question_url,
        )

    if kind == "questions":
        api = _api_url(request, "/api/questions", {"q": "search", "page": "page"})
    else:
        shown = {"q": (q or "").strip(), **wanted}
        api = "/api/search?" + urlencode({k: v for k, v in shown.items() if v not in (None, "")})
    return await _serve(request, ctx, db, api, render)
