"""Rate-limit windows as a plain class (no Ray here; see ratelimit_actor.py).

Each key gets a fixed window that opens at its first request and lasts
``window_s`` seconds (GitHub-style): within a window at most ``limit`` hits
are admitted, and ``reset_at`` is when the window closes. See
docs/decisions.md ("Rate limits") for why fixed windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the rate-limit table."""

    name: str
    limit: int
    window_s: int


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer for one hit: admitted or not, and the numbers for the headers."""

    allowed: bool
    limit: int
    remaining: int
    reset_at: float  # epoch seconds at which the window closes

    def retry_after(self, now: float) -> int:
        """Whole seconds until the window resets (at least 1 when refused)."""
        if self.allowed:
            return 0
        return max(1, math.ceil(self.reset_at - now))

    def as_tuple(self) -> tuple[bool, int, int, float]:
        return (self.allowed, self.limit, self.remaining, self.reset_at)

    @classmethod
    def from_tuple(cls, t: tuple[bool, int, int, float]) -> Decision:
        return cls(bool(t[0]), int(t[1]), int(t[2]), float(t[3]))


class WindowLimiter:
    """Fixed windows per key; O(1) memory per active key, swept as windows expire."""

    SWEEP_EVERY = 4096

    def __init__(self) -> None:
        # key -> [reset_at, count]
        self._windows: dict[str, list[float]] = {}
        self._hits_since_sweep = 0

    def __len__(self) -> int:
        return len(self._windows)

    def hit(self, key: str, limit: int, window_s: float, now: float, cost: int = 1) -> Decision:
        """Count ``cost`` hits for ``key`` if the window has room; never over-admits."""
        self._hits_since_sweep += 1
        if self._hits_since_sweep >= self.SWEEP_EVERY:
            self.sweep(now)
        window = self._windows.get(key)
        if window is None or now >= window[0]:
            window = [now + window_s, 0.0]
            self._windows[key] = window
        reset_at, count = window[0], int(window[1])
        if count + cost > limit:
            return Decision(False, limit, max(0, limit - count), reset_at)
        window[1] = count + cost
        return Decision(True, limit, limit - count - cost, reset_at)

    def peek(self, key: str, limit: int, now: float) -> Decision:
        """The state of ``key`` without counting a hit."""
        window = self._windows.get(key)
        if window is None or now >= window[0]:
            return Decision(True, limit, limit, now)
        count = int(window[1])
        return Decision(count < limit, limit, max(0, limit - count), window[0])

    def sweep(self, now: float) -> int:
        """Drop expired windows; returns how many were dropped."""
        self._hits_since_sweep = 0
        expired = [k for k, w in self._windows.items() if now >= w[0]]
        for key in expired:
            del self._windows[key]
        return len(expired)

    def export(self, now: float) -> list[tuple[str, float, int]]:
        """Live windows as (key, reset_at, count), for a checkpoint."""
        return [(k, w[0], int(w[1])) for k, w in self._windows.items() if now < w[0]]

    def load(self, rows: list[tuple[str, float, int]], now: float) -> None:
        """Restore windows from :meth:`export`; expired rows are ignored."""
        for key, reset_at, count in rows:
            if now < reset_at:
                self._windows[key] = [float(reset_at), float(count)]
