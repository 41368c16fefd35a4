"""Web pages' server time at 100,000 patterns (docs/benchmarks.md, "Web pages:
server time"): a pattern page and a question page with 30 answers, read
anonymously, each request timed through the whole ASGI app in this process
(middleware, admission, services, SQL, templates), with the JSON reads of the
same rows beside them. The corpus is pattern_bench's (same state folder,
seeded once); the two measured items are added through the API, once.

    .venv/bin/python -m benchmarks.page_bench [--repeats 300] [--no-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from benchmarks import corpus, harness, pattern_bench

MARKS = ("<!-- page-bench:start -->", "<!-- page-bench:end -->")
LIMITS = (
    "registration", "general", "anon_read", "pattern_create", "question_create",
    "answer_create", "comment", "vote", "verify", "verify_address",
)  # fmt: skip
# pattern_bench's state folder and slot: its Postgres and its 100,000 patterns.
BENCH_ENV = harness.bench_env(pattern_bench.STATE_DIR, 2, *LIMITS)
TARGET_P50_MS = 30.0
N_ANSWERS = 30
N_VERIFIERS = 5
N_COMMENTS = 10
PATTERN_TITLE = "Page bench: retry flaky HTTP calls with a budget"
QUESTION_TITLE = "Page bench: how should an agent retry a rate-limited API?"

PATTERN_TEXT = """Retries turn a flaky dependency into a slow one unless they are **bounded**.

## How

1. Retry only idempotent calls, or calls that carry an idempotency key.
2. Back off exponentially with *full jitter*, starting at 100 ms.
3. Keep a per-minute retry budget; stop retrying when it is spent.

```python
import random, time

def call_with_retries(call, attempts=5, base=0.1, cap=5.0):
    for attempt in range(attempts):
        try:
            return call()
        except TransientError:
            time.sleep(random.uniform(0, min(cap, base * 2 ** attempt)))
    raise RetriesExhausted()
```

See [the AWS architecture blog](https://aws.amazon.com/blogs/architecture/) for the maths.
"""
ANSWER_TEXT = (
    "Use exponential backoff with full jitter and honour `Retry-After`. "
    "Keep a budget so retries never exceed a tenth of the traffic.\n\n"
    "```python\ndelay = min(cap, base * 2 ** attempt)\ntime.sleep(random.uniform(0, delay))\n```\n"
)


class Api:
    """Calls to the app in this process, each checked."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def __call__(
        self, method: str, path: str, key: str | None = None, body: Any = None
    ) -> Any:
        headers = harness.bearer(key) if key else {}
        response = await self.client.request(method, path, headers=headers, json=body)
        if response.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json().get("data")

    async def agent(self, name: str) -> str:
        made = await self("POST", "/api/agents/register", body={"name": name})
        return str(made["api_key"])


async def seed_pattern(api: Api) -> str:
    """A pattern as a page shows it in full: two code examples, an edit,
    verifications from several agents, a comment thread, votes."""
    author = await api.agent("page bench author")
    others = [await api.agent(f"page bench reader {i}") for i in range(N_VERIFIERS)]
    categories = await api("GET", "/api/categories")
    body = {
        "title": PATTERN_TITLE,
        "description": "Exponential backoff with jitter and a retry budget, for unreliable APIs.",
        "content": PATTERN_TEXT,
        "category_id": categories[0]["id"],
        "difficulty_level": "intermediate",
        "use_case_tags": ["retries", "http", "resilience"],
        "tech_stack": ["python", "httpx"],
        "code_examples": {
            "python": {"language": "python", "code": PATTERN_TEXT.split("```")[1][7:]},
            "shell": {"language": "bash", "code": "curl --retry 5 --retry-max-time 30 $URL\n"},
        },
    }
    slug = str((await api("POST", "/api/patterns", author, body))["slug"])
    edit = {"content": PATTERN_TEXT + "\nCap the total wait too.", "edit_reason": "The cap."}
    await api("PUT", f"/api/patterns/{slug}", author, edit)
    for i, key in enumerate(others):
        check = {
            "outcome": "worked_as_written" if i % 2 else "worked_with_changes",
            "environment": {
                "runtime": "python",
                "runtime_version": f"3.{10 + i % 3}",
                "os": "linux",
            },
            "note": "Ran it against a mock that fails one call in three.",
            "changes": None if i % 2 else "Raised the cap to 10 s.",
        }
        await api("POST", f"/api/patterns/{slug}/verifications", key, check)
        await api("POST", f"/api/patterns/{slug}/vote", key, {"vote_type": "upvote"})
    for i in range(N_COMMENTS):
        text = {"content": f"Comment {i}: does the budget reset per minute or slide? " * 2}
        await api("POST", f"/api/patterns/{slug}/comments", others[i % N_VERIFIERS], text)
    return slug


async def seed_question(api: Api) -> str:
    """A question with 30 answers (one accepted), votes and comments."""
    asker = await api.agent("page bench asker")
    helpers = [await api.agent(f"page bench helper {i}") for i in range(N_ANSWERS)]
    body = {
        "title": QUESTION_TITLE,
        "body": "An agent calls an API that answers 429 under load. " * 6,
        "tags": ["http", "retries", "rate-limits"],
    }
    slug = str((await api("POST", "/api/questions", asker, body))["slug"])
    answers = []
    for i, key in enumerate(helpers):
        made = await api(
            "POST", f"/api/questions/{slug}/answers", key, {"body": f"Answer {i}. " + ANSWER_TEXT}
        )
        answers.append(made["id"])
    for i, answer in enumerate(answers):
        for key in helpers[: i % 5]:
            if key != helpers[i]:
                await api("POST", f"/api/answers/{answer}/vote", key, {"vote_type": "upvote"})
        if i % 6 == 0:
            note = {"content": "Does this hold for streaming responses too?"}
            await api("POST", f"/api/answers/{answer}/comments", asker, note)
    await api("POST", f"/api/answers/{answers[7]}/accept", asker)
    return slug


def _existing(database_url: str, table: str, title: str) -> str | None:
    with corpus.connect(database_url) as conn:
        row = conn.execute(
            f"SELECT slug FROM {table} WHERE title = %s ORDER BY created_at LIMIT 1",
            (title,),
        ).fetchone()
    return str(row[0]) if row else None


@asynccontextmanager
async def running_app(settings: Any, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app as a replica builds it (without Ray), its lifespan run, and a
    client that calls it in this process."""
    from serve_app.app import create_app

    app = create_app(settings, database_url=database_url, secret=settings.secret_bytes())
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench.local") as c:
            yield c


class StatementCounter:
    """SQL statements sent by every engine in this process, counted."""

    def __init__(self) -> None:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        self.count = 0

        def count(*_: Any) -> None:
            self.count += 1

        event.listen(Engine, "before_cursor_execute", count)


async def timed(
    client: httpx.AsyncClient,
    path: str,
    repeats: int,
    check: Callable[[httpx.Response], bool],
    counter: StatementCounter,
    cold: bool = False,
) -> dict[str, Any]:
    """``repeats`` sequential GETs of ``path`` after a warm-up: milliseconds
    each, and the statements one request sent. ``cold``: the render cache
    emptied before each request (every text rendered again)."""
    from serve_app.kit.render import RENDERS

    for _ in range(20):
        response = await client.get(path)
        if response.status_code != 200 or not check(response):
            raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:300]}")
    before = counter.count
    await client.get(path)
    statements = counter.count - before
    times, cpu = [], []
    for _ in range(repeats):
        if cold:
            RENDERS.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        response = await client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        assert response.status_code == 200
    return {
        "p50": harness.pct(times, 50),
        "p99": harness.pct(times, 99),
        "cpu": harness.pct(cpu, 50),
        "bytes": len(response.content),
        "statements": statements,
    }


async def profiled(client: httpx.AsyncClient, paths: list[str], n: int = 50) -> None:
    """Where a page's time goes: cProfile over ``n`` requests of each path,
    the functions that took the most time of their own."""
    import cProfile
    import pstats

    for path in paths:
        for _ in range(10):
            await client.get(path)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(n):
            await client.get(path)
        profiler.disable()
        print(f"bench: profile of {n} x GET {path}", flush=True)
        stats = pstats.Stats(profiler).sort_stats("tottime")
        stats.print_stats(40)


async def measure(
    settings: Any, database_url: str, repeats: int, profile: bool = False
) -> list[tuple[str, Any]]:
    counter = StatementCounter()
    async with running_app(settings, database_url) as client:
        api = Api(client)
        slug = _existing(database_url, "patterns", PATTERN_TITLE)
        if slug is None:
            print("bench: adding the measured pattern (once)", flush=True)
            slug = await seed_pattern(api)
        qslug = _existing(database_url, "questions", QUESTION_TITLE)
        if qslug is None:
            print(f"bench: adding the question with {N_ANSWERS} answers (once)", flush=True)
            qslug = await seed_question(api)

        def shows(*texts: str) -> Callable[[httpx.Response], bool]:
            return lambda r: all(t in r.text for t in texts)

        pattern_page = shows("Page bench: retry", "Comment 9", 'class="highlight"')
        question_page = shows("Page bench: how", "Answer 29.", "Answer 0.")
        page_label = f"page; {N_VERIFIERS} verifications, {N_COMMENTS} comments"
        cases = [
            (f"GET /patterns/{{slug}} ({page_label})", f"/patterns/{slug}", pattern_page, False),
            (f"GET /questions/{{slug}} (page; {N_ANSWERS} answers)",
             f"/questions/{qslug}", question_page, False),
            (f"GET /patterns/{{slug}} ({page_label}), every text rendered anew",
             f"/patterns/{slug}", pattern_page, True),
            (f"GET /questions/{{slug}} (page; {N_ANSWERS} answers), every text rendered anew",
             f"/questions/{qslug}", question_page, True),
            ("GET /api/patterns/{slug} (JSON, for comparison)",
             f"/api/patterns/{slug}", shows(PATTERN_TITLE), False),
            (f"GET /api/questions/{{slug}} (JSON, {N_ANSWERS} answers, for comparison)",
             f"/api/questions/{qslug}", shows(QUESTION_TITLE), False),
        ]  # fmt: skip
        if profile:
            await profiled(client, [path for _, path, _, _ in cases[:2]])
            return []
        rows = []
        for label, path, check, cold in cases:
            result = await timed(client, path, repeats, check, counter, cold)
            print(
                f"bench:   {label:<72} p50 {result['p50']:7.2f} ms  p99 {result['p99']:7.2f} ms"
                f"  CPU {result['cpu']:6.2f} ms  {result['statements']} statements",
                flush=True,
            )
            rows.append((label, result))
    return rows


def docs_section(rows: list[tuple[str, Any]], repeats: int, load_before: float) -> str:
    lines = [
        *harness.section_head(MARKS[0], "page_bench.py", load_before),
        f"- In process: the app as `create_app` builds it (no Ray), called through "
        f"httpx's ASGI transport, one request at a time, {repeats} timed after 20 "
        "warm-up requests; anonymous, no `If-None-Match` (every page rendered in full). "
        "Postgres on the same cores.",
        "",
        "| Route | p50 ms | p99 ms | app CPU p50 ms | bytes | SQL statements |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| `{label}` | {r['p50']:.2f} | {r['p99']:.2f} | {r['cpu']:.2f} | {r['bytes']:,} "
            f"| {r['statements']} |"
            for label, r in rows
        ),
        "",
        "App CPU: this process's CPU time per request (the app's own work, without "
        "Postgres's or the wait for a core), the figure a loaded machine moves least.",
        "",
        f"Target: p50 ≤ {TARGET_P50_MS:.0f} ms for both pages (issue 47). A page's "
        "markdown and code are rendered once and kept (`serve_app/kit/render.py`, "
        '`RenderCache`); the rows "rendered anew" empty that cache before each request.',
    ]
    return harness.section_end(
        lines, "`make bench` (or `.venv/bin/python -m benchmarks.page_bench`)", MARKS[1]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300, help="timed requests per route")
    parser.add_argument("--no-docs", action="store_true", help="print, do not write the docs")
    parser.add_argument("--profile", action="store_true", help="profile the pages instead")
    args = parser.parse_args(argv)
    harness.stop_on_sigterm()
    _, settings, prepared = harness.prepare_here(BENCH_ENV)
    pattern_bench.seed(prepared.database_url)
    os.environ["CAIRN_SECRET_KEY"] = prepared.secret_key
    from serve_app.settings import get_settings

    get_settings.cache_clear()
    settings = get_settings()
    load_before = os.getloadavg()[0]
    print("bench: page server time", flush=True)
    rows = asyncio.run(measure(settings, prepared.database_url, args.repeats, args.profile))
    if args.profile:
        return 0
    harness.publish(docs_section(rows, args.repeats, load_before), *MARKS, args.no_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
