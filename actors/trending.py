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

import math
from collections.abc import Iterable
from typing import Any

HORIZON_DAYS = 30
BUCKET_S = 3600
# A withdrawn vote is remembered (as value 0) this long, so a late "set" for
# it that crossed the "unset" in flight cannot bring it back.
TOMBSTONE_S = 3600

Event = tuple[Any, ...]


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
        self._version = 0
        self._ranked: dict[int, tuple[int, int, list[tuple[str, int]]]] = {}
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
        self._version += 1
        return True

    def _bucket(self, ts: float) -> int:
        return math.floor(ts / self.bucket_s)

    def _add(self, p: int, bucket: int, delta: int) -> None:
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
        self._version += 1

    # -- reading --------------------------------------------------------

    def top(self, days: int, limit: int, now: float) -> list[tuple[str, int]]:
        """The ``limit`` patterns with the highest positive score over ``days``
        days (hour granularity), best first; ties by pattern id."""
        days = max(1, min(days, self.horizon_days))
        first_bucket = self._bucket(now) - days * 86400 // self.bucket_s + 1
        cached = self._ranked.get(days)
        if cached is not None and cached[0] == self._version and cached[1] == first_bucket:
            return cached[2][:limit]
        ranked: list[tuple[str, int]] = []
        for p, buckets in self._buckets.items():
            score = sum(n for b, n in buckets.items() if b >= first_bucket)
            if score > 0:
                ranked.append((self._patterns[p], score))
        ranked.sort(key=lambda item: (-item[1], item[0]))
        self._ranked[days] = (self._version, first_bucket, ranked)
        return ranked[:limit]

    def score(self, pattern_id: str, days: int, now: float) -> int:
        p = self._pattern_index.get(str(pattern_id))
        if p is None:
            return 0
        first_bucket = self._bucket(now) - days * 86400 // self.bucket_s + 1
        return sum(n for b, n in self._buckets.get(p, {}).items() if b >= first_bucket)

    def stats(self) -> dict[str, int]:
        return {
            "votes": len(self._votes),
            "patterns": len(self._buckets),
            "buckets": sum(len(b) for b in self._buckets.values()),
        }
