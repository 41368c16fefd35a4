"""lexical search statistics (issue 23)

Placeholder reserved so parallel work keeps one revision chain; the
issue's work fills it in (a no-op until then).

Revision ID: 0015
Revises: 0014
"""

from collections.abc import Sequence

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
