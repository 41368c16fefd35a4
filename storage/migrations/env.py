"""Alembic environment: migrations run on a sync psycopg connection under an advisory lock."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool, text
from sqlmodel import SQLModel

import storage.models  # noqa: F401  (registers every table on the metadata)
from storage.db import async_url

# Any number beyond our own tables' ids: serialises concurrent `upgrade` calls.
MIGRATION_LOCK = 72_730_001

config = context.config
target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    url = config.attributes.get("database_url") or config.get_main_option("sqlalchemy.url")
    assert url, "no database URL given to alembic"
    engine = create_engine(async_url(url), poolclass=pool.NullPool, hide_parameters=True)
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
        connection.commit()
        try:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                compare_type=True,
                compare_server_default=False,
            )
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
            connection.commit()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; give a database URL")
run_migrations_online()
