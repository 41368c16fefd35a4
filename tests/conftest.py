"""Shared fixtures: a real Postgres (embedded, or CAIRN_TEST_DATABASE_URL) with a
fresh database per test session, migrated and seeded."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlmodel import SQLModel

import storage.models  # noqa: F401 - every table in SQLModel.metadata
from storage.db import libpq_url
from storage.embedded import database_url, drop_database, ensure_database, start_server
from storage.migrate import upgrade
from storage.seed import seed_categories

REPO = Path(__file__).resolve().parents[1]

# One model cache for the whole run, every service the tests start included
# (they inherit the environment): the ONNX graph is exported once (about 12 s
# of CPU), not once per state folder. Tests of the export itself pass a
# fresh cache_dir of their own (tests/unit/test_onnx_encoder.py).
os.environ.setdefault("CAIRN_MODEL_CACHE_DIR", str(REPO / ".cairn" / "test" / "models"))

# The order a whole run takes the folders in. The machine has two cores, and a
# running service is not free: the e2e suite's shared `cairn run` (Ray's
# daemons, the replicas' loops, HAProxy) takes about a sixth of a core while
# idle, and it lives until the last e2e test is done (its fixture is
# package-scoped). So inside e2e the tests that boot services or clusters of
# their own run before the first test that asks for the shared one.
FOLDER_ORDER = ("unit", "api", "security", "contract", "browser", "e2e")


def _run_order(item: pytest.Item, order: tuple[str, ...]) -> tuple[int, int]:
    folder = _folder(item)
    rank = order.index(folder) if folder in order else len(order)
    return rank, int("service" in getattr(item, "fixturenames", ()))


# Under pytest-xdist (`make test` runs `-n 2 --dist loadscope`) the e2e tests
# are one unit of work, sent first to one worker, which takes them in the
# order above while the other worker takes the in-process tests: an e2e run
# keeps about 0.85 of a core busy (its services start, then wait on Ray, on
# Prometheus and on each other), the in-process tests about one. Every other
# unit is a file, so a module's fixtures (the bf16 compile cache) are made
# once, and the heaviest folders go first, so that the last units are short.
# (xdist's own `loadgroup` marks do nothing under pytest 9.2: xdist 3.8 tags
# `item._nodeid`, which pytest no longer reads.)
E2E_UNIT = "tests/e2e"
XDIST_FOLDER_ORDER = ("e2e", "contract", "unit", "api", "security", "browser")


def _folder(item: pytest.Item) -> str:
    parts = Path(str(item.path)).relative_to(REPO).parts
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else ""


def _distributed(config: pytest.Config) -> bool:
    # A worker's options say dist "no"; it has a `workerinput`.
    return hasattr(config, "workerinput") or (
        bool(getattr(config.option, "numprocesses", None))
        and getattr(config.option, "dist", "no") == "loadscope"
    )


def pytest_configure(config: pytest.Config) -> None:
    if _distributed(config):
        # Units in the order the collection gives them, not largest first.
        config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndE2e(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return E2E_UNIT if path.startswith(E2E_UNIT + "/") else path

    return FilesAndE2e(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A stable sort: files, and tests within a file, keep their order.
    order = XDIST_FOLDER_ORDER if _distributed(config) else FOLDER_ORDER
    items.sort(key=lambda item: _run_order(item, order))


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """Admin URL of the server the tests use (never the dev database)."""
    external = os.environ.get("CAIRN_TEST_DATABASE_URL")
    if external:
        return external
    url = start_server(REPO / ".cairn" / "test")
    # The tests' own server holds nothing worth keeping across a crash: a
    # commit need not wait for the disk (about 6 ms a commit here, 0.6 ms
    # without), and nothing is flushed to it. Set in its data folder, so a
    # restart (the outage drills) keeps them.
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {name} = off")
        conn.execute("SELECT pg_reload_conf()")
    return url


@pytest.fixture(scope="session")
def database(pg_admin_url: str) -> Iterator[str]:
    """A new database for this session, migrated to head and seeded."""
    name = f"cairn_test_{secrets.token_hex(4)}"
    ensure_database(pg_admin_url, name)
    url = database_url(pg_admin_url, name)
    upgrade(url)
    seed_categories(url)
    yield url
    drop_database(pg_admin_url, name)


# The tables a test's clean-up leaves as they are: the seeded categories.
KEEP = {"categories", "alembic_version"}
EMPTY_WAIT = "60s"


def empty_tables(database: str) -> None:
    """Empty every table but ``KEEP``, as the next test expects to find them.

    DELETE, not TRUNCATE: a TRUNCATE makes new files for every table and
    index (about 0.3 s for this schema on every test), where deleting the few
    rows a test wrote takes milliseconds. The session runs as a replica
    (``session_replication_role``), so neither the foreign keys nor the
    triggers fire: the tables can go in any order, and emptying them writes
    no search jobs or credential notices, as a TRUNCATE would not. Sequences
    go on counting, as they did with TRUNCATE. Should a lock still be held
    after a minute, this fails and names the sessions holding it."""
    tables = [t.name for t in SQLModel.metadata.sorted_tables if t.name not in KEEP]
    with psycopg.connect(libpq_url(database)) as conn:
        conn.execute(f"SET lock_timeout = '{EMPTY_WAIT}'")
        conn.execute("SET session_replication_role = replica")
        try:
            for attempt in range(3):
                try:
                    conn.execute("; ".join(f"DELETE FROM {name}" for name in tables))
                    break
                except psycopg.errors.DeadlockDetected:
                    # A reader that locks rows one by one (the app's search
                    # indexes loading at start) met the clean-up halfway:
                    # Postgres chose it as the victim; try again.
                    conn.rollback()
                    if attempt == 2:
                        raise
        except psycopg.errors.LockNotAvailable:
            conn.rollback()
            holders = conn.execute(
                "SELECT pid, state, left(query, 200) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND state <> 'idle'"
            ).fetchall()
            raise RuntimeError(
                f"Emptying the tables after the test waited {EMPTY_WAIT} for locks held by "
                f"{holders}"
            ) from None


@pytest.fixture(autouse=True)
def _unit_tests_leave_the_database_empty(request: pytest.FixtureRequest) -> Iterator[None]:
    """A unit test that writes to the session's database empties it after
    itself, as the API and security tests' `_clean` does for theirs: the next
    file on its worker may be an API test that counts rows. (tests/unit's key
    cache tests left a dozen agents behind, which a run on three workers put
    in front of the analytics test's totals.)"""
    yield
    if _folder(request.node) == "unit" and "database" in request.fixturenames:
        empty_tables(request.getfixturevalue("database"))
