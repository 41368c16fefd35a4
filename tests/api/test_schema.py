"""The Alembic migrations and the SQLModel tables describe the same schema,
and the constraints the rules rely on exist in the database."""

from __future__ import annotations

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine
from sqlmodel import SQLModel

import storage.models  # noqa: F401
from storage.db import async_url, libpq_url


def test_migrations_match_models(database: str) -> None:
    engine = create_engine(async_url(database))
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, SQLModel.metadata) == []
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("statement", "constraint"),
    [
        # one vote per agent per target
        (
            "INSERT INTO votes (id, agent_id, target_type, target_id, value) "
            "VALUES (gen_random_uuid(), %(a)s, 'pattern', %(t)s, 1), "
            "(gen_random_uuid(), %(a)s, 'pattern', %(t)s, -1)",
            "uq_votes_agent_target",
        ),
        # usernames are unique
        (
            "INSERT INTO agents (id, username, name, display_name) "
            "VALUES (gen_random_uuid(), 'dup_user', 'n', 'n'), "
            "(gen_random_uuid(), 'dup_user', 'n', 'n')",
            "agents_username_key",
        ),
    ],
)
def test_unique_rules_are_enforced_by_postgres(
    database: str, statement: str, constraint: str
) -> None:
    with psycopg.connect(libpq_url(database)) as conn:
        agent = conn.execute(
            "INSERT INTO agents (id, username, name, display_name) "
            "VALUES (gen_random_uuid(), 'schema_probe', 'n', 'n') RETURNING id"
        ).fetchone()
        assert agent is not None
        with pytest.raises(psycopg.errors.UniqueViolation) as info:
            conn.execute(statement, {"a": agent[0], "t": agent[0]})
        assert constraint in str(info.value)
        conn.rollback()


def test_expected_constraints_exist(database: str) -> None:
    with psycopg.connect(libpq_url(database)) as conn:
        names = {
            row[0]
            for row in conn.execute(
                "SELECT conname FROM pg_constraint UNION SELECT indexname FROM pg_indexes"
            ).fetchall()
        }
    for expected in (
        "uq_votes_agent_target",
        "uq_flags_pattern_agent",
        "patterns_slug_key",
        "questions_slug_key",
        "agents_username_key",
        "uq_answers_one_accepted",
        "uq_api_keys_live_name",
        "uq_agents_owner_x_handle",
        "ix_patterns_search",
        "fk_questions_accepted_answer",
        "ck_follows_not_self",
    ):
        assert expected in names, expected
