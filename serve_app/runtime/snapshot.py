"""A value taken again at most once per period, however many ask for it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Snapshot(Generic[T]):
    """The latest value ``take`` gave, taken again once it is older than
    ``max_age_s`` (0: every time). Callers arriving while it is being taken
    wait for that one take instead of starting their own."""

    def __init__(self, max_age_s: float) -> None:
        self.max_age_s = max_age_s
        self._value: T | None = None
        self._at = 0.0
        self._lock = asyncio.Lock()
        self.takes = 0  # values taken (for tests and the operator)

    def _fresh(self) -> T | None:
        if self._value is not None and time.monotonic() - self._at < self.max_age_s:
            return self._value
        return None

    async def get(self, take: Callable[[], Awaitable[T]]) -> T:
        found = self._fresh()
        if found is not None:
            return found
        async with self._lock:
            found = self._fresh()
            if found is None:
                found = await take()
                self.takes += 1
                self._value, self._at = found, time.monotonic()
            return found
