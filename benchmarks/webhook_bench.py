"""Webhook delivery under load, and its drill (issue 48's targets;
docs/benchmarks.md, "Webhooks: commit to delivery"): the running service
(`cairn run`, its detached ``cairn-webhooks`` actor delivering) and a
receiver on loopback in a process of its own that checks every signature
with the ``standardwebhooks`` package and keeps each ``webhook-id`` with the
time it arrived.

The events come from real writes: answers created by the answer service in
this process (``services.answers.create`` in a transaction of its own on the
service's database, as a request does), each one writing two outbox events
(``answer.created`` and the asker's ``notification.created``) in its
transaction; the time taken right after its COMMIT returns is the event's
commit time. First the deliverer alone:

0. prefill: ``--prefill`` events (10,000) committed as fast as the writers go
   while the deliverer's matcher waits on its cursor's row lock (held by
   this process), then the lock let go: the deliveries a second until the
   receiver has them all (the writers' rate without the deliverer beside
   them is its events/min).

Then three runs of ``--minutes`` each at ``--events-per-min``:

1. steady: two subscriptions (the asker's, for both events; a watcher's, for
   ``answer.created``): commit → first receipt, p50/p99/max;
2. the same with a third subscription whose receiver never answers (every
   try times out): the other two's delays again;
3. the drill: the same load, the deliverer actor killed (``ray.kill``; Ray
   restarts it) after a third of the run and the embedded Postgres restarted
   (``pg_ctl restart -m fast``) after two thirds; then the receiver's ids
   against every event the outbox holds for each subscription: none may be
   missing (duplicates are allowed and counted).

And one run with the writers elsewhere, as on a cluster, where the
service's replicas write on other nodes and this machine holds only the
deliverer, Postgres and the receiver:

4. events: the same two subscriptions at ``--events-per-min``, each write a
   transaction committing the two outbox events a real answer's transaction
   committed (``answer.created`` of an answer made in the runs before, and
   its asker's ``notification.created``; the same type, kind, subject, actor
   and payload, a new id), so the matcher, the bodies and the deliveries
   are those of real answers without an answer's own cost (its CPU, ~15 ms
   here, is the steady run's "writers' CPU").

    nice -n 10 .venv/bin/python -m benchmarks.webhook_bench [--minutes 3] [--no-docs]
        [--runs prefill,steady,dead,drill,events] [--prefill 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from benchmarks import harness
from benchmarks.harness import pct

STATE_DIR = harness.ROOT / ".cairn" / "bench-webhooks"
MARKS = ("<!-- webhook-bench:start -->", "<!-- webhook-bench:end -->")
PORT = 8111
RECEIVER_PORT = 8112
WRITERS = 16
SETTINGS = {
    "CAIRN_INGRESS_REPLICAS": "1",
    "CAIRN_SEARCH_SEMANTIC": "false",
    "CAIRN_WEBHOOKS_ALLOW_LOOPBACK": "true",
    # Serve's own proxy: the few setup calls are all that go through it, and
    # HAProxy's manager missed Serve's 60 s start deadline on a loaded machine.
    "CAIRN_SERVE_PROXY": "default",
}
BENCH_ENV = harness.bench_env(
    STATE_DIR, 11, "registration", "general", "question_create", "answer_create", **SETTINGS
)
DRAIN_S = 240.0  # a lease (3 x timeout + 30 s) and then some
ANSWER = (
    "Back off exponentially with full jitter, cap the number of tries, and make the "
    "call idempotent with a key so a retry after a timeout does no harm. Case {n}."
)


# --- the receiver (a process of its own) ---------------------------------------------


def receive(port: int) -> None:
    """Serve the receiver until killed: ``POST /_secrets`` ({path: secret})
    says how to check each path; ``GET /_log`` answers what arrived; every
    other POST is a delivery (``/dead`` never answers)."""
    from aiohttp import web
    from standardwebhooks import Webhook

    secrets: dict[str, Webhook] = {}
    log: list[tuple[str, str, float, bool]] = []

    async def deliveries(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        now = time.time()
        if request.path == "/dead":
            log.append((request.path, request.headers.get("webhook-id", ""), now, False))
            await asyncio.Event().wait()  # never answers: the sender times out
        checker = secrets.get(request.path)
        ok = False
        if checker is not None:
            with contextlib.suppress(Exception):
                checker.verify(body, dict(request.headers))
                ok = True
        log.append((request.path, request.headers.get("webhook-id", ""), now, ok))
        return web.Response(text="ok")

    async def set_secrets(request: web.Request) -> web.Response:
        for path, secret in (await request.json()).items():
            secrets[path] = Webhook(secret)
        return web.json_response({})

    async def read_log(request: web.Request) -> web.Response:
        return web.json_response(log)

    app = web.Application()
    app.router.add_post("/_secrets", set_secrets)
    app.router.add_get("/_log", read_log)
    app.router.add_post("/{tail:.*}", deliveries)
    web.run_app(app, host=harness.HOST, port=port, print=None, access_log=None)


def kill_actor() -> None:
    """Join the service's Ray cluster, kill the webhook actor (Ray restarts
    it: ``max_restarts=-1``) and wait until it answers again; prints the
    seconds that took."""
    from serve_app.launch.local_ray import use_local_ray_env

    # The service's node is on loopback with a token (serve_app/launch/local_ray.py):
    # this driver joins it the same way, its settings in place before ray is imported.
    use_local_ray_env(STATE_DIR)
    import ray

    from actors.cluster import NAMESPACE
    from actors.webhooks.actor import NAME
    from embeddings.reembed import find_local_cluster
    from serve_app.launch.bootstrap import ray_dir

    found = find_local_cluster(ray_dir(STATE_DIR))
    if found is None:
        raise SystemExit("no running service's Ray cluster found")
    ray.init(
        address=found[0],
        namespace=NAMESPACE,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    handle = ray.get_actor(NAME, namespace=NAMESPACE)
    before: Any = ray.get(handle.stats.remote(), timeout=30)
    t0 = time.monotonic()
    ray.kill(handle, no_restart=False)
    while True:
        with contextlib.suppress(Exception):
            after = ray.get(handle.stats.remote(), timeout=5)
            if after["running"]:
                break
        time.sleep(0.2)  # polling the restarted actor, with a deadline below
        if time.monotonic() - t0 > 120:
            raise SystemExit("the webhook actor did not come back within 120 s")
    print(json.dumps({"restart_s": time.monotonic() - t0, "before": before, "after": after}))


# --- the writers ---------------------------------------------------------------------


@dataclass
class Writes:
    """Event ids committed (with their commit time) and the writes that failed."""

    committed: dict[str, float] = field(default_factory=dict)
    answers: int = 0
    write_s: list[float] = field(default_factory=list)  # each answer's transaction
    failed: Counter[str] = field(default_factory=Counter)
    started: float = 0.0
    ended: float = 0.0
    cpu_s: float = 0.0  # this process's CPU time over the writes (the service's code, in process)


async def write(
    url: str,
    questions: list[tuple[str, str]],
    per_s: float,
    seconds: float,
    writes: Writes,
    total: int | None = None,
    replay: list[list[Replayed]] | None = None,
) -> None:
    """Answers at ``per_s`` a second for ``seconds`` (at most ``total`` of
    them) by WRITERS writers, each to a question of its own (the question's
    row lock is per answer); with ``replay``, each write commits one answer's
    outbox events again instead (the events run)."""
    from serve_app.schemas.questions import AnswerCreate
    from serve_app.services import answers
    from storage.db import make_engine, make_sessionmaker
    from storage.models import Agent
    from storage.repositories import events as events_repo

    engine = make_engine(url, pool_size=WRITERS, max_overflow=0)
    sessions = make_sessionmaker(engine)
    interval = 1.0 / per_s
    cpu0 = time.process_time()
    writes.started = time.monotonic()
    end = writes.started + seconds
    slot = 0

    async def writer(i: int) -> None:
        nonlocal slot
        answerer, slug = questions[i % len(questions)]
        while True:
            due = writes.started + slot * interval
            slot += 1
            if due > end or time.monotonic() > end:
                return  # a run lasts its seconds: writes it could not keep up with are not made
            if total is not None and slot > total:
                return
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            t0 = time.monotonic()
            try:
                async with sessions() as db:
                    if replay:
                        for e in replay[slot % len(replay)]:
                            events_repo.stage(db, e.type, e.kind, e.subject_id, e.actor, e.payload)
                    else:
                        caller = await db.get(Agent, uuid.UUID(answerer))
                        assert caller is not None
                        body = AnswerCreate(body=ANSWER.format(n=slot))
                        await answers.create(db, slug, caller, body)
                    ids = [str(e.id) for e in events_repo.staged(db)]
                    await db.commit()
                    now = time.time()
            except Exception as exc:  # a restart of Postgres: the write is lost, not its event
                writes.failed[type(exc).__name__] += 1
                await asyncio.sleep(0.2)  # the next write after a pause
                continue
            writes.answers += 1
            writes.write_s.append(time.monotonic() - t0)
            for event_id in ids:
                writes.committed[event_id] = now

    try:
        await asyncio.gather(*(writer(i) for i in range(WRITERS)))
    finally:
        writes.ended = time.monotonic()
        writes.cpu_s = time.process_time() - cpu0
        await engine.dispose()


@dataclass(frozen=True)
class Replayed:
    """An outbox event as a real answer's transaction committed it."""

    type: str
    kind: str
    subject_id: uuid.UUID
    actor: uuid.UUID | None
    payload: dict[str, Any]


def answers_events(database_url: str, limit: int = 2_000) -> list[list[Replayed]]:
    """The two events of each of the last ``limit`` answers the runs made:
    ``answer.created`` and, at the next position, the asker's
    ``notification.created`` (one commit's events are consecutive, in the
    order they were staged: ``services.answers.create`` stages the answer's
    first)."""
    import psycopg

    from storage.db import libpq_url

    with psycopg.connect(libpq_url(database_url)) as db:
        rows = db.execute(
            "SELECT position, type, kind, subject_id, actor_id, payload FROM events "
            "WHERE type = 'answer.created' OR (type = 'notification.created' "
            "AND payload->>'notification' = 'question_answer') "
            "ORDER BY position DESC LIMIT %s",
            (4 * limit,),
        ).fetchall()
    at = {r[0]: Replayed(r[1], r[2], r[3], r[4], dict(r[5] or {})) for r in rows}
    pairs: list[list[Replayed]] = []
    for position, e in sorted(at.items(), reverse=True):
        if e.type != "answer.created" or len(pairs) >= limit:
            continue
        notice = at.get(position + 1)
        if notice is not None and notice.type == "notification.created":
            pairs.append([e, notice])
    if not pairs:
        raise SystemExit("the events run replays the answers of a run before it: none found")
    return pairs


# --- the runs ------------------------------------------------------------------------


@dataclass
class Setup:
    database_url: str
    hooks: dict[str, dict[str, Any]]  # path → subscription (its id, since_position)
    questions: list[tuple[str, str]]  # (answerer id, question slug)
    asker_key: str = ""
    watcher_key: str = ""


def setup(base: str, database_url: str) -> Setup:
    asker = harness.new_agent(base, "webhook bench asker")
    watcher = harness.new_agent(base, "webhook bench watcher")
    questions = []
    for i in range(WRITERS):
        answerer = harness.new_agent(base, f"webhook bench answerer {i}")
        made = harness.api_call(
            base,
            "POST",
            "/api/questions",
            asker["api_key"],
            {
                "title": f"How should an agent retry a flaky HTTP call, variant {i}?",
                "body": "The upstream API fails about one time in ten. Which policy holds up?",
            },
        )
        questions.append((str(answerer["agent_id"]), str(made["slug"])))
    receiver = f"http://{harness.HOST}:{RECEIVER_PORT}"
    hooks: dict[str, dict[str, Any]] = {}
    for path, key, events in (
        ("/asker", asker["api_key"], ["answer.created", "notification.question_answer"]),
        ("/watcher", watcher["api_key"], ["answer.created"]),
    ):
        hooks[path] = subscribe(base, key, receiver + path, events)
    return Setup(database_url, hooks, questions, asker["api_key"], watcher["api_key"])


def subscribe(base: str, key: str, url: str, events: list[str]) -> dict[str, Any]:
    made = harness.api_call(base, "POST", "/api/webhooks", key, {"url": url, "events": events})
    status, _ = harness.http_json(
        "POST",
        f"http://{harness.HOST}:{RECEIVER_PORT}/_secrets",
        {"/" + url.rsplit("/", 1)[1]: made["secret"]},
    )
    assert status == 200
    return dict(made)


def received() -> list[tuple[str, str, float, bool]]:
    status, log = harness.http_json("GET", f"http://{harness.HOST}:{RECEIVER_PORT}/_log", None, 60)
    assert status == 200, log
    return [tuple(row) for row in log]  # type: ignore[misc]


def drained(
    want: dict[str, set[str]], poll_s: float
) -> tuple[list[tuple[str, str, float, bool]], dict[str, set[str]]]:
    """The receiver's log, and the ids it holds per wanted path, once it holds
    every id ``want`` names or after ``DRAIN_S`` (polled every ``poll_s``)."""
    t0 = time.monotonic()
    while True:
        log = received()
        got: dict[str, set[str]] = {p: set() for p in want}
        for path, event_id, _, _ in log:
            if path in got:
                got[path].add(event_id)
        if all(want[p] <= got[p] for p in want) or time.monotonic() - t0 > DRAIN_S:
            return log, got
        time.sleep(poll_s)


def expected(database_url: str, asker_since: int, watcher_since: int) -> dict[str, set[str]]:
    """Every event the outbox holds for each fast subscription."""
    import psycopg

    from storage.db import libpq_url

    with psycopg.connect(libpq_url(database_url)) as db:
        answers_ = db.execute(
            "SELECT id::text, position FROM events WHERE type = 'answer.created'"
        ).fetchall()
        notices = db.execute(
            "SELECT id::text, position FROM events WHERE type = 'notification.created' "
            "AND payload->>'notification' = 'question_answer'"
        ).fetchall()
    return {
        "/asker": {i for i, p in [*answers_, *notices] if p > asker_since},
        "/watcher": {i for i, p in answers_ if p > watcher_since},
    }


def since(database_url: str, hook_id: str) -> int:
    import psycopg

    from storage.db import libpq_url

    with psycopg.connect(libpq_url(database_url)) as db:
        row = db.execute("SELECT since_position FROM webhooks WHERE id = %s", (hook_id,)).fetchone()
    assert row is not None
    return int(row[0])


@dataclass
class Run:
    name: str
    writes: Writes
    delays: dict[str, list[float]]
    missing: dict[str, int]
    duplicates: dict[str, int]
    unverified: int
    dead_tries: int
    drain_s: float
    notes: list[str]
    load: tuple[float, float]  # 1-minute load average at the start and the end


def run_phase(
    s: Setup,
    name: str,
    per_s: float,
    seconds: float,
    drill: bool,
    replay: list[list[Replayed]] | None = None,
) -> Run:
    what = "answers' outbox events replayed" if replay else "answers"
    print(f"bench: {name}: {per_s * 60:,.0f} {what} a minute for {seconds:.0f} s", flush=True)
    before = {(p, i) for p, i, _, _ in received()}
    writes = Writes()
    notes: list[str] = []
    load0 = os.getloadavg()[0]

    async def go() -> None:
        task = asyncio.create_task(
            write(s.database_url, s.questions, per_s, seconds, writes, replay=replay)
        )
        if drill:
            await asyncio.sleep(seconds / 3)
            t0 = time.monotonic()
            killed = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "benchmarks.webhook_bench", "--kill-actor"],
                capture_output=True,
                text=True,
                cwd=harness.ROOT,
            )
            lines = killed.stdout.strip().splitlines()
            notes.append(
                f"actor killed at {t0 - writes.started:.0f} s: "
                + (lines[-1] if killed.returncode == 0 and lines else killed.stderr[-500:])
            )
            await asyncio.sleep(max(0.0, writes.started + 2 * seconds / 3 - time.monotonic()))
            t0 = time.monotonic()
            from storage.embedded import restart_server

            await asyncio.to_thread(restart_server, STATE_DIR, "fast")
            notes.append(
                f"Postgres restarted (pg_ctl restart -m fast) at {t0 - writes.started:.0f} s, "
                f"accepting connections again after {time.monotonic() - t0:.1f} s"
            )
        await task

    asyncio.run(go())
    if replay:
        notes.append(
            "each write one answer's two outbox events replayed (the answer made in a run "
            "before): the writers' cost is not this machine's, as with replicas on other nodes"
        )
    load1 = os.getloadavg()[0]
    a_since = since(s.database_url, s.hooks["/asker"]["id"])
    w_since = since(s.database_url, s.hooks["/watcher"]["id"])
    want = expected(s.database_url, a_since, w_since)
    t0 = time.monotonic()
    log, got = drained(want, poll_s=1.0)
    drain_s = time.monotonic() - t0
    mine = [r for r in log if (r[0], r[1]) not in before]
    first: dict[tuple[str, str], float] = {}
    seen: Counter[tuple[str, str]] = Counter()
    for path, event_id, at, _ in mine:
        seen[(path, event_id)] += 1
        first.setdefault((path, event_id), at)
    delays = {
        p: [
            first[(p, e)] - t
            for e, t in writes.committed.items()
            if (p, e) in first and (p != "/watcher" or e in want[p])
        ]
        for p in ("/asker", "/watcher")
    }
    return Run(
        name=name,
        writes=writes,
        delays=delays,
        missing={p: len(want[p] - got[p]) for p in want},
        duplicates={
            p: sum(n - 1 for (path, _), n in seen.items() if path == p and n > 1) for p in want
        },
        unverified=sum(1 for r in mine if r[0] != "/dead" and not r[3]),
        dead_tries=sum(1 for r in mine if r[0] == "/dead"),
        drain_s=drain_s,
        notes=notes,
        load=(load0, load1),
    )


def prefill_phase(s: Setup, events: int) -> Run:
    """The deliverer alone: ``events`` outbox events committed (as fast as
    the writers go) while the deliverer's matcher waits on its cursor's row
    lock, held by this process; then the lock let go and the time until the
    receiver has every delivery of them. Its delays are from that moment."""
    import psycopg

    from storage.db import libpq_url

    print(f"bench: prefill: {events:,} events, the deliverer held back", flush=True)
    before = {(p, i) for p, i, _, _ in received()}
    writes = Writes()
    load0 = os.getloadavg()[0]
    with psycopg.connect(libpq_url(s.database_url)) as hold:
        # What the deliverer itself does first (repo.lock_cursor): the row
        # exists, and its lock is the one every match takes.
        hold.execute(
            "INSERT INTO webhook_cursor (id, position) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
        )
        hold.commit()
        hold.execute("SELECT position FROM webhook_cursor WHERE id = 1 FOR UPDATE")
        asyncio.run(write(s.database_url, s.questions, 1e6, 3600.0, writes, total=events // 2))
        a_since = since(s.database_url, s.hooks["/asker"]["id"])
        w_since = since(s.database_url, s.hooks["/watcher"]["id"])
        want = {
            p: {i for i in ids if (p, i) not in before}
            for p, ids in expected(s.database_url, a_since, w_since).items()
        }
        load_mid = os.getloadavg()[0]
        released = time.time()
        hold.rollback()  # the lock goes: the deliverer matches and delivers
    log, got = drained(want, poll_s=0.5)
    first: dict[tuple[str, str], float] = {}
    seen: Counter[tuple[str, str]] = Counter()
    for path, event_id, at, _ in log:
        if (path, event_id) in before or path not in want:
            continue
        seen[(path, event_id)] += 1
        first.setdefault((path, event_id), at)
    delays = {p: [at - released for (q, _), at in first.items() if q == p] for p in want}
    deliveries = len(first)
    drain_s = max(first.values(), default=released) - released
    rate = deliveries / drain_s if drain_s > 0 else float("nan")
    return Run(
        name="prefill",
        writes=writes,
        delays=delays,
        missing={p: len(want[p] - got[p]) for p in want},
        duplicates={
            p: sum(n - 1 for (path, _), n in seen.items() if path == p and n > 1) for p in want
        },
        unverified=sum(1 for r in log if (r[0], r[1]) not in before and not r[3]),
        dead_tries=0,
        drain_s=drain_s,
        notes=[
            f"the deliverer alone: {deliveries:,} of {sum(len(v) for v in want.values()):,} "
            f"deliveries of {2 * writes.answers:,} events "
            f"made in {drain_s:.1f} s after it was let loose: {rate:,.0f} deliveries/s, "
            f"{rate * 2 / 3 * 60:,.0f} events/min at this run's 3 deliveries per 2 events "
            f"(load {load_mid:.1f} when let loose); the events/min column is the writers' "
            "rate with the deliverer held back, the delays are from its release"
        ],
        load=(load0, os.getloadavg()[0]),
    )


def report(r: Run) -> str:
    w = r.writes
    seconds = max(w.ended - w.started, 1e-9)
    events = 2 * w.answers
    both = r.delays["/asker"] + r.delays["/watcher"]
    fields = [
        f"{r.name}",
        f"{w.answers:,} answers, {events:,} events in {seconds:.0f} s "
        f"({events / seconds * 60:,.0f} events/min)",
        f"failed writes {dict(w.failed) or 0}",
        f"answer transactions p50 {pct(w.write_s, 50):.3f} s, p99 {pct(w.write_s, 99):.3f} s",
        f"writers' CPU {w.cpu_s / max(w.answers, 1) * 1000:.1f} ms an answer",
        f"deliveries timed {len(both):,}: p50 {pct(both, 50):.2f} s, p99 {pct(both, 99):.2f} s, "
        f"max {max(both, default=float('nan')):.2f} s",
        f"missing {r.missing}",
        f"duplicates {r.duplicates}",
        f"unverified {r.unverified}",
        f"tries at /dead {r.dead_tries}",
        f"drained in {r.drain_s:.0f} s",
        f"load {r.load[0]:.1f} → {r.load[1]:.1f}",
        *r.notes,
    ]
    return "; ".join(fields)


def section(runs: list[Run], load_before: float, per_min: int, minutes: float) -> str:
    lines = [
        *harness.section_head(MARKS[0], "webhook_bench.py", load_before),
        f"- Load asked: {per_min:,} outbox events a minute ({per_min / 2 / 60:.0f} answers/s, "
        f"{WRITERS} writers) for {minutes:g} min a run; every try at `/dead` times out "
        "after `CAIRN_WEBHOOK_TIMEOUT_S` (10 s).",
        "",
        "| run | events/min done | deliveries timed | p50 s | p99 s | max s | "
        "missing | duplicates | bad signatures | failed writes | load avg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        w = r.writes
        seconds = max(w.ended - w.started, 1e-9)
        both = r.delays["/asker"] + r.delays["/watcher"]
        lines.append(
            f"| {r.name} | {2 * w.answers / seconds * 60:,.0f} | {len(both):,} | "
            f"{pct(both, 50):.2f} | {pct(both, 99):.2f} | {max(both, default=float('nan')):.2f} | "
            f"{sum(r.missing.values())} | {sum(r.duplicates.values())} | {r.unverified} | "
            f"{sum(w.failed.values())} | {r.load[0]:.1f} → {r.load[1]:.1f} |"
        )
    for r in runs:
        for note in r.notes:
            lines.append(f"- {r.name}: {note}.")
        if r.dead_tries:
            lines.append(f"- {r.name}: tries at the receiver that never answers: {r.dead_tries}.")
    return harness.section_end(
        lines,
        "`make bench` (or `nice -n 10 .venv/bin/python -m benchmarks.webhook_bench`)",
        MARKS[1],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.webhook_bench")
    parser.add_argument("--minutes", type=float, default=3.0, help="each run's length (3)")
    parser.add_argument("--events-per-min", type=int, default=10_000)
    parser.add_argument(
        "--runs",
        default="prefill,steady,dead,drill,events",
        help="of prefill, steady, dead, drill, events (events replays answers of a run before)",
    )
    parser.add_argument(
        "--prefill",
        type=int,
        default=10_000,
        help="the prefill run's outbox events, committed before the deliverer is let loose",
    )
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kill-actor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.receiver:
        receive(RECEIVER_PORT)
        return 0
    if args.kill_actor:
        kill_actor()
        return 0
    harness.stop_on_sigterm()
    harness.ports_free(BENCH_ENV, PORT, RECEIVER_PORT)
    harness.fresh_state(STATE_DIR)
    env, _, prepared = harness.prepare_here(BENCH_ENV)
    load_before = os.getloadavg()[0]
    per_s = args.events_per_min / 2 / 60  # two events an answer
    seconds = args.minutes * 60
    receiver = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.webhook_bench", "--receiver"],
        cwd=harness.ROOT,
        # Not one of the service's processes (those are stopped with it).
        env={k: v for k, v in os.environ.items() if k != "CAIRN_STATE_DIR"},
    )
    runs: list[Run] = []
    try:
        with harness.serve_running(PORT, env, STATE_DIR, keep_postgres=True) as serve:
            s = setup(serve.base, prepared.database_url)
            for name in args.runs.split(","):
                dead = name == "dead"
                if dead:
                    dead_key = harness.new_agent(serve.base, "webhook bench dead")["api_key"]
                    made = subscribe(
                        serve.base,
                        dead_key,
                        f"http://{harness.HOST}:{RECEIVER_PORT}/dead",
                        ["answer.created"],
                    )
                if name == "prefill":
                    run = prefill_phase(s, args.prefill)
                else:
                    replay = answers_events(s.database_url) if name == "events" else None
                    run = run_phase(s, name, per_s, seconds, name == "drill", replay)
                if dead:
                    harness.api_call(serve.base, "DELETE", f"/api/webhooks/{made['id']}", dead_key)
                print("bench:", report(run), flush=True)
                runs.append(run)
    finally:
        receiver.terminate()
        try:
            receiver.wait(timeout=10)
        except subprocess.TimeoutExpired:  # its /dead requests never end on their own
            receiver.kill()
            receiver.wait(timeout=30)
    harness.publish(
        section(runs, load_before, args.events_per_min, args.minutes), *MARKS, args.no_docs
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
