"""TrendingCounter: recent pattern votes in hourly buckets, ranked on demand.

A pattern's trending score over the last ``days`` days is the sum of the
standing votes (+1 up, -1 down) that were cast or last changed in that time.
Besides the per-pattern bucket sums the counter remembers each standing vote
(pattern, voter, value, time), so every event is idempotent: a rebuild from
Postgres followed by an event the rebuild already saw, or one event delivered
twice, changes nothing, and an older event never overwrites a newer one.

Events (tuples, so they cross Ray cheaply):
    ("set", pattern_id, voter_id, value, ts)   value +1 / -1, ts in epoch seconds
    ("unset", pattern_id, voter_id, ts)        the vote was withdrawn at ts
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

HORIZON_DAYS = 30
BUCKET_S = 3600
# A withdrawn vote is remembered (as value 0) this long, so a late "set" for
# it that crossed the "unset" in flight cannot bring it back.
TOMBSTONE_S = 3600

Event = tuple[Any, ...]


@dataclass
class _Window:
    """The scores over one ``days`` window, kept current event by event, and the
    patterns with a positive score in ranking order: (-score, pattern id)."""

    first_bucket: int
    scores: dict[int, int] = field(default_factory=dict)
    ranking: list[tuple[int, str]] = field(default_factory=list)


class TrendingCounter:
    def __init__(self, horizon_days: int = HORIZON_DAYS, bucket_s: int = BUCKET_S) -> None:
        self.horizon_days = horizon_days
        self.bucket_s = bucket_s
        self._clear()

    def _clear(self) -> None:
        self._pattern_index: dict[str, int] = {}
        self._patterns: list[str] = []
        self._voter_index: dict[str, int] = {}
        # (pattern index << 32 | voter index) -> (value, ts); value 0 is a withdrawn vote.
        self._votes: dict[int, tuple[int, float]] = {}
        # pattern index -> {bucket number: net votes}
        self._buckets: dict[int, dict[int, int]] = {}
        # Windows asked for so far, by days; rebuilt when the hour turns.
        self._windows: dict[int, _Window] = {}
        self._pruned_at = 0.0

    def __len__(self) -> int:
        return len(self._votes)

    # -- building -------------------------------------------------------

    def load(self, votes: Iterable[tuple[Any, Any, int, float]], now: float) -> int:
        """Replace the state with these standing votes (pattern, voter, value, ts)."""
        self._clear()
        count = 0
        for pattern_id, voter_id, value, ts in votes:
            self._set(str(pattern_id), str(voter_id), int(value), float(ts), now)
            count += 1
        self._pruned_at = now
        return count

    def apply(self, events: Iterable[Event], now: float) -> int:
        """Apply events; returns how many changed anything."""
        changed = 0
        for event in events:
            if event[0] == "set":
                _, pattern_id, voter_id, value, ts = event
                if value not in (1, -1):
                    raise ValueError(f"vote value must be 1 or -1, not {value!r}")
            elif event[0] == "unset":
                _, pattern_id, voter_id, ts = event
                value = 0
            else:
                raise ValueError(f"unknown trending event {event[0]!r}")
            changed += self._set(str(pattern_id), str(voter_id), value, float(ts), now)
        if now - self._pruned_at > self.bucket_s:
            self.prune(now)
        return changed

    def _set(self, pattern_id: str, voter_id: str, value: int, ts: float, now: float) -> bool:
        if ts <= now - self.horizon_days * 86400 and value != 0:
            return False  # too old to ever count
        p = self._pattern_index.get(pattern_id)
        if p is None:
            p = self._pattern_index[pattern_id] = len(self._patterns)
            self._patterns.append(pattern_id)
        v = self._voter_index.setdefault(voter_id, len(self._voter_index))
        key = p << 32 | v
        old = self._votes.get(key)
        if old is not None and (old[1] > ts or old == (value, ts)):
            return False  # stale or already applied
        if old is not None and old[0]:
            self._add(p, self._bucket(old[1]), -old[0])
        if value:
            self._add(p, self._bucket(ts), value)
        self._votes[key] = (value, ts)
        return True

    def _bucket(self, ts: float) -> int:
        return math.floor(ts / self.bucket_s)

    def _add(self, p: int, bucket: int, delta: int) -> None:
        for window in self._windows.values():
            if bucket >= window.first_bucket:
                self._move(window, p, delta)
        buckets = self._buckets.setdefault(p, {})
        total = buckets.get(bucket, 0) + delta
        if total:
            buckets[bucket] = total
        else:
            buckets.pop(bucket, None)
            if not buckets:
                del self._buckets[p]

    def prune(self, now: float) -> None:
        """Forget votes older than the horizon and expired tombstones."""
        oldest = now - self.horizon_days * 86400
        first_bucket = self._bucket(oldest)
        for key, (value, ts) in list(self._votes.items()):
            if ts <= oldest or (value == 0 and ts <= now - TOMBSTONE_S):
                del self._votes[key]
        for p, buckets in list(self._buckets.items()):
            for bucket in [b for b in buckets if b < first_bucket]:
                del buckets[bucket]
            if not buckets:
                del self._buckets[p]
        self._pruned_at = now

    # -- reading --------------------------------------------------------

    def _first_bucket(self, days: int, now: float) -> int:
        return self._bucket(now) - days * 86400 // self.bucket_s + 1

    def _move(self, window: _Window, p: int, delta: int) -> None:
        """Change one pattern's score in a window, keeping the ranking sorted."""
        pattern_id = self._patterns[p]
        old = window.scores.get(p, 0)
        new = old + delta
        if old > 0:
            del window.ranking[bisect.bisect_left(window.ranking, (-old, pattern_id))]
        if new > 0:
            bisect.insort(window.ranking, (-new, pattern_id))
        if new:
            window.scores[p] = new
        else:
            window.scores.pop(p, None)

    def _window(self, days: int, now: float) -> _Window:
        first = self._first_bucket(days, now)
        window = self._windows.get(days)
        if window is None or window.first_bucket != first:
            # New, or the hour turned: sum the buckets once; events keep it current.
            window = _Window(first)
            for p, buckets in self._buckets.items():
                score = sum(n for b, n in buckets.items() if b >= first)
                if score:
                    window.scores[p] = score
            window.ranking = sorted(
                (-score, self._patterns[p]) for p, score in window.scores.items() if score > 0
            )
            self._windows[days] = window
        return window

    def top(self, days: int, limit: int, now: float) -> list[tuple[str, int]]:
        """The ``limit`` patterns with the highest positive score over ``days``
        days (hour granularity), best first; ties by pattern id."""
        window = self._window(max(1, min(days, self.horizon_days)), now)
        return [(pattern_id, -neg) for neg, pattern_id in window.ranking[:limit]]

    def score(self, pattern_id: str, days: int, now: float) -> int:
        p = self._pattern_index.get(str(pattern_id))
        if p is None:
            return 0
        first_bucket = self._first_bucket(days, now)
        return sum(n for b, n in self._buckets.get(p, {}).items() if b >= first_bucket)

    def stats(self) -> dict[str, int]:
        return {
            "votes": len(self._votes),
            "patterns": len(self._buckets),
            "buckets": sum(len(b) for b in self._buckets.values()),
            "windows": len(self._windows),
        }
