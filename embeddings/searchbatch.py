"""Concurrent searches of one FAISS index, run as one call.

An exact (flat) search reads every stored vector once per call: at 100,000
vectors about 7 ms, most of it memory traffic, and the VectorIndex runs it on
its event loop, so one query at a time made that its ceiling (about 140
queries/s, less on shared cores). Here the searches that are waiting when the
loop gets to them go to FAISS together (``FaissIndex.search_many``: one scan
for all of them), each getting its own first ``k``. Nothing waits on purpose:
a lone search runs at once, a burst is answered by one scan.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from embeddings.faiss_index import FaissIndex

Hits = list[tuple[int, float]]


class SearchBatcher:
    def __init__(self, max_batch: int = 64) -> None:
        self._max_batch = max_batch
        # id(index) -> (index, waiting searches); the index object is held so
        # its id cannot be reused while searches wait for it.
        self._waiting: dict[int, tuple[FaissIndex, list[tuple[np.ndarray, int, Any]]]] = {}
        self._scheduled = False
        self.calls = 0  # FAISS calls made
        self.searches = 0  # searches answered

    async def search(self, index: FaissIndex, vector: np.ndarray, k: int) -> Hits:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Hits] = loop.create_future()
        self._waiting.setdefault(id(index), (index, []))[1].append((vector, k, future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._run)
        return await future

    def _run(self) -> None:
        self._scheduled = False
        waiting, self._waiting = self._waiting, {}
        for index, searches in waiting.values():
            for start in range(0, len(searches), self._max_batch):
                self._answer(index, searches[start : start + self._max_batch])

    def _answer(self, index: FaissIndex, searches: list[tuple[np.ndarray, int, Any]]) -> None:
        live = [s for s in searches if not s[2].done()]  # a caller may have timed out
        if not live:
            return
        try:
            self.calls += 1
            rows = index.search_many(
                np.stack([v.reshape(-1) for v, _, _ in live]), max(k for _, k, _ in live)
            )
        except Exception as exc:  # the same error for each caller, as one search would raise
            for _, _, future in live:
                future.set_exception(exc)
            return
        self.searches += len(live)
        for (_, k, future), hits in zip(live, rows, strict=True):
            future.set_result(hits[:k])

    def stats(self) -> dict[str, int]:
        return {"calls": self.calls, "searches": self.searches}
