"""credential changes: a notice to every replica's key cache (issue 32)

Each Api replica keeps the API keys it verified lately (serve_app/runtime/
keycache.py; docs/decisions/admission.md, "Verified API keys
kept in the replica (issue 32)"). These triggers send the agent's id on
``cairn_credentials`` whenever one of its keys is revoked, replaced or
deleted, or the agent's standing or profile changes (deactivated, its role,
its owner, its name…), whatever writes it: the app, the CLI, an operator's
SQL. Postgres delivers the notice at commit (never for a rollback), and each
replica forgets that agent's keys. The counters (reputation, patterns,
followers) change on every vote and follow and are left out: no decision a
cached key serves reads them.

Revision ID: 0019
Revises: 0018
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHANNEL = "cairn_credentials"

# The agent columns whose change a cached key must not outlive.
AGENT_COLUMNS = (
    "username",
    "name",
    "display_name",
    "bio",
    "avatar_url",
    "verification_level",
    "is_human",
    "is_active",
    "role",
    "is_claimed",
    "owner_x_handle",
    "owner_id",
    "email",
    "password_hash",
    "email_verified_at",
)
KEY_COLUMNS = ("agent_id", "key_id", "key_hash", "revoked_at")


def _changed(columns: Sequence[str]) -> str:
    return " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in columns)


def upgrade() -> None:
    for name, column in (("agent", "id"), ("api_key", "agent_id")):
        op.execute(
            f"""
            CREATE FUNCTION cairn_{name}_credentials_changed() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('{CHANNEL}', OLD.{column}::text);
                RETURN NULL;
            END $$
            """
        )
    op.execute(
        f"CREATE TRIGGER agents_credentials_update AFTER UPDATE OF {', '.join(AGENT_COLUMNS)}"
        f" ON agents FOR EACH ROW WHEN ({_changed(AGENT_COLUMNS)})"
        " EXECUTE FUNCTION cairn_agent_credentials_changed()"
    )
    op.execute(
        "CREATE TRIGGER agents_credentials_delete AFTER DELETE ON agents"
        " FOR EACH ROW EXECUTE FUNCTION cairn_agent_credentials_changed()"
    )
    op.execute(
        f"CREATE TRIGGER api_keys_credentials_update AFTER UPDATE OF {', '.join(KEY_COLUMNS)}"
        f" ON api_keys FOR EACH ROW WHEN ({_changed(KEY_COLUMNS)})"
        " EXECUTE FUNCTION cairn_api_key_credentials_changed()"
    )
    op.execute(
        "CREATE TRIGGER api_keys_credentials_delete AFTER DELETE ON api_keys"
        " FOR EACH ROW EXECUTE FUNCTION cairn_api_key_credentials_changed()"
    )


def downgrade() -> None:
    for table in ("agents", "api_keys"):
        op.execute(f"DROP TRIGGER IF EXISTS {table}_credentials_update ON {table}")
        op.execute(f"DROP TRIGGER IF EXISTS {table}_credentials_delete ON {table}")
    op.execute("DROP FUNCTION IF EXISTS cairn_agent_credentials_changed()")
    op.execute("DROP FUNCTION IF EXISTS cairn_api_key_credentials_changed()")
