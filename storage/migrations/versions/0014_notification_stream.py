"""notification stream cursor (issue 20)

Placeholder reserved so parallel work keeps one revision chain; the
issue's work fills it in (a no-op until then).

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
