"""The change feed's read rate (issue 48's target: 10,000 changes a second),
in process over its own embedded Postgres: a log of ``--events`` events about
public patterns, questions, answers and comments (a fifth of them tombstones),
read whole from the start by ``services.events.changes`` in pages of
``--limit``, each page also validated and serialised as the route answers it
(``ChangesOut``). Prints changes per second, per page and with a ``kinds``
filter; writes nothing to the docs.

    .venv/bin/python -m benchmarks.changes_bench [--events 100000] [--limit 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

import psycopg
from sqlalchemy import text

from benchmarks.harness import ROOT
from serve_app.schemas.changes import ChangesOut
from serve_app.services import events
from storage.db import make_engine, make_sessionmaker
from storage.embedded import database_url, drop_database, ensure_database, start_server
from storage.migrate import upgrade

STATE_DIR = ROOT / ".cairn" / "bench-changes"
DATABASE = "cairn_changes_bench"
SECRET = b"changes-bench-secret"

# Subjects: a quarter each of patterns, questions, answers, comments; events
# cycle over them (created, then updates), a fifth of the subjects hidden.
_SEED = """
INSERT INTO agents (id, username, name, display_name)
VALUES ('00000000-0000-0000-0000-000000000001', 'bench_author', 'Bench', 'Bench');
INSERT INTO patterns (id, author_id, title, slug, description, content)
SELECT ('10000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid,
       '00000000-0000-0000-0000-000000000001', 'Pattern ' || g, 'pattern-' || g,
       'A benchmark pattern about retries and caching number ' || g,
       repeat('Back off exponentially, add jitter, cap the retries. ', 20)
FROM generate_series(1, %(n)s) g;
INSERT INTO questions (id, author_id, title, slug, body)
SELECT ('20000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid,
       '00000000-0000-0000-0000-000000000001', 'Question ' || g || '?', 'question-' || g,
       repeat('How should an agent retry a flaky call? ', 5)
FROM generate_series(1, %(n)s) g;
INSERT INTO answers (id, question_id, author_id, body)
SELECT ('30000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid,
       ('20000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid,
       '00000000-0000-0000-0000-000000000001', repeat('Use capped backoff. ', 10)
FROM generate_series(1, %(n)s) g;
INSERT INTO comments (id, pattern_id, author_id, content)
SELECT ('40000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid,
       ('10000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid,
       '00000000-0000-0000-0000-000000000001', 'A remark on pattern ' || g
FROM generate_series(1, %(n)s) g;
UPDATE patterns SET status = 'archived' WHERE right(id::text, 1) IN ('5', '0');
INSERT INTO events (position, id, type, kind, subject_id)
SELECT g, gen_random_uuid(),
       (ARRAY['pattern.published', 'question.created', 'answer.created', 'comment.created'])
           [1 + g %% 4],
       (ARRAY['pattern', 'question', 'answer', 'comment'])[1 + g %% 4],
       ((ARRAY['1', '2', '3', '4'])[1 + g %% 4] || '0000000-0000-0000-0000-'
        || lpad((1 + (g / 4) %% %(n)s)::text, 12, '0'))::uuid
FROM generate_series(1, %(events)s) g;
INSERT INTO event_clock (id, position) VALUES (1, %(events)s)
ON CONFLICT (id) DO UPDATE SET position = excluded.position;
"""


def prepare(events_n: int) -> str:
    admin = start_server(STATE_DIR)
    drop_database(admin, DATABASE)
    ensure_database(admin, DATABASE)
    url = database_url(admin, DATABASE)
    upgrade(url)
    subjects = max(1, events_n // 8)  # each subject gets about two events
    with psycopg.connect(url, autocommit=True) as db:
        for statement in filter(str.strip, _SEED.split(";\n")):
            db.execute(statement, {"n": subjects, "events": events_n})  # type: ignore[arg-type]
        db.execute("VACUUM ANALYZE")
    return url


def cpu_s(pid: int) -> float:
    """A process's CPU seconds so far (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def read_all(url: str, limit: int, kinds: str | None) -> tuple[int, float, float, float]:
    """Changes read, seconds, the slowest page in ms, and the CPU seconds the
    read took in this process and its Postgres backend together: on a busy
    machine the wall-clock rate says more about the neighbours than the feed."""
    engine = make_engine(url, pool_size=1, max_overflow=0)
    sessions = make_sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"))
    async with sessions() as session:
        backend = int((await session.execute(text("SELECT pg_backend_pid()"))).scalar_one())
    cursor: str | None = None
    total, slowest = 0, 0.0
    cpu_before = time.process_time() + cpu_s(backend)
    started = time.perf_counter()
    try:
        while True:
            t0 = time.perf_counter()
            async with sessions() as session:
                page = await events.changes(session, SECRET, cursor, kinds, limit)
            ChangesOut.model_validate(page).model_dump_json()
            slowest = max(slowest, (time.perf_counter() - t0) * 1000)
            total += len(page["data"])
            cursor = page["next_cursor"]
            if not page["has_more"]:
                break
        seconds = time.perf_counter() - started
        cpu = time.process_time() + cpu_s(backend) - cpu_before
    finally:
        await engine.dispose()
    return total, seconds, slowest, cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--limit", type=int, default=events.MAX_LIMIT)
    args = parser.parse_args(argv)
    url = prepare(args.events)
    for label, kinds in (("all kinds", None), ("kinds=answer", "answer")):
        asyncio.run(read_all(url, args.limit, kinds))  # warm the cache once
        n, seconds, slowest, cpu = asyncio.run(read_all(url, args.limit, kinds))
        print(
            f"{label}: {n:,} changes in {seconds:.2f} s = {n / seconds:,.0f} changes/s "
            f"(pages of {args.limit}, slowest page {slowest:.1f} ms); "
            f"{n / cpu:,.0f} changes per CPU-second (reader and its Postgres backend)"
        )


if __name__ == "__main__":
    main()
