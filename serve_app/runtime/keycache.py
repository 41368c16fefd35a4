"""The API keys this replica verified lately, so that a key seen a moment ago
costs its read requests no Postgres read (docs/decisions/admission.md,
"Verified API keys kept in the replica (issue 32)").

What is kept: the database's row of a live key joined to its active agent,
under the keyed hash (HMAC-SHA256 with the server's secret) of the key that
was presented and verified — the value Postgres stores, never the key
itself — for at most ``ttl_s``, at most ``max_entries`` of them, least
recently used first out. Nothing is kept for a key that failed (unknown,
revoked, malformed) or whose agent is deactivated: a flood of bad keys
fills nothing, and a refusal is never prolonged.

When an entry stops being used: at ``ttl_s`` after its read at the latest;
at once in this replica when a request here changes the agent's keys or
standing (``forget`` after the commit); and, in every replica, when the
notice of a change arrives from Postgres (``follow``: triggers send the
agent's id on commit, whoever wrote it). Entries are only served while that
listener listens: when it connects (again) everything is dropped, since
notices sent meanwhile are lost; while it is down nothing is served. A
listener whose connection died without a word is the case the TTL bounds.

Plain asyncio: the message source is passed in (the repository's
``listen_changes`` in the app), as for the stream hub."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from serve_app.runtime.listener import Listener, Source

log = logging.getLogger("cairn.keycache")

# What is kept for a key (storage/repositories/api_keys.py's ``KeyRow``).
Row = Any


class KeyCache:
    """Verified API keys by keyed hash: ``get`` before the read, ``put``
    after it (with the ``generation`` taken before it), ``forget`` on a change."""

    def __init__(
        self,
        ttl_s: float,
        max_entries: int,
        follow: Source | None = None,
        *,
        drain: Callable[[], list[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry_s: float = 0.5,
        retry_max_s: float = 15.0,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._follow = follow
        # The notices already received but not yet read by the listener
        # (read now, without waiting), taken before each answer: a request
        # that reaches this replica after a revocation's notice has is not
        # answered on the revoked key, however busy the event loop.
        self._drain = drain
        self._clock = clock
        self._listener = Listener(
            "credential listener", log, retry_s=retry_s, retry_max_s=retry_max_s
        )
        # digest -> (stored at, agent id, row); the oldest use first.
        self._entries: OrderedDict[bytes, tuple[float, str, Row]] = OrderedDict()
        self._by_agent: dict[str, set[bytes]] = {}
        # Moves on every forget, clear and reconnect: a read that began
        # before one of them may have seen what it undid, so it is not kept.
        self._generation = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Without a listener the TTL alone bounds an entry's life.
        self.listening = follow is None
        self.hits = 0
        self.misses = 0
        self.connects = 0
        self.notices = 0  # agents named by notices (read ahead or by the listener)
        self.read_ahead = 0  # of those, read ahead of the listener by a lookup

    @property
    def enabled(self) -> bool:
        return self.ttl_s > 0 and self.max_entries > 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: bytes) -> Row | None:
        """The row kept for this keyed hash, if it may still be used."""
        if not self.listening:
            return None
        if self._drain is not None and self._entries:
            pending = self._drain()
            if pending:
                self.read_ahead += len(pending)
                self._notice(pending)
        found = self._entries.get(digest)
        if found is None:
            self.misses += 1
            return None
        stored_at, _, row = found
        if self._clock() - stored_at >= self.ttl_s:
            self._remove(digest)
            self.misses += 1
            return None
        self._entries.move_to_end(digest)
        self.hits += 1
        return row

    def generation(self) -> int:
        """Taken before the read whose answer ``put`` will keep."""
        return self._generation

    def put(self, digest: bytes, agent_id: object, row: Row, generation: int) -> None:
        """Keep a verified key's row, unless something was forgotten since
        ``generation`` was taken (or nothing may be served now)."""
        if not self.enabled or not self.listening or generation != self._generation:
            return
        self._remove(digest)
        agent = str(agent_id)
        self._entries[digest] = (self._clock(), agent, row)
        self._by_agent.setdefault(agent, set()).add(digest)
        while len(self._entries) > self.max_entries:
            self._remove(next(iter(self._entries)))

    def forget(self, agent_ids: Iterable[object]) -> None:
        """Drop every key kept for these agents (their keys or standing changed)."""
        self._generation += 1
        for agent_id in agent_ids:
            for digest in self._by_agent.pop(str(agent_id), ()):
                self._entries.pop(digest, None)

    def _notice(self, agent_ids: list[str]) -> None:
        """Postgres's notice of changes to these agents arrived."""
        self.notices += len(agent_ids)
        self.forget(agent_ids)

    def drop(self, digest: bytes) -> None:
        """Drop one key (a read found it no longer good)."""
        self._generation += 1
        self._remove(digest)

    def clear(self) -> None:
        self._generation += 1
        self._entries.clear()
        self._by_agent.clear()

    def _remove(self, digest: bytes) -> None:
        found = self._entries.pop(digest, None)
        if found is None:
            return
        agent_id = found[1]
        digests = self._by_agent.get(agent_id)
        if digests is not None:
            digests.discard(digest)
            if not digests:
                del self._by_agent[agent_id]

    def stats(self) -> dict[str, Any]:
        """For /api/health's details: whether it answers (listening), what it holds."""
        return {
            "enabled": self.enabled,
            "listening": self.listening and self.enabled,
            "kept": len(self._entries),
            "max": self.max_entries,
            "ttl_s": self.ttl_s,
            "hits": self.hits,
            "misses": self.misses,
            "connects": self.connects,
            "notices": self.notices,
            "read_ahead": self.read_ahead,
            "pid": os.getpid(),
        }

    # --- the listener ---------------------------------------------------------

    def start(self) -> None:
        """Start following the changes (in the app's event loop)."""
        if self._follow is None or not self.enabled or self._task is not None or self._closed:
            return
        self._task = asyncio.get_running_loop().create_task(self._listen())

    def _ready(self) -> None:
        # Whatever changed while nobody listened was not heard: start over.
        self.clear()
        self.listening = True
        self.connects += 1

    def _lost(self) -> None:
        self.listening = False
        self.clear()

    async def _listen(self) -> None:
        assert self._follow is not None
        await self._listener.run(
            self._follow, self._ready, self._notice, self._lost, lambda: self._closed
        )

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.listening = False
        self.clear()
