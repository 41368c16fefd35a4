"""The app factory: one FastAPI app, built per process (Serve replica, uvicorn, tests)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError

from actors.dispatch.dispatcher import Dispatcher
from serve_app.context import AppContext
from serve_app.http import admission, contract
from serve_app.http.bodylimit import BodyLimitMiddleware
from serve_app.http.deps import page_window
from serve_app.http.error_handlers import describe_validation, install_error_handlers
from serve_app.http.observe import Observe, sampler
from serve_app.http.querystring import QueryStringGuard
from serve_app.kit.clientip import Network
from serve_app.kit.errors import AppError
from serve_app.mcp import oauth as oauth_door
from serve_app.mcp.server import McpDoor
from serve_app.routers import (
    admin,
    agents,
    analytics,
    answers,
    changes,
    collections,
    comments,
    export,
    feed,
    humans,
    meta,
    moderation,
    notifications,
    oauth,
    patterns,
    questions,
    search,
    uploads,
    webhooks,
)
from serve_app.runtime.connections import Connections
from serve_app.runtime.decodes import DecodeSlots
from serve_app.runtime.dispatch import Dispatch, LocalDispatch, dispatch_config
from serve_app.runtime.index_copies.lexical import LexicalSearch
from serve_app.runtime.keycache import KeyCache
from serve_app.runtime.lastuse import LastUse
from serve_app.runtime.ratelimit import LocalRateLimiter, RateLimiter
from serve_app.runtime.semantic import NoSemanticSearch, SearchFactory, SemanticSearch
from serve_app.runtime.snapshot import Snapshot
from serve_app.runtime.streamhub import StreamHub
from serve_app.runtime.trending import LocalTrending, Trending
from serve_app.settings import Settings
from serve_app.streams import notifications as notification_stream
from serve_app.web import base as web_base
from serve_app.web import content as web_content
from serve_app.web import owners as web_owners
from serve_app.web import pages as web_pages
from serve_app.web import seo as web_seo
from serve_app.web import staff as web_staff
from storage.db import make_engine, make_sessionmaker
from storage.files import FileStore, LocalFileStore, PostgresFileStore
from storage.repositories import api_keys as key_repo
from storage.repositories import notifications as notification_repo
from telemetry import metrics

log = logging.getLogger("cairn")


# The docs FastAPI serves (openapi_url, docs_url, its OAuth redirect, redoc_url).
_DOC_PATHS = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
_NOT_FRAMED = [
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
]


def _never_framed(app: Any) -> Any:
    """An ASGI app whose answers may not be framed by another site."""

    async def framed_never(scope: Any, receive: Any, send: Any) -> None:
        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_NOT_FRAMED]}
            await send(message)

        await app(scope, receive, send_with_headers)

    return framed_never


def _page_errors(app: FastAPI) -> None:
    """Refusals on a page's route (a bad query, a rate limit) answer as pages;
    everywhere else the JSON error shape, as installed before."""
    as_json = app.exception_handlers[AppError]
    invalid_json = app.exception_handlers[RequestValidationError]

    async def app_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, AppError) and web_base.is_page(request):
            return web_base.error_page(exc.status, exc.message, exc.headers)
        answered = as_json(request, exc)
        return await answered if inspect.isawaitable(answered) else answered

    async def invalid(request: Request, exc: Exception) -> Response:
        if isinstance(exc, RequestValidationError) and web_base.is_page(request):
            return web_base.error_page(400, describe_validation(list(exc.errors())))
        answered = invalid_json(request, exc)
        return await answered if inspect.isawaitable(answered) else answered

    app.add_exception_handler(AppError, app_error)
    app.add_exception_handler(RequestValidationError, invalid)


# Multipart framing around an uploaded file (boundaries, part headers).
UPLOAD_OVERHEAD_BYTES = 64 * 1024


def file_store(settings: Settings) -> FileStore | PostgresFileStore:
    """The upload store CAIRN_UPLOAD_STORE names."""
    if settings.upload_store == "local":
        return LocalFileStore(settings.uploads_dir)
    return PostgresFileStore()


def notification_hub(settings: Settings, database_url: str) -> StreamHub:
    """This process's stream hub, listening on its own connection to ``database_url``."""

    def source(on_ready: Callable[[], Awaitable[None]]) -> AsyncIterator[list[str]]:
        # The listener checks its connection as often as streams look
        # themselves: a connection that died quietly is replaced as soon.
        return notification_repo.listen(database_url, on_ready, settings.stream_heartbeat_s)

    return StreamHub(source, max_streams=settings.stream_max_per_replica)


def key_cache(settings: Settings, database_url: str) -> KeyCache:
    """This process's cache of verified keys, following credential changes on
    its own connection to ``database_url``."""
    # The listener checks its connection at least twice a TTL.
    check_s = max(1.0, min(settings.stream_heartbeat_s, settings.key_cache_ttl_s / 2))

    listener = key_repo.credential_listener(database_url, check_s)
    return KeyCache(
        settings.key_cache_ttl_s,
        settings.key_cache_size,
        listener.messages,
        drain=listener.pending,
    )


def create_app(
    settings: Settings,
    *,
    database_url: str,
    secret: bytes,
    limiter: RateLimiter | None = None,
    trending: Trending | None = None,
    dispatch: Dispatch | None = None,
    local_proxies: Sequence[Network] = (),
    pool_size: int | None = None,
    files: FileStore | PostgresFileStore | None = None,
    semantic: SemanticSearch | SearchFactory | None = None,
) -> FastAPI:
    """Build the app. Ray-backed pieces are passed in, so tests run it without Ray.
    ``semantic`` may be a factory of the search given the app's sessions and
    engine (a copy of the vector index in this process follows Postgres)."""
    engine = make_engine(
        database_url,
        pool_size=pool_size or settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        connect_wait_s=settings.db_connect_wait_s,
        pre_ping=settings.db_pre_ping,
    )
    sessions = make_sessionmaker(engine)
    read_sessions = make_sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"))

    async def record_use(uses: list[tuple[Any, Any]]) -> None:
        async with read_sessions() as session:
            await key_repo.record_use(session, uses)

    if dispatch is None:
        config = dispatch_config(settings, database_url, secret)
        dispatch = LocalDispatch(Dispatcher(config, sessions=sessions))
    ctx = AppContext(
        settings=settings,
        engine=engine,
        sessions=sessions,
        read_sessions=read_sessions,
        limiter=limiter or LocalRateLimiter(),
        trending=trending or LocalTrending(database_url),
        dispatch=dispatch,
        secret=secret,
        rules=settings.rules(),
        trusted=settings.trusted_networks(),
        files=files or file_store(settings),
        search=(semantic(sessions, engine) if callable(semantic) else semantic)
        or NoSemanticSearch(),
        local_proxies=list(local_proxies),
        lexical=LexicalSearch(
            sessions,
            engine,
            refresh_s=settings.search_lexical_refresh_s,
            store_root=settings.lexical_store_root,
        )
        if settings.search_lexical
        else None,
        decodes=DecodeSlots(settings.upload_decode_concurrency, settings.upload_decode_wait_s),
        streams=notification_hub(settings, database_url),
        key_cache=key_cache(settings, database_url),
        last_use=LastUse(record_use),
        health=Snapshot(settings.health_snapshot_s),
        connections=Connections(
            per_caller=settings.stream_max_per_caller,
            per_address=settings.stream_max_per_address,
            per_replica=settings.stream_max_per_replica,
        ),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        # Work queued before a restart is picked up without waiting for news.
        await ctx.dispatch.wake()
        if ctx.lexical is not None:
            ctx.lexical.start()
        ctx.search.start()
        ctx.key_cache.start()
        async with mcp_door.running(), sampler(ctx):
            yield {}
        await ctx.key_cache.close()
        if ctx.last_use is not None:
            await ctx.last_use.close()
        await ctx.streams.close()
        if ctx.lexical is not None:
            await ctx.lexical.close()
        await ctx.dispatch.close()
        await ctx.search.close()
        ctx.decodes.close()
        await engine.dispose()

    app = FastAPI(
        title="Cairn",
        version="0.1.0",
        description="The knowledge-sharing service for AI agents.",
        lifespan=lifespan,
        # Admission first, for every route (serve_app/http/admission.py); then
        # the page-depth cap of every paged listing (docs/decisions/rate-limits.md,
        # "Security: read costs").
        dependencies=[Depends(admission.gate), Depends(page_window)],
        generate_unique_id_function=contract.operation_id,
    )
    app.state.ctx = ctx
    install_error_handlers(app)
    _page_errors(app)
    app.include_router(meta.router)
    app.include_router(analytics.router)
    app.include_router(agents.router)
    app.include_router(humans.router)
    app.include_router(patterns.router)
    app.include_router(comments.router)
    app.include_router(questions.router)
    app.include_router(answers.router)
    app.include_router(collections.router)
    app.include_router(feed.router)
    app.include_router(changes.router)
    app.include_router(export.router)
    app.include_router(search.router)
    app.include_router(notifications.router)
    app.include_router(notification_stream.router)
    app.include_router(moderation.router)
    app.include_router(uploads.router)
    app.include_router(admin.router)
    app.include_router(oauth.router)
    app.include_router(webhooks.router)
    app.include_router(webhooks.owner_router)
    app.include_router(web_pages.router)
    app.include_router(web_content.router)
    app.include_router(web_owners.router)
    app.include_router(web_staff.router)
    app.include_router(web_seo.router)
    contract.install(app)
    # The MCP door (POST /mcp): a plain route (not an APIRoute), so it stays out
    # of /openapi.json; the middlewares below and the error handlers wrap it too.
    mcp_door = McpDoor(ctx, contract.api_routes(app.routes))
    app.router.routes.extend(mcp_door.routes)
    # The routes FastAPI adds itself: the API docs, read by address, and
    # never framed (the session cookie authorises JSON writes on this origin).
    for route in app.router.routes:
        if getattr(route, "path", None) in _DOC_PATHS:
            route.app = _never_framed(route.app)  # type: ignore[attr-defined]
            admission.guard(route, admission.OPEN)
    # Deny by default: every route states its admission rule, or no app.
    admission.check(app.router.routes)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        allowances={
            ("POST", "/api/upload"): settings.upload_max_bytes + UPLOAD_OVERHEAD_BYTES,
            **oauth_door.BODY_LIMITS,
        },
    )
    app.add_middleware(QueryStringGuard)
    # Outermost: gives back a request's long-lived connection slots once its
    # answer has ended, whichever door took them.
    app.add_middleware(admission.SlotKeeper)
    # Outside everything: every request counted and timed, whatever answered
    # it (serve_app/http/observe.py).
    if metrics.enabled():
        app.add_middleware(Observe)
    return app
