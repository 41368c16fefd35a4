"""Rate-limit windows as a plain class (no Ray here; see ratelimit_actor.py).

Each key gets a fixed window that opens at its first request and lasts
``window_s`` seconds (GitHub-style): within a window at most ``limit`` requests
are admitted, and ``reset_at`` is when the window closes. See
docs/decisions/rate-limits.md ("Rate limits") for why fixed windows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


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


@dataclass(frozen=True, slots=True)
class Grant:
    """The answer to an acquire: how many tokens, and the window's state."""

    granted: int  # tokens granted; the first is for the request that asked
    limit: int
    remaining: int  # tokens neither granted nor leased after this grant
    reset_at: float
    leased_elsewhere: int  # tokens other clients hold and may still return

    def as_tuple(self) -> tuple[int, int, int, float, int]:
        return (self.granted, self.limit, self.remaining, self.reset_at, self.leased_elsewhere)

    @classmethod
    def from_tuple(cls, t: tuple[int, int, int, float, int]) -> Grant:
        return cls(int(t[0]), int(t[1]), int(t[2]), float(t[3]), int(t[4]))


@dataclass(slots=True)
class _LeaseWindow:
    reset_at: float
    count: int = 0  # tokens admitted or leased in this window
    leases: dict[str, int] = field(default_factory=dict)  # client -> tokens it may still use


class LeaseLimiter:
    """Fixed windows (as :class:`WindowLimiter`) whose tokens can be leased in
    small blocks to clients (ingress replicas), so a client far below its limit
    needs no round trip per request.

    Never over-admits: leased tokens count as spent when granted. A block is
    returned by :meth:`release` when its client stops needing it, or settled
    (all used) when that client acquires again; ``leased_elsewhere`` tells a
    refused client that tokens may still come back, so it can retry instead of
    refusing a request the limit still allows. Blocks shrink as the window
    fills, down to one token per request near the limit, and small windows
    (fewer than SHARE * MIN_BLOCK tokens left) are never leased.
    """

    SWEEP_EVERY = 4096
    SHARE = 4  # a block is at most 1/(SHARE * holders) of what is left
    MIN_BLOCK = 4  # below this, one token per request (and exact headers)

    def __init__(self) -> None:
        self._windows: dict[str, _LeaseWindow] = {}
        self._calls = 0

    def __len__(self) -> int:
        return len(self._windows)

    def hit(self, key: str, limit: int, window_s: float, now: float) -> Decision:
        """Admit one request, with no block: a plain fixed-window check."""
        grant = self.acquire(key, limit, window_s, 1, "", now)
        return Decision(grant.granted > 0, limit, grant.remaining, grant.reset_at)

    def _window(self, key: str, window_s: float, now: float) -> _LeaseWindow:
        self._calls += 1
        if self._calls >= self.SWEEP_EVERY:
            self._calls = 0
            for k in [k for k, w in self._windows.items() if now >= w.reset_at]:
                del self._windows[k]
        window = self._windows.get(key)
        if window is None or now >= window.reset_at:
            window = _LeaseWindow(reset_at=now + window_s)
            self._windows[key] = window
        return window

    def acquire(
        self, key: str, limit: int, window_s: float, want: int, client: str, now: float
    ) -> Grant:
        window = self._window(key, window_s, now)
        # A client asks again only once its previous block is spent: settle it.
        window.leases.pop(client, None)
        available = limit - window.count
        elsewhere = sum(window.leases.values())
        if available <= 0:
            return Grant(0, limit, 0, window.reset_at, elsewhere)
        share = available // (self.SHARE * (len(window.leases) + 1))
        granted = min(want, share) if share >= self.MIN_BLOCK else 1
        window.count += granted
        if granted > 1:
            window.leases[client] = granted - 1
        return Grant(granted, limit, available - granted, window.reset_at, elsewhere)

    def sync(
        self,
        key: str,
        limit: int,
        window_s: float,
        used: int,
        holding: int,
        want: int,
        client: str,
        now: float,
    ) -> Grant:
        """A replica's reconciliation of one key (``RayRateLimiter``'s local
        shares): count the ``used`` requests it admitted on credit since its
        last report (even past the limit: the count stays true), record the
        ``holding`` tokens of earlier blocks it has not spent yet, and grant
        up to ``want`` more tokens (counted as spent at once, as ``acquire``).
        ``remaining`` may come back negative: the window is over its limit."""
        window = self._window(key, window_s, now)
        window.count += max(0, used)
        window.leases.pop(client, None)
        elsewhere = sum(window.leases.values())
        available = limit - window.count
        granted = 0
        if want > 0 and available > 0:
            share = available // (self.SHARE * (len(window.leases) + 1))
            granted = min(want, share) if share >= self.MIN_BLOCK else min(want, max(1, share))
            window.count += granted
        held = max(0, holding) + granted
        if held:
            window.leases[client] = held
        return Grant(granted, limit, available - granted, window.reset_at, elsewhere)

    def release(self, key: str, client: str, unused: int, reset_at: float, now: float) -> None:
        """Give back ``unused`` tokens of ``client``'s block (of the window ending at reset_at)."""
        window = self._windows.get(key)
        if window is None or window.reset_at != reset_at or now >= window.reset_at:
            return  # that window is over; nothing to give back
        held = window.leases.pop(client, 0)
        window.count -= max(0, min(unused, held))
