"""Local shares of the rate-limit windows (serve_app/runtime/ratelimit.py)
against real RateLimiterShard actors on a local Ray: several RayRateLimiter
instances stand for several ingress replicas, thousands of subjects for
many clients. The bound checked here is the one written in
docs/decisions/rate-limits.md: per subject and window, at most
``replicas * credit_max`` admitted over the limit."""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest
import ray

from actors.ratelimit import Decision, Rule
from actors.ratelimit_actor import RateLimiterShard
from serve_app.runtime.ratelimit import RayRateLimiter
from tests.e2e.test_ratelimit_actors import reported

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()


def replicas(n: int, shards: int = 2) -> tuple[list[RayRateLimiter], list[Any]]:
    handles = [RateLimiterShard.remote() for _ in range(shards)]  # type: ignore[attr-defined]
    ray.get([h.stats.remote() for h in handles])  # started before the first call
    out = []
    for _ in range(n):
        client = RayRateLimiter(shards, replicas=n)
        client._handles = handles  # the same shards, as named actors would give
        out.append(client)
    return out, handles


def at_once(coro: Coroutine[Any, Any, Decision]) -> Decision | None:
    """The decision if ``hit`` answered without suspending once (so without
    any Ray call or wait); None if it had to wait (the coroutine is then
    closed and nothing was counted for it)."""
    try:
        coro.send(None)
    except StopIteration as done:
        result: Decision = done.value
        return result
    coro.close()
    return None


def shard_calls(handles: list[Any]) -> float:
    return sum(
        ray.get([h.stats.remote() for h in handles])[i]["calls"] for i in range(len(handles))
    )


async def test_cold_subjects_within_budget_make_no_call(local_ray: None) -> None:
    """Thousands of subjects, each seen for the first time (an address, an
    agent), each a few requests: all decided in the replica, and the shards
    get one call per batch interval, not one per subject."""
    (a, b), handles = replicas(2)
    rule = Rule("anon_read", 300, 60)
    before = shard_calls(handles)
    started = time.monotonic()
    for i in range(3000):
        for _ in range(3):
            replica = a if i % 2 else b
            decision = at_once(replica.hit(rule, f"ip:10.{i // 256}.{i % 256}.1"))
            assert decision is not None, f"subject {i} waited for a shard"
            assert decision.allowed
        if i % 100 == 0:
            await asyncio.sleep(0)  # let the reports go out meanwhile
    await reported(a, b)
    elapsed = time.monotonic() - started
    calls = shard_calls(handles) - before
    # One call per shard per interval at most (plus the last reports).
    assert calls <= 2 * (elapsed / a.SYNC_INTERVAL_S + 4), (calls, elapsed)
    assert calls < 3000 / 10
    # Every admission reached the shard: the next report sees them counted.
    subject = "ip:10.0.1.1"
    shard = handles[zlib.crc32(subject.encode()) % 2]
    probe = ("sync", f"anon_read:{subject}", 300, 60.0, 0, 0, 0)
    answers = ray.get(shard.apply.remote("probe", [probe]))
    assert answers[0][2] == 300 - 3, answers  # the 3 admitted for that address


async def test_a_hot_subject_within_budget_makes_no_call_after_its_first_block(
    local_ray: None,
) -> None:
    """A busy agent: its first block comes from a report, the next ones are
    asked for in the background before the last one runs out."""
    (client,), _ = replicas(1, shards=1)
    rule = Rule("general", 1_000_000, 3600)
    waited = 0
    for burst in range(30):
        for _ in range(40):
            if at_once(client.hit(rule, "agent-hot")) is None:
                waited += 1
                assert (await client.hit(rule, "agent-hot")).allowed
        # Busy: pauses shorter than the idle time after which a block goes back.
        await asyncio.sleep(client.RELEASE_IDLE_S / 2)
        if burst == 5:
            warm_waits = waited
    assert waited - warm_waits == 0, (warm_waits, waited)
    assert waited <= 3


@pytest.mark.parametrize("n", [2, 3])
async def test_overshoot_stays_within_the_bound(local_ray: None, n: int) -> None:
    """n replicas, 1,000 subjects, each sent 1.25x its limit from random replicas
    in small interleaved bursts: every subject gets at least its limit and at
    most ``n * credit_max`` more."""
    group, _ = replicas(n)
    rule = Rule("general", 32, 3600)
    credit = group[0].credit_max(rule)
    assert credit >= 1
    bound = n * credit
    rng = random.Random(n)
    subjects = [f"agent-{n}-{i}" for i in range(1000)]
    admitted = dict.fromkeys(subjects, 0)
    work = [(s, rng.randrange(n)) for s in subjects for _ in range(5 * rule.limit // 4)]
    rng.shuffle(work)

    async def one(subject: str, r: int) -> None:
        decision = await group[r].hit(rule, subject)
        if decision.allowed:
            admitted[subject] += 1

    for start in range(0, len(work), 10_000):
        await asyncio.gather(*(one(s, r) for s, r in work[start : start + 10_000]))
        await asyncio.sleep(0.01)
    await reported(*group)
    over = {s: c - rule.limit for s, c in admitted.items() if c > rule.limit}
    under = {s: c for s, c in admitted.items() if c < rule.limit}
    assert max(over.values(), default=0) <= bound, (bound, sorted(over.values())[-5:])
    assert not under, list(under.items())[:5]
    # A late request is refused; once a replica has heard so, locally (no call).
    for s in subjects[:50]:
        for replica in group:
            assert not (await replica.hit(rule, s)).allowed
    for s in subjects[:50]:
        for replica in group:
            decision = at_once(replica.hit(rule, s))
            assert decision is not None and not decision.allowed and decision.remaining == 0


async def test_remaining_is_truthful_within_the_bound(local_ray: None) -> None:
    """X-RateLimit-Remaining as one replica (of 3) sees a subject it serves:
    the shard's count at its last report, less what it admitted since; never
    off by more than the bound, and Reset is the shard's window. (Across
    replicas the view also lags by what the others admitted since this one's
    last report of the subject: the decision's "Rate-limit headers".)"""
    group, _ = replicas(3)
    replica = group[0]
    rule = Rule("general", 200, 3600)
    bound = 3 * replica.credit_max(rule)
    rng = random.Random(7)
    for subject in (f"agent-one-{i}" for i in range(2)):
        resets = set()
        for used in range(1, 201):
            decision = await replica.hit(rule, subject)
            assert decision.allowed
            truth = rule.limit - used
            assert truth - bound <= decision.remaining <= truth + bound, (used, decision)
            if used > 10:
                resets.add(int(decision.reset_at))
            if rng.random() < 0.08:
                await asyncio.sleep(2 * RayRateLimiter.SYNC_INTERVAL_S)
        assert len(resets) == 1  # after the first report, the shard's window
        refused = await replica.hit(rule, subject)
        assert not refused.allowed and refused.remaining == 0


async def test_a_dead_shard_means_admit_locally_without_waiting(local_ray: None) -> None:
    """The shard killed for good: no 500, no stall; each replica counts the
    subject against its own window (as before)."""
    (client,), handles = replicas(1, shards=1)
    rule = Rule("general", 100, 3600)
    for _ in range(5):
        assert (await client.hit(rule, "agent-d")).allowed
    await reported(client)
    ray.kill(handles[0], no_restart=True)
    started = time.monotonic()
    decisions = [await client.hit(rule, f"agent-d{i % 40}") for i in range(400)]
    assert time.monotonic() - started < client.CALL_TIMEOUT_S + 1.0
    assert all(d.allowed for d in decisions)
    local = [await client.hit(rule, "agent-local") for _ in range(130)]
    # The local window admits the limit; when the shard's down period (DOWN_S)
    # ends mid-run the subject gets a share, whose credit is admitted before
    # the next failed report sends it back to the window: the documented
    # bound of one credit per replica (docs/decisions/rate-limits.md).
    admitted = sum(d.allowed for d in local)
    assert rule.limit <= admitted <= rule.limit + client.credit_max(rule), admitted


async def test_counts_survive_a_shard_restart_and_no_request_fails(local_ray: None) -> None:
    """The shard crashes and Ray restarts it (max_restarts=-1): requests go
    on being decided meanwhile, and a subject the replica knew to be over
    its budget stays refused until its window resets."""
    (client,), handles = replicas(1, shards=1)
    rule = Rule("general", 40, 3600)
    results = [await client.hit(rule, "agent-r") for _ in range(60)]
    assert sum(d.allowed for d in results) <= 40 + client.credit_max(rule)
    await reported(client)
    ray.kill(handles[0], no_restart=False)  # restarted by Ray, empty
    started = time.monotonic()
    after = [await client.hit(rule, f"agent-s{i}") for i in range(200)]
    assert all(d.allowed for d in after)
    assert not (await client.hit(rule, "agent-r")).allowed
    assert time.monotonic() - started < 2 * client.CALL_TIMEOUT_S + 2
    # The restarted shard answers again and counts new reports.
    deadline = time.monotonic() + 60
    while True:
        await asyncio.sleep(0.2)
        assert time.monotonic() < deadline, "the restarted shard never counted a report"
        assert (await client.hit(rule, "agent-new")).allowed
        try:
            stats = ray.get(handles[0].stats.remote(), timeout=5)
        except ray.exceptions.RayError:  # still restarting
            continue
        if stats["keys"] >= 1:
            break
