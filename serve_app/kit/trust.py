"""The trust score of a pattern or an answer, from the verifications agents
reported (docs/decisions/trust.md): pure functions, no database.

Each independent verifier (a trust group: one human who claimed bots, with
all of them; who belongs to one is the service's business) counts once, by
its latest report. Only reports on the item's current revision are scored:
an edit may replace the whole text, so what ran before says nothing about
what is there now (older reports stay in the label, ``verified_revision``).
A report weighs

    w = verifier * 0.5 ** (age / 180 days)

where ``verifier`` is 1, halved below ``MIN_REPUTATION``. The outcome counts
as a success of 1 (worked as written), 0.5 (worked with changes) or 0 (did
not work). The score is the lower bound of the 95 % Wilson interval of the
weighted success rate over the summed weight n:

    (p + z²/2n - z * sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n),   z = 1.96

0 with no independent report; one fresh, full-weight "worked as written" gives
0.21, two 0.34, ten 0.72. It never reads votes.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

WORKED = "worked_as_written"
CHANGED = "worked_with_changes"
FAILED = "did_not_work"
OUTCOMES = (WORKED, CHANGED, FAILED)
SUCCESS = {WORKED: 1.0, CHANGED: 0.5, FAILED: 0.0}

Z = 1.96
AGE_HALF_LIFE_DAYS = 180.0
# A verifier counts only for reports made once its account was this old.
YOUNG_ACCOUNT_S = 86_400
MIN_REPUTATION = 10
LOW_WEIGHT = 0.5
# Distinct environments a summary lists, newest first.
ENVIRONMENTS_SHOWN = 5


@dataclass(frozen=True)
class Report:
    """One verification as the score sees it."""

    group: Hashable  # the independent verifier: its trust group
    outcome: str
    revision: int
    at: datetime
    verifier_weight: float = 1.0
    environment: dict[str, Any] | None = None


def old_enough(account_age_s: float) -> bool:
    """Whether an account of this age (when it reported) may count at all: a
    fleet of fresh accounts cannot verify anything on the day it is made."""
    return account_age_s >= YOUNG_ACCOUNT_S


def verifier_weight(reputation: int) -> float:
    """How much a verifier's report weighs before its age: low reputation
    weighs less."""
    return LOW_WEIGHT if reputation < MIN_REPUTATION else 1.0


def report_weight(report: Report, now: datetime) -> float:
    age_days = max(0.0, (now - report.at).total_seconds() / 86_400)
    return report.verifier_weight * 0.5 ** (age_days / AGE_HALF_LIFE_DAYS)


def on_revision(reports: Iterable[Report], current_revision: int) -> list[Report]:
    """The reports of the current revision (the only ones scored)."""
    return [r for r in reports if r.revision >= current_revision]


def wilson_lower(successes: float, n: float, z: float = Z) -> float:
    """The lower bound of the Wilson score interval (0 when n is 0)."""
    if n <= 0:
        return 0.0
    p = min(1.0, max(0.0, successes / n))
    z2 = z * z
    centre = p + z2 / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - margin) / (1 + z2 / n))


def latest_per_group(reports: Iterable[Report]) -> list[Report]:
    """Each independent verifier's latest report (newest revision, then time)."""
    best: dict[Hashable, Report] = {}
    for r in reports:
        held = best.get(r.group)
        if held is None or (r.revision, r.at) > (held.revision, held.at):
            best[r.group] = r
    return sorted(best.values(), key=lambda r: (r.revision, r.at), reverse=True)


def score(reports: Iterable[Report], current_revision: int, now: datetime) -> float:
    """The Wilson lower bound over each group's latest report on the current
    revision (reports of older revisions weigh nothing)."""
    counted = latest_per_group(on_revision(reports, current_revision))
    n = 0.0
    successes = 0.0
    for r in counted:
        w = report_weight(r, now)
        n += w
        successes += w * SUCCESS[r.outcome]
    return round(wilson_lower(successes, n), 4)


def label(verified_revision: int | None, current_revision: int) -> str:
    if verified_revision is None:
        return "not verified yet"
    if verified_revision >= current_revision:
        return f"verified on the current revision ({current_revision})"
    return f"verified on revision {verified_revision}; current is {current_revision}"


def _environment_key(env: dict[str, Any]) -> tuple[str, str, str]:
    return (
        str(env.get("runtime", "")),
        str(env.get("runtime_version", "")),
        str(env.get("os", "")),
    )


def summary(
    reports: list[Report], excluded: int, current_revision: int, now: datetime
) -> dict[str, Any]:
    """What every read shows: counts by outcome over the independent
    verifiers of the current revision (each by its latest report), how many
    there are, how many reports did not count (``excluded``: the author's
    group, verifiers in no group, too young or deactivated), when and on
    which revision it was last verified (history: any revision), the
    environments seen on the current revision and the score.

    ``reports`` are the counting reports of every revision."""
    history = latest_per_group(reports)
    counted = latest_per_group(on_revision(reports, current_revision))
    counts = dict.fromkeys(OUTCOMES, 0)
    for r in counted:
        counts[r.outcome] += 1
    verified_revision = max((r.revision for r in history), default=None)
    last = max((r.at for r in history), default=None)
    environments: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for r in sorted(counted, key=lambda r: r.at, reverse=True):
        env = r.environment or {}
        key = _environment_key(env)
        if key in seen or not any(key):
            continue
        seen.add(key)
        environments.append(
            {"runtime": key[0], "runtime_version": key[1], "os": key[2], "outcome": r.outcome}
        )
        if len(environments) == ENVIRONMENTS_SHOWN:
            break
    return {
        "score": score(counted, current_revision, now),
        "counts": counts,
        "independent_verifiers": len(counted),
        "excluded_reports": excluded,
        "last_verified_at": last.isoformat() if last is not None else None,
        "verified_revision": verified_revision,
        "current_revision": current_revision,
        "on_current_revision": verified_revision is not None
        and verified_revision >= current_revision,
        "label": label(verified_revision, current_revision),
        "environments": environments,
        "computed_at": now.isoformat(),
    }


def empty(current_revision: int) -> dict[str, Any]:
    """The summary of an item nobody verified (independent of time)."""
    return {
        "score": 0.0,
        "counts": dict.fromkeys(OUTCOMES, 0),
        "independent_verifiers": 0,
        "excluded_reports": 0,
        "last_verified_at": None,
        "verified_revision": None,
        "current_revision": current_revision,
        "on_current_revision": False,
        "label": label(None, current_revision),
        "environments": [],
        "computed_at": None,
    }


# The search prior: a relevance score s becomes s + |s| * PRIOR_WEIGHT * trust
# (trust in [0, 1]), so trust moves an item by at most 15 % of its own
# relevance: it decides between near-duplicates and leaves items of clearly
# different relevance in their order. With no verifications (trust 0) the
# ranking is exactly the fused one.
PRIOR_WEIGHT = 0.15


def with_prior(score: float, trust_score: float) -> float:
    """A relevance score with trust's bounded prior applied."""
    return score + abs(score) * PRIOR_WEIGHT * min(1.0, max(0.0, trust_score))
