"""Shared fixtures: a real Postgres (embedded, or CAIRN_TEST_DATABASE_URL) with a
fresh database per test session, migrated and seeded."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.embedded import database_url, drop_database, ensure_database, start_server
from storage.migrate import upgrade
from storage.seed import seed_categories

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """Admin URL of the server the tests use (never the dev database)."""
    external = os.environ.get("CAIRN_TEST_DATABASE_URL")
    if external:
        return external
    return start_server(REPO / ".cairn" / "test")


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
