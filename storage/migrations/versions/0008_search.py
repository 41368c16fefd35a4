"""semantic search: stable FAISS ids, agent full-text, stored embeddings, the
search job queue and the triggers that fill it

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

AGENT_TSVECTOR = (
    "setweight(to_tsvector('english'::regconfig, coalesce(display_name, '')), 'A') || "
    "setweight(to_tsvector('simple'::regconfig, coalesce(username, '')), 'A') || "
    "setweight(to_tsvector('english'::regconfig, coalesce(bio, '')), 'B')"
)

# kind -> (table, columns whose change queues a job); storage/models/search.py
WATCHED = {
    "pattern": (
        "patterns",
        (
            "title",
            "description",
            "content",
            "use_case_tags",
            "tech_stack",
            "status",
            "moderation_status",
        ),
    ),
    "agent": ("agents", ("display_name", "username", "bio", "is_active", "is_human")),
    "question": ("questions", ("title", "body", "status", "moderation_status")),
}


def upgrade() -> None:
    for table in ("patterns", "agents", "questions"):
        op.add_column(
            table,
            sa.Column("search_id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        )
        op.create_unique_constraint(f"{table}_search_id_key", table, ["search_id"])
    op.add_column(
        "agents",
        sa.Column(
            "search_vector",
            postgresql.TSVECTOR(),
            sa.Computed(AGENT_TSVECTOR, persisted=True),
            nullable=True,
        ),
    )
    op.create_index(
        "ix_agents_search", "agents", ["search_vector"], unique=False, postgresql_using="gin"
    )
    op.create_table(
        "embeddings",
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("item_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("text_hash", sa.LargeBinary(length=32), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.Column(
            "embedded_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("kind", "item_id", "model"),
    )
    op.create_index("ix_embeddings_model_kind", "embeddings", ["model", "kind"], unique=False)
    op.create_table(
        "search_jobs",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("item_id", postgresql.UUID(as_uuid=True), nullable=False),
        sa.Column("search_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "queued_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "search_model",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column(
            "activated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    # Every change that can alter a row's vector or its visibility queues a
    # job in the writing transaction itself: no code path can forget it, and
    # a crash loses none (the worker deletes jobs only with their results).
    op.execute(
        """
        CREATE FUNCTION cairn_queue_search_job() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                INSERT INTO search_jobs (kind, item_id, search_id)
                VALUES (TG_ARGV[0], OLD.id, OLD.search_id);
            ELSE
                INSERT INTO search_jobs (kind, item_id, search_id)
                VALUES (TG_ARGV[0], NEW.id, NEW.search_id);
            END IF;
            PERFORM pg_notify('cairn_search', TG_ARGV[0]);
            RETURN NULL;
        END
        $$
        """
    )
    for kind, (table, columns) in WATCHED.items():
        cols = ", ".join(columns)
        old = ", ".join(f"OLD.{c}" for c in columns)
        new = ", ".join(f"NEW.{c}" for c in columns)
        op.execute(
            f"CREATE TRIGGER {table}_search_job_write AFTER INSERT OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION cairn_queue_search_job('{kind}')"
        )
        op.execute(
            f"CREATE TRIGGER {table}_search_job_update AFTER UPDATE OF {cols} ON {table} "
            f"FOR EACH ROW WHEN (({old}) IS DISTINCT FROM ({new})) "
            f"EXECUTE FUNCTION cairn_queue_search_job('{kind}')"
        )


def downgrade() -> None:
    for table in ("patterns", "agents", "questions"):
        op.execute(f"DROP TRIGGER IF EXISTS {table}_search_job_update ON {table}")
        op.execute(f"DROP TRIGGER IF EXISTS {table}_search_job_write ON {table}")
    op.execute("DROP FUNCTION IF EXISTS cairn_queue_search_job()")
    op.drop_table("search_model")
    op.drop_table("search_jobs")
    op.drop_index("ix_embeddings_model_kind", table_name="embeddings")
    op.drop_table("embeddings")
    op.drop_index("ix_agents_search", table_name="agents")
    op.drop_column("agents", "search_vector")
    for table in ("patterns", "agents", "questions"):
        op.drop_constraint(f"{table}_search_id_key", table, type_="unique")
        op.drop_column(table, "search_id")
