"""The trust score's formula (serve_app/kit/trust.py) and the search prior."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from serve_app.kit import trust
from serve_app.services.search import Hit, trust_prior

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def report(
    group: str, outcome: str = trust.WORKED, revision: int = 1, **kw: object
) -> trust.Report:
    return trust.Report(group=group, outcome=outcome, revision=revision, at=kw.pop("at", NOW), **kw)  # type: ignore[arg-type]


def test_wilson_lower_bound_values() -> None:
    assert trust.wilson_lower(0, 0) == 0
    assert trust.wilson_lower(1, 1) == pytest.approx(0.2065, abs=1e-3)
    assert trust.wilson_lower(2, 2) == pytest.approx(0.3424, abs=1e-3)
    assert trust.wilson_lower(10, 10) == pytest.approx(0.7225, abs=1e-3)
    assert trust.wilson_lower(0, 5) == 0
    # More evidence of the same rate raises the bound.
    assert trust.wilson_lower(8, 10) > trust.wilson_lower(4, 5)


def test_each_group_counts_once_by_its_latest_report() -> None:
    reports = [
        report("a", trust.FAILED, 1, at=NOW - timedelta(days=1)),
        report("a", trust.WORKED, 2),
        report("b", trust.WORKED, 1),
        report("b", trust.WORKED, 1, at=NOW - timedelta(hours=1)),
    ]
    latest = trust.latest_per_group(reports)
    assert [(r.group, r.outcome, r.revision) for r in latest] == [
        ("a", trust.WORKED, 2),
        ("b", trust.WORKED, 1),
    ]
    s = trust.summary(reports, excluded=1, current_revision=1, now=NOW)
    assert s["independent_verifiers"] == 2 and s["counts"][trust.WORKED] == 2
    s = trust.summary(reports, excluded=1, current_revision=2, now=NOW)
    assert s["independent_verifiers"] == 1 and s["counts"][trust.WORKED] == 1
    assert s["verified_revision"] == 2 and s["label"] == "verified on the current revision (2)"
    assert s["excluded_reports"] == 1


def test_older_reports_and_weak_verifiers_weigh_less() -> None:
    fresh = trust.score([report("a")], 1, NOW)
    old = trust.score([report("a", at=NOW - timedelta(days=365))], 1, NOW)
    weak = trust.score([report("a", verifier_weight=trust.verifier_weight(0))], 1, NOW)
    assert fresh > old > 0 and fresh > weak > 0
    assert trust.verifier_weight(0) == 0.5
    assert trust.verifier_weight(100) == 1.0
    # Worked with changes counts half; did not work counts against.
    assert trust.score([report("a", trust.CHANGED)], 1, NOW) < fresh
    assert trust.score([report("a"), report("b", trust.FAILED)], 1, NOW) < trust.score(
        [report("a"), report("b")], 1, NOW
    )
    assert trust.score([report("a", trust.FAILED)], 1, NOW) == 0


def test_a_day_old_account_counts_a_younger_one_does_not() -> None:
    assert not trust.old_enough(0)
    assert not trust.old_enough(86_399)
    assert trust.old_enough(86_400)


def test_only_reports_of_the_current_revision_are_scored() -> None:
    """An edit may replace the whole text: reports of older revisions keep
    the history (label, verified_revision) but weigh nothing."""
    four = [report(g, revision=1) for g in "abcd"]
    assert trust.score(four, 1, NOW) > 0.5
    assert trust.score(four, 2, NOW) == 0
    s = trust.summary(four, excluded=0, current_revision=2, now=NOW)
    assert s["score"] == 0 and s["independent_verifiers"] == 0
    assert s["counts"] == dict.fromkeys(trust.OUTCOMES, 0) and s["environments"] == []
    assert s["verified_revision"] == 1 and s["on_current_revision"] is False
    assert s["label"] == "verified on revision 1; current is 2"
    assert s["last_verified_at"] == NOW.isoformat()
    # One report on the new revision: only it is scored.
    s = trust.summary([*four, report("e", revision=2)], excluded=0, current_revision=2, now=NOW)
    assert s["independent_verifiers"] == 1 and s["score"] == trust.score([report("e")], 1, NOW)


def test_labels() -> None:
    assert trust.label(None, 4) == "not verified yet"
    assert trust.label(3, 5) == "verified on revision 3; current is 5"
    assert trust.label(5, 5) == "verified on the current revision (5)"


def test_the_prior_is_bounded_and_changes_nothing_without_trust() -> None:
    a, b, c = (uuid.uuid4() for _ in range(3))

    def hits(t1: float | None, t2: float | None) -> list[tuple[Hit, uuid.UUID, float | None]]:
        # Each hit with its item's trust score as search reads it (None: none).
        return [
            (Hit("pattern", 1, 0.80), a, t1),
            (Hit("pattern", 2, 0.79), b, t2),
            (Hit("agent", 3, 0.5), c, None),
        ]

    assert [h.search_id for h, _ in trust_prior(hits(None, None))] == [1, 2, 3]
    same = trust_prior(hits(0.0, 0.0))
    assert [(h.search_id, h.score) for h, _ in same] == [(1, 0.80), (2, 0.79), (3, 0.5)]
    # A near-duplicate that works moves ahead ...
    moved = trust_prior(hits(None, 0.4))
    assert [h.search_id for h, _ in moved] == [2, 1, 3]
    assert moved[0][0].trust == 0.4 and moved[0][0].score == pytest.approx(0.79 * 1.06)
    # ... but full trust never lifts a hit past one 15 % more relevant.
    far = [(Hit("pattern", 1, 1.0), a, None), (Hit("pattern", 2, 0.86), b, 1.0)]
    assert [h.search_id for h, _ in trust_prior(far)] == [1, 2]
    assert trust.with_prior(-0.2, 1.0) > -0.2  # a negative score is raised too, never lowered
