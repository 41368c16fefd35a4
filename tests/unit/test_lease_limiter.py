"""Leased rate-limit windows (plain class behind the RateLimiterShard actor)."""

from __future__ import annotations

import random

import pytest

from actors.ratelimit import LeaseLimiter


def test_single_tokens_behave_like_a_fixed_window() -> None:
    limiter = LeaseLimiter()
    grants = [limiter.acquire("k", 5, 60, 1, "a", now=100.0) for _ in range(7)]
    assert [g.granted for g in grants] == [1] * 5 + [0, 0]
    assert [g.remaining for g in grants[:5]] == [4, 3, 2, 1, 0]
    assert all(g.reset_at == 160.0 for g in grants)


def test_blocks_shrink_as_the_window_fills() -> None:
    limiter = LeaseLimiter()
    grants = []
    while (g := limiter.acquire("k", 1000, 60, 16, "a", now=0)).granted:
        grants.append(g.granted)
    assert grants[0] == 16
    assert grants[-5:] == [1] * 5  # one token per request near the limit
    assert sum(grants) == 1000  # each acquire settles the previous (spent) block


def test_release_returns_unused_tokens() -> None:
    limiter = LeaseLimiter()
    g = limiter.acquire("k", 100, 60, 10, "a", now=0)
    assert g.granted == 10
    limiter.release("k", "a", unused=6, reset_at=g.reset_at, now=1)
    again = limiter.acquire("k", 100, 60, 1, "b", now=1)
    assert again.remaining == 100 - 4 - 1


def test_release_cannot_return_more_than_was_leased() -> None:
    limiter = LeaseLimiter()
    g = limiter.acquire("k", 100, 60, 10, "a", now=0)
    limiter.release("k", "a", unused=1000, reset_at=g.reset_at, now=1)
    limiter.release("k", "a", unused=1000, reset_at=g.reset_at, now=1)  # twice: no effect
    assert limiter.acquire("k", 100, 60, 1, "b", now=1).remaining == 100 - 1 - 1


def test_release_for_a_past_window_is_ignored() -> None:
    limiter = LeaseLimiter()
    g = limiter.acquire("k", 100, 10, 10, "a", now=0)
    fresh = limiter.acquire("k", 100, 10, 1, "b", now=11)  # new window
    limiter.release("k", "a", unused=9, reset_at=g.reset_at, now=11)
    assert limiter.acquire("k", 100, 10, 1, "b", now=11).remaining == fresh.remaining - 1


def test_refusal_says_tokens_are_out_elsewhere() -> None:
    limiter = LeaseLimiter()
    a = limiter.acquire("k", 40, 60, 8, "a", now=0)  # 40 // 4 = 10 >= 8
    assert a.granted == 8
    while limiter.acquire("k", 40, 60, 1, "b", now=0).granted:
        pass
    refused = limiter.acquire("k", 40, 60, 1, "b", now=0)
    assert refused.granted == 0 and refused.leased_elsewhere == 7
    limiter.release("k", "a", unused=7, reset_at=a.reset_at, now=0)
    assert limiter.acquire("k", 40, 60, 1, "b", now=0).granted == 1


def test_small_windows_are_never_leased() -> None:
    limiter = LeaseLimiter()
    grants = [limiter.acquire("k", 10, 60, 16, "a", now=0) for _ in range(11)]
    assert [g.granted for g in grants] == [1] * 10 + [0]
    assert [g.remaining for g in grants[:10]] == list(range(9, -1, -1))


@pytest.mark.parametrize("seed", range(25))
def test_random_clients_never_exceed_and_finally_reach_the_limit(seed: int) -> None:
    """Clients acquire blocks, use some tokens, release or re-acquire in random
    order. Admitted requests never exceed the limit, and once every client has
    given back what it did not use, exactly the limit has been admitted."""
    rng = random.Random(seed)
    limit = rng.choice([1, 7, 50, 150, 1000])
    limiter = LeaseLimiter()
    credit = {c: 0 for c in "abcd"}
    reset_at = {c: 0.0 for c in "abcd"}
    admitted = 0
    for _ in range(3000):
        client = rng.choice("abcd")
        action = rng.random()
        if action < 0.8:  # a request arrives at this client
            if credit[client] > 0:
                credit[client] -= 1
                admitted += 1
            else:
                g = limiter.acquire("k", limit, 3600, rng.choice([1, 4, 16]), client, now=0)
                if g.granted:
                    admitted += 1
                    credit[client], reset_at[client] = g.granted - 1, g.reset_at
        elif credit[client]:  # the client goes idle and gives back its block
            limiter.release("k", client, credit[client], reset_at[client], now=0)
            credit[client] = 0
        assert admitted <= limit
    for client in "abcd":
        if credit[client]:
            limiter.release("k", client, credit[client], reset_at[client], now=0)
    while limiter.acquire("k", limit, 3600, 1, "z", now=0).granted:
        admitted += 1
    assert admitted == limit


def test_sync_counts_what_was_admitted_on_credit_even_past_the_limit() -> None:
    limiter = LeaseLimiter()
    g = limiter.sync("k", 10, 60, used=4, holding=0, want=0, client="a", now=0)
    assert (g.granted, g.remaining, g.reset_at) == (0, 6, 60)
    g = limiter.sync("k", 10, 60, used=9, holding=0, want=5, client="b", now=1)
    assert (g.granted, g.remaining) == (0, -3)  # over: the true count, nothing granted


def test_sync_grants_blocks_counted_at_once_and_records_holdings() -> None:
    limiter = LeaseLimiter()
    g = limiter.sync("k", 1000, 60, used=2, holding=0, want=64, client="a", now=0)
    assert g.granted == 64 and g.remaining == 1000 - 2 - 64
    # b sees a's block as leased elsewhere, and a smaller share of what is left.
    h = limiter.sync("k", 1000, 60, used=0, holding=0, want=1000, client="b", now=0)
    assert h.leased_elsewhere == 64
    assert h.granted == (1000 - 66) // (LeaseLimiter.SHARE * 2)
    # a reports it still holds 10 of its tokens, then gives them back.
    limiter.sync("k", 1000, 60, used=0, holding=10, want=0, client="a", now=1)
    limiter.release("k", "a", unused=10, reset_at=g.reset_at, now=1)
    last = limiter.sync("k", 1000, 60, used=0, holding=0, want=0, client="c", now=1)
    assert last.remaining == 1000 - 66 - h.granted + 10
    assert last.leased_elsewhere == h.granted


def test_sync_near_the_limit_grants_single_tokens_until_none_is_left() -> None:
    limiter = LeaseLimiter()
    granted = 0
    while (g := limiter.sync("k", 20, 60, 0, 0, want=16, client="a", now=0)).granted:
        granted += g.granted
    assert granted == 20 and g.remaining == 0
