"""TrendingCounter without Ray: buckets, windows, idempotent and ordered events."""

from __future__ import annotations

import random

import pytest

from actors.trending import TrendingCounter

NOW = 1_800_000_000.0
HOUR = 3600.0
DAY = 86400.0


def test_scores_rank_recent_net_votes() -> None:
    counter = TrendingCounter()
    counter.apply(
        [
            ("set", "a", "v1", 1, NOW - HOUR),
            ("set", "a", "v2", 1, NOW - 2 * HOUR),
            ("set", "b", "v1", 1, NOW - HOUR),
            ("set", "c", "v1", -1, NOW - HOUR),
            ("set", "d", "v1", 1, NOW - 10 * DAY),
        ],
        NOW,
    )
    assert counter.top(7, 10, NOW) == [("a", 2), ("b", 1)]
    assert counter.top(30, 10, NOW) == [("a", 2), ("b", 1), ("d", 1)]
    assert counter.top(7, 1, NOW) == [("a", 2)]
    assert counter.score("c", 7, NOW) == -1


def test_switch_and_withdraw_move_the_score() -> None:
    counter = TrendingCounter()
    counter.apply([("set", "a", "v1", 1, NOW - 5)], NOW)
    counter.apply([("set", "a", "v1", -1, NOW - 3)], NOW)
    assert counter.score("a", 7, NOW) == -1
    counter.apply([("unset", "a", "v1", NOW - 1)], NOW)
    assert counter.score("a", 7, NOW) == 0 and counter.top(7, 10, NOW) == []


def test_events_are_idempotent_and_stale_ones_ignored() -> None:
    counter = TrendingCounter()
    event = ("set", "a", "v1", 1, NOW - 10)
    assert counter.apply([event, event], NOW) == 1
    assert counter.score("a", 7, NOW) == 1
    # The vote was withdrawn later; a "set" that arrives after that is stale.
    counter.apply([("unset", "a", "v1", NOW - 5), event], NOW)
    assert counter.score("a", 7, NOW) == 0
    # A rebuild that saw the vote, then the same event again: still one vote.
    counter.load([("a", "v1", 1, NOW - 10)], NOW)
    counter.apply([event], NOW)
    assert counter.score("a", 7, NOW) == 1


def test_a_vote_moves_to_the_bucket_of_its_last_change() -> None:
    counter = TrendingCounter()
    counter.apply([("set", "a", "v1", 1, NOW - 20 * DAY)], NOW)
    assert counter.score("a", 7, NOW) == 0 and counter.score("a", 30, NOW) == 1
    counter.apply([("set", "a", "v1", -1, NOW - HOUR)], NOW)
    assert counter.score("a", 7, NOW) == -1 and counter.score("a", 30, NOW) == -1


def test_days_are_clamped_and_old_votes_pruned() -> None:
    counter = TrendingCounter()
    counter.apply([("set", "a", "v1", 1, NOW - 29 * DAY), ("set", "b", "v1", 1, NOW)], NOW)
    assert counter.top(365, 10, NOW) == [("a", 1), ("b", 1)]  # 30 days at most
    later = NOW + 2 * DAY
    counter.prune(later)
    assert counter.top(30, 10, later) == [("b", 1)]
    assert len(counter) == 1
    # A vote older than the horizon is not even stored.
    assert counter.apply([("set", "c", "v1", 1, NOW - 31 * DAY)], NOW) == 0


def test_bad_events_are_refused() -> None:
    counter = TrendingCounter()
    with pytest.raises(ValueError):
        counter.apply([("set", "a", "v1", 2, NOW)], NOW)
    with pytest.raises(ValueError):
        counter.apply([("boost", "a")], NOW)


def test_matches_a_rebuild_after_random_events() -> None:
    """Whatever the event history, the state equals a load of the standing votes."""
    rng = random.Random(3)
    counter = TrendingCounter()
    standing: dict[tuple[str, str], tuple[int, float]] = {}
    ts = NOW - 20 * DAY
    for i in range(3000):
        if i % 50 == 0:  # rankings kept current event by event from here on
            for days in (1, 7, 30):
                counter.top(days, 10, ts)
        ts += rng.uniform(0, 600)
        pattern, voter = f"p{rng.randrange(30)}", f"v{rng.randrange(40)}"
        if rng.random() < 0.25:
            counter.apply([("unset", pattern, voter, ts)], ts)
            standing.pop((pattern, voter), None)
        else:
            value = rng.choice([1, -1])
            counter.apply([("set", pattern, voter, value, ts)], ts)
            standing[(pattern, voter)] = (value, ts)
    rebuilt = TrendingCounter()
    rebuilt.load([(p, v, value, t) for (p, v), (value, t) in standing.items()], ts)
    for days in (1, 7, 30):
        assert counter.top(days, 100, ts) == rebuilt.top(days, 100, ts)
        assert counter.top(days, 100, ts)  # not vacuous


def test_rankings_follow_events_without_a_rebuild() -> None:
    counter = TrendingCounter()
    counter.apply([("set", "a", "v1", 1, NOW), ("set", "b", "v1", 1, NOW)], NOW)
    assert counter.top(7, 10, NOW) == [("a", 1), ("b", 1)]
    counter.apply([("set", "b", "v2", 1, NOW)], NOW)
    assert counter.top(7, 10, NOW) == [("b", 2), ("a", 1)]
    counter.apply([("set", "a", "v1", -1, NOW + 1)], NOW)
    assert counter.top(7, 10, NOW) == [("b", 2)]
    # An old vote (outside the 7-day window) moves only the 30-day ranking.
    counter.top(30, 10, NOW)
    counter.apply([("set", "c", "v1", 1, NOW - 10 * DAY)], NOW)
    assert counter.top(7, 10, NOW) == [("b", 2)]
    assert counter.top(30, 10, NOW) == [("b", 2), ("c", 1)]
