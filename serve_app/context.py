"""What every request handler can reach: settings, database, limiter, caches."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from actors.ratelimit import Rule
from serve_app.kit.clientip import Network
from serve_app.kit.hooks import Notify
from serve_app.runtime.connections import Connections
from serve_app.runtime.decodes import DecodeSlots
from serve_app.runtime.dispatch import Dispatch
from serve_app.runtime.index_copies.lexical import LexicalSearch
from serve_app.runtime.keycache import KeyCache
from serve_app.runtime.lastuse import LastUse
from serve_app.runtime.ratelimit import RateLimiter
from serve_app.runtime.semantic import SemanticSearch
from serve_app.runtime.snapshot import Snapshot
from serve_app.runtime.streamhub import StreamHub
from serve_app.runtime.trending import Trending
from serve_app.settings import Settings
from storage.files import FileStore, PostgresFileStore


@dataclass
class AppContext:
    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    # Autocommit sessions for reads that need no transaction: no BEGIN/COMMIT
    # round trips (a third of a simple read's cost).
    read_sessions: async_sessionmaker[AsyncSession]
    limiter: RateLimiter
    trending: Trending
    dispatch: Dispatch
    secret: bytes
    rules: dict[str, Rule]
    trusted: list[Network]
    # Where uploaded images live (Postgres by default; storage/files.py).
    files: FileStore | PostgresFileStore
    # The vector side of search (serve_app/runtime/semantic.py).
    search: SemanticSearch
    # Bounded image checks for uploads (serve_app/runtime/decodes.py).
    decodes: DecodeSlots
    # The open notification streams of this process and the LISTEN
    # connection that wakes them (serve_app/runtime/streamhub.py).
    streams: StreamHub
    # The long-lived connections this process holds, by caller, address and
    # in all (serve_app/http/admission.py).
    connections: Connections
    # The API keys this process verified lately (serve_app/runtime/keycache.py).
    key_cache: KeyCache = field(default_factory=lambda: KeyCache(0, 0))
    # The keys' last use, written in batches (serve_app/runtime/lastuse.py).
    last_use: LastUse | None = None
    # Where Serve's own HAProxy connects from (this host, the cluster's nodes):
    # believed as the peer that appended X-Forwarded-For's last entry. Empty
    # unless Cairn's HAProxy launcher is in use (serve_app/kit/clientip.py).
    local_proxies: list[Network] = field(default_factory=list)
    # The BM25 side of search, one per process (serve_app/runtime/index_copies/lexical.py); None
    # with CAIRN_SEARCH_LEXICAL=false (Postgres full text instead).
    lexical: LexicalSearch | None = None
    # Small per-process caches (e.g. the category list); counted by /api/health.
    caches: dict[str, Any] = field(default_factory=dict)
    # /api/health's latest look at the parts (serve_app/services/health.py).
    health: Snapshot[Any] = field(default_factory=lambda: Snapshot(1.0))
    started_at: float = field(default_factory=time.time)

    @property
    def notify(self) -> Notify:
        return Notify(
            mail=self.settings.mail_enabled,
            wake=self.dispatch.wake,
            throttle_s=self.settings.notice_throttle_hours * 3600,
        )

    def cache_entries(self) -> int:
        return len(self.caches) + self.limiter.cache_entries() + len(self.key_cache)
