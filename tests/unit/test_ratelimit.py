"""Fixed windows (single-token use of LeaseLimiter) and the in-process limiter."""

from __future__ import annotations

import asyncio

from actors.ratelimit import Decision, LeaseLimiter, Rule
from serve_app.runtime.ratelimit import LocalRateLimiter


def test_admits_exactly_the_limit_per_window() -> None:
    limiter = LeaseLimiter()
    decisions = [limiter.hit("k", 5, 60, now=1000.0 + i * 0.01) for i in range(8)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 3
    assert [d.remaining for d in decisions[:5]] == [4, 3, 2, 1, 0]
    assert all(d.reset_at == 1060.0 for d in decisions)


def test_window_reopens_at_reset() -> None:
    limiter = LeaseLimiter()
    for _ in range(3):
        limiter.hit("k", 3, 10, now=0.0)
    assert not limiter.hit("k", 3, 10, now=9.999).allowed
    reopened = limiter.hit("k", 3, 10, now=10.0)
    assert reopened.allowed and reopened.remaining == 2 and reopened.reset_at == 20.0


def test_keys_are_independent() -> None:
    limiter = LeaseLimiter()
    assert limiter.hit("a", 1, 10, now=0).allowed
    assert not limiter.hit("a", 1, 10, now=0).allowed
    assert limiter.hit("b", 1, 10, now=0).allowed


def test_refusal_does_not_consume() -> None:
    limiter = LeaseLimiter()
    limiter.hit("k", 2, 10, now=0)
    limiter.hit("k", 2, 10, now=0)
    for _ in range(5):
        assert not limiter.hit("k", 2, 10, now=1).allowed
    # Only the two admitted requests were counted: the next window starts fresh.
    assert limiter.hit("k", 2, 10, now=10).remaining == 1


def test_retry_after_rounds_up_and_is_at_least_one() -> None:
    refused = Decision(False, 10, 0, reset_at=100.2)
    assert refused.retry_after(now=90.0) == 11
    assert refused.retry_after(now=100.19) == 1
    assert Decision(True, 10, 3, 100.0).retry_after(now=0) == 0


def test_expired_windows_are_swept() -> None:
    limiter = LeaseLimiter()
    for i in range(LeaseLimiter.SWEEP_EVERY * 2):
        limiter.hit(f"k{i}", 1, 1, now=float(i))
    assert len(limiter) < LeaseLimiter.SWEEP_EVERY + 1


async def test_local_limiter_is_exact_under_concurrency() -> None:
    limiter = LocalRateLimiter()
    rule = Rule("vote", 100, 3600)
    results = await asyncio.gather(*[limiter.hit(rule, "agent-1") for _ in range(200)])
    assert sum(d.allowed for d in results) == 100
