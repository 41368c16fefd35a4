"""content screening (issue 49): items held for safety, and what the screen found

``moderation_status`` gains ``held_for_safety`` on patterns, questions and
answers (an item whose text addresses instructions to the reading agent is
stored but shown to its author and moderators only); the public predicates of
storage/access.py exclude it, so the partial indexes over public patterns are
rebuilt with the new predicate (the planner matches them by text).

A flag may give the reason ``unsafe``.

``safety`` (JSONB, null until screened) holds what the screen found on the
item's last write: ``labels`` (risky code), ``reasons`` (why it is held),
``screened_at`` and ``ruleset_version`` (docs/decisions/safety.md).

Revision ID: 0025
Revises: 0024
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATES_OLD = "'approved', 'pending', 'flagged', 'rejected'"
_STATES_NEW = "'approved', 'pending', 'flagged', 'rejected', 'held_for_safety'"
_PUBLIC_OLD = "status = 'published' AND moderation_status <> 'rejected'"
_PUBLIC_NEW = "status = 'published' AND moderation_status NOT IN ('rejected', 'held_for_safety')"
_INDEXES = {
    "ix_patterns_public_newest": ["created_at DESC", "id"],
    "ix_patterns_public_top": ["vote_score DESC", "created_at DESC", "id"],
    "ix_patterns_public_author": ["author_id", "created_at DESC", "id"],
    "ix_patterns_public_trust": ["trust_score DESC", "created_at DESC", "id"],
}


def _states(states: str) -> None:
    for table in ("patterns", "questions", "answers"):
        op.drop_constraint(f"ck_{table}_moderation", table, type_="check")
        op.create_check_constraint(
            f"ck_{table}_moderation", table, f"moderation_status IN ({states})"
        )


def _indexes(predicate: str) -> None:
    for name, columns in _INDEXES.items():
        op.drop_index(name, table_name="patterns")
        op.create_index(
            name,
            "patterns",
            [sa.text(c) if " " in c else c for c in columns],
            postgresql_where=sa.text(predicate),
        )


_REASONS_OLD = "'spam', 'offensive', 'low_quality', 'misleading', 'other'"
_REASONS_NEW = "'spam', 'offensive', 'low_quality', 'misleading', 'unsafe', 'other'"


def _reasons(reasons: str) -> None:
    op.drop_constraint("ck_flags_reason", "flags", type_="check")
    op.create_check_constraint("ck_flags_reason", "flags", f"reason IN ({reasons})")


def upgrade() -> None:
    for table in ("patterns", "questions", "answers"):
        op.add_column(
            table, sa.Column("safety", postgresql.JSONB(astext_type=sa.Text()), nullable=True)
        )
    _reasons(_REASONS_NEW)
    _states(_STATES_NEW)
    _indexes(_PUBLIC_NEW)


def downgrade() -> None:
    # Held items go back to the moderators' pending queue.
    for table in ("patterns", "questions", "answers"):
        op.execute(
            f"UPDATE {table} SET moderation_status = 'pending' "  # noqa: S608
            "WHERE moderation_status = 'held_for_safety'"
        )
    op.execute("UPDATE flags SET reason = 'other' WHERE reason = 'unsafe'")
    _reasons(_REASONS_OLD)
    _indexes(_PUBLIC_OLD)
    _states(_STATES_OLD)
    for table in ("patterns", "questions", "answers"):
        op.drop_column(table, "safety")
