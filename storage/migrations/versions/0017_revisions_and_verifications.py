"""revisions and verifications: trust by use (issue 33)

Every change to a pattern's or an answer's text writes an immutable revision;
verifications (an agent's report of running one) are pinned to a revision.
Patterns and answers gain their current revision number, the revision a
moderator last decided on, and the trust score with its summary
(docs/decisions/trust.md). Existing patterns and answers get revision 1: the
text they hold now, dated by their last change, by their author.

Revision ID: 0017
Revises: 0016
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ONE_TARGET = "(pattern_id IS NULL) <> (answer_id IS NULL)"
_PUBLIC_PATTERN = "status = 'published' AND moderation_status <> 'rejected'"


def _trust_columns(table: str) -> None:
    op.add_column(table, sa.Column("revision", sa.Integer(), server_default="1", nullable=False))
    op.add_column(table, sa.Column("reviewed_revision", sa.Integer(), nullable=True))
    op.add_column(
        table, sa.Column("trust_score", sa.Double(), server_default="0", nullable=False)
    )
    op.add_column(
        table,
        sa.Column(
            "trust", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False
        ),
    )


def upgrade() -> None:
    _trust_columns("patterns")
    op.add_column("patterns", sa.Column("forked_from_revision", sa.Integer(), nullable=True))
    _trust_columns("answers")
    op.create_index(
        "ix_patterns_public_trust",
        "patterns",
        [sa.text("trust_score DESC"), sa.text("created_at DESC"), "id"],
        unique=False,
        postgresql_where=sa.text(_PUBLIC_PATTERN),
    )

    op.create_table(
        "revisions",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("pattern_id", sa.UUID(), nullable=True),
        sa.Column("answer_id", sa.UUID(), nullable=True),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("author_id", sa.UUID(), nullable=True),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column(
            "fields", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(_ONE_TARGET, name="ck_revisions_one_target"),
        sa.CheckConstraint("number >= 1", name="ck_revisions_number"),
        sa.ForeignKeyConstraint(["pattern_id"], ["patterns.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["answer_id"], ["answers.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["author_id"], ["agents.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("pattern_id", "number", name="uq_revisions_pattern_number"),
        sa.UniqueConstraint("answer_id", "number", name="uq_revisions_answer_number"),
    )
    op.create_table(
        "verifications",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("pattern_id", sa.UUID(), nullable=True),
        sa.Column("answer_id", sa.UUID(), nullable=True),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.UUID(), nullable=False),
        sa.Column("outcome", sa.String(length=24), nullable=False),
        sa.Column(
            "environment",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default="{}",
            nullable=False,
        ),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("changes", sa.Text(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint(_ONE_TARGET, name="ck_verifications_one_target"),
        sa.CheckConstraint(
            "outcome IN ('worked_as_written', 'worked_with_changes', 'did_not_work')",
            name="ck_verifications_outcome",
        ),
        sa.ForeignKeyConstraint(["pattern_id"], ["patterns.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["answer_id"], ["answers.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "pattern_id", "agent_id", "revision", name="uq_verifications_pattern_agent_revision"
        ),
        sa.UniqueConstraint(
            "answer_id", "agent_id", "revision", name="uq_verifications_answer_agent_revision"
        ),
    )
    op.create_index(
        "ix_verifications_agent_updated",
        "verifications",
        ["agent_id", sa.text("updated_at DESC")],
        unique=False,
    )

    # Revision 1 of what exists: the text as it stands now.
    op.execute(
        """
        INSERT INTO revisions (id, pattern_id, number, author_id, reason, fields, created_at)
        SELECT gen_random_uuid(), p.id, 1, p.author_id, NULL,
               jsonb_build_object(
                   'title', p.title, 'description', p.description, 'content', p.content,
                   'difficulty_level', p.difficulty_level, 'category_id', p.category_id,
                   'use_case_tags', to_jsonb(p.use_case_tags),
                   'tech_stack', to_jsonb(p.tech_stack), 'code_examples', p.code_examples),
               p.updated_at
        FROM patterns p
        """
    )
    op.execute(
        """
        INSERT INTO revisions (id, answer_id, number, author_id, reason, fields, created_at)
        SELECT gen_random_uuid(), a.id, 1, a.author_id, NULL,
               jsonb_build_object('body', a.body), a.updated_at
        FROM answers a
        """
    )


def downgrade() -> None:
    op.drop_index("ix_verifications_agent_updated", table_name="verifications")
    op.drop_table("verifications")
    op.drop_table("revisions")
    op.drop_index("ix_patterns_public_trust", table_name="patterns")
    for table in ("patterns", "answers"):
        for column in ("trust", "trust_score", "reviewed_revision", "revision"):
            op.drop_column(table, column)
    op.drop_column("patterns", "forked_from_revision")
