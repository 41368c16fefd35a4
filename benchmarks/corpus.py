"""The generated corpus the benchmarks share.

* Zipf text: a 30,000-word vocabulary ranked by frequency (``vocabulary``)
  and Zipf's law over it (``cum_weights``), the technical terms (``TECH``)
  spread over its ranks; the pattern and search corpora draw their contents
  from it.
* Realistic technical texts and the queries people type
  (``sentence``, ``texts_for``, ``queries_for``): the search corpus's
  descriptions, the HTTP benchmark's patterns and queries, the lexical
  index's documents.
* Seeding: over HTTP (``seed_question``), or straight into Postgres with
  COPY (``connect``, ``copy_rows``, ``clear_patterns``, ``vacuum``) in a
  bench database of its own (``bench_database``), which a batch job the
  bench runs as the CLI reaches through ``job_env``.
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness import api_call

# The texts' and queries' seed (the search corpus's).
SEED = 20261122


def words(text: str) -> list[str]:
    return text.split()


TECH = words(
    """
api cache queue retry backoff timeout webhook scraper crawler selenium playwright browser
postgres sqlite redis kafka rabbitmq kubernetes docker terraform ansible helm nginx haproxy
python rust golang typescript javascript bash pandas numpy pytorch tensorflow transformers
embeddings vector faiss pgvector search ranking index shard replica partition migration schema
oauth token refresh jwt session cookie csrf cors tls certificate secret vault encryption hash
prompt agent tool planner memory context window chunking summarization retrieval rerank
evaluation benchmark latency throughput profiling tracing logging metrics alert dashboard
circuit breaker bulkhead idempotency deduplication pagination cursor batch stream pipeline
scheduler cron worker pool thread async await coroutine actor ray serve deployment autoscaling
graphql rest grpc protobuf json yaml csv parquet arrow s3 bucket upload download compression
regex parser tokenizer lexer diff patch merge rebase commit branch review lint format test
fixture mock snapshot fuzzing property coverage ci pipeline release version semver changelog
"""
)
COMMON = words(
    """
the a of to and in for with on by from how when use using build make run handle avoid keep
simple robust fast safe small large many each every first next step example pattern recipe
approach technique solution problem issue case data request response error result value
"""
)

VOCABULARY_SIZE = 30_000
_SYLLABLES = [c + v for c in "bcdfghklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "or")]


def vocabulary(rng: random.Random) -> list[str]:
    """Words by frequency rank: the common words first, then made-up words with
    the technical terms spread log-uniformly over ranks 30 to 5,000, as in real
    text, where most query terms are rare and a few are everywhere."""
    made: set[str] = set()
    while len(made) < VOCABULARY_SIZE - len(COMMON) - len(TECH):
        made.add("".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4))))
    ranked = sorted(made)
    rng.shuffle(ranked)
    for word in TECH:
        rank = int(math.exp(rng.uniform(math.log(30), math.log(5000))))
        ranked.insert(rank, word)
    return COMMON + ranked


def cum_weights(size: int) -> list[float]:
    """Zipf's law (exponent 1) over ``size`` ranks, cumulated for random.choices."""
    total, cum = 0.0, []
    for rank in range(size):
        total += 1.0 / (rank + 1)
        cum.append(total)
    return cum


# ------------------------------------------------------------------- the texts

ACTIONS = tuple(
    words(
        """
retry cache batch shard index stream validate deduplicate rate-limit paginate schedule
monitor profile migrate encrypt compress trace test deploy autoscale debounce summarize
rerank chunk replicate archive throttle sign verify redact anonymize partition backfill
reconcile serialize parse enrich route prioritize expire warm
"""
    )
)
# Objects are "<qualifier> <thing>" pairs (48 x 32), so that query words have
# the spread of document frequencies a real corpus has.
QUALIFIERS = words(
    """
webhook database API embedding search file background user log payment page model feature
vector email schema cron agent prompt metric document chat image audit invoice order
inventory shipment sensor telemetry billing ticket comment notification report pipeline
dataset config secret customer tenant video geo calendar ledger price review translation
"""
)
THINGS = words(
    """
deliveries writes requests jobs queries uploads tasks sessions events callbacks pages
outputs flags lookups notifications changes records transcripts thumbnails exports imports
snapshots backups streams batches updates tokens caches indexes reports alerts embeddings
"""
)
OBJECTS = tuple(f"{q} {t}" for q in QUALIFIERS for t in THINGS)
TOOLS = (*TECH, "celery", "fastapi", "pgvector", "elasticsearch", "ray serve")
OPENERS = (
    "How to",
    "A pattern to",
    "Notes on how we",
    "Use this recipe to",
    "A safe way to",
    "Why and how to",
    "The simplest way to",
    "Lessons learned trying to",
)
CONDITIONS = (
    "when the upstream service times out",
    "under heavy concurrent load",
    "without losing messages",
    "across several replicas",
    "during a rolling deploy",
    "when the queue backs up",
    "with a strict latency budget",
    "on a small two-core machine",
    "while keeping the cloud bill low",
    "after a partial failure",
    "for millions of rows",
    "in a multi-tenant setup",
)
DETAILS = (
    "We keep every {obj} idempotent, so a retry after a crash is always safe.",
    "The trick is a unique key per request and a short lock held in {tool}.",
    "Measure p99 latency before and after the change; ours dropped by {pct} percent.",
    "Start with a batch size of {n} and tune it against the throughput you see.",
    "Failures go to a dead-letter queue that an operator can replay later.",
    "Keep the hot path free of network calls and move the rest to a worker.",
    "A small in-process cache in front of {tool} removed most of the round trips.",
    "Log one structured event per {obj} so that tracing a failure takes minutes.",
    "Back off exponentially with jitter and give up after {n} attempts.",
    "We ran it for a month at {n} requests per second without a page.",
    "Write the migration in two steps so that old and new code can run side by side.",
    "Test it with a fake {tool} first, then against a real one in CI.",
)


def sentence(rng: random.Random) -> str:
    """A realistic technical text of about 40 to 60 tokens."""
    obj = rng.choice(OBJECTS)
    head = (
        f"{rng.choice(OPENERS)} {rng.choice(ACTIONS)} {obj} with {rng.choice(TOOLS)} "
        f"{rng.choice(CONDITIONS)}."
    )
    details = [
        d.format(
            obj=rng.choice(OBJECTS).rstrip("s"),
            tool=rng.choice(TOOLS),
            pct=rng.randint(10, 80),
            n=rng.choice([3, 5, 8, 16, 32, 64, 100, 500]),
        )
        for d in rng.sample(DETAILS, 2)
    ]
    return " ".join([head, *details])


def title(rng: random.Random) -> str:
    """A pattern's title, "<Action> <object> with <tool>"."""
    return f"{rng.choice(ACTIONS).capitalize()} {rng.choice(OBJECTS)} with {rng.choice(TOOLS)}"


def texts_for(n: int, seed: int = SEED) -> list[str]:
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)]


def queries_for(n: int, seed: int = SEED + 1) -> list[str]:
    """Distinct short queries as people type them."""
    rng = random.Random(seed)
    shapes = (
        lambda: f"{rng.choice(ACTIONS)} {rng.choice(OBJECTS)}",
        lambda: f"{rng.choice(ACTIONS)} {rng.choice(OBJECTS)} {rng.choice(TOOLS)}",
        lambda: f"how to {rng.choice(ACTIONS)} {rng.choice(OBJECTS)} with {rng.choice(TOOLS)}",
        lambda: f"{rng.choice(TOOLS)} {rng.choice(TOOLS)} {rng.choice(ACTIONS)}",
        lambda: f"{rng.choice(TOOLS)} {rng.choice(OBJECTS)}",
        lambda: f"{rng.choice(OBJECTS)} {rng.choice(CONDITIONS)}",
    )
    out: dict[str, None] = {}
    while len(out) < n:
        out[rng.choice(shapes)()] = None
    return list(out)


# ------------------------------------------------------------------- seeding


def seed_question(
    base: str, asker: str, helpers: list[str], title: str, tags: list[str]
) -> tuple[str, list[str]]:
    """A question by ``asker`` with one long answer from each of ``helpers``:
    its slug and the answers' ids (the question benches' seeding)."""
    body = {
        "title": title,
        "body": "How should an agent retry calls to a rate-limited API without hammering it? " * 8,
        "tags": tags,
    }
    slug: str = api_call(base, "POST", "/api/questions", asker, body)["slug"]
    answers = []
    for i, key in enumerate(helpers):
        text = f"Answer {i}: use exponential backoff with full jitter, and honour " * 12
        made = api_call(base, "POST", f"/api/questions/{slug}/answers", key, {"body": text})
        answers.append(made["id"])
    return slug, answers


PATTERN_COLUMNS = (
    "patterns (id, author_id, category_id, title, slug, description, content,"
    " difficulty_level, use_case_tags, tech_stack, created_at, updated_at)"
)


def bench_database(state: Path) -> str:
    """Start (or attach to) the embedded Postgres in ``state``, migrated and
    with the categories seeded, as ``cairn run`` prepares it; its URL."""
    from storage.embedded import start_embedded
    from storage.migrate import upgrade
    from storage.seed import seed_categories

    url = start_embedded(state)
    upgrade(url)
    seed_categories(url)
    return url


def job_env(state: Path) -> dict[str, str]:
    """The environment for a ``cairn`` command run on the bench database in
    ``state``: none of the caller's ``CAIRN_`` or ``RAY_`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAIRN_", "RAY_"))}
    env["CAIRN_STATE_DIR"] = str(state)
    return env


def connect(database_url: str, **options: Any) -> Any:
    """A psycopg connection to a benchmark's database (SQLAlchemy's URL)."""
    import psycopg

    from storage.db import libpq_url

    return psycopg.connect(libpq_url(database_url), **options)


def copy_rows(conn: Any, into: str, rows: Iterable[Sequence[Any]]) -> None:
    """``COPY into FROM STDIN`` of ``rows`` (``into``: a table and its columns)."""
    with conn.cursor().copy(f"COPY {into} FROM STDIN") as cp:
        for row in rows:
            cp.write_row(row)


def clear_patterns(conn: Any, agents_like: str) -> None:
    """Every pattern and what hangs off it, and the agents named ``agents_like``."""
    conn.execute("TRUNCATE patterns, votes, comments, collections, bookmarks, flags CASCADE")
    conn.execute("DELETE FROM agents WHERE username LIKE %s", (agents_like,))


def set_search_model(conn: Any, model: str) -> None:
    """The model the stored vectors are of, as the service records it."""
    conn.execute(
        "INSERT INTO search_model (id, model) VALUES (1, %s)"
        " ON CONFLICT (id) DO UPDATE SET model = excluded.model",
        (model,),
    )


def vacuum(conn: Any, *tables: str) -> None:
    """Commit, then VACUUM ANALYZE ``tables`` (a bulk load or a migration may
    just have rewritten them; autovacuum keeps a steady-state table)."""
    conn.commit()
    conn.autocommit = True
    for table in tables:
        conn.execute(f"VACUUM ANALYZE {table}")
