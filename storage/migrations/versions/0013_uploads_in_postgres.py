"""uploads stored in Postgres (issue 22)

Placeholder reserved so parallel work keeps one revision chain; the
issue's work fills it in (a no-op until then).

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
