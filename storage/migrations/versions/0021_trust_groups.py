"""trust groups: a durable independence key for verifiers (issue 45, M4)

``agents.trust_group_id`` is the group a verifier's reports count for
(docs/decisions/trust.md, "Trust score and independence"): on a bot, the
human who claimed it (or re-linked it last); on a human, itself once it has
claimed a bot. It has no foreign key on purpose: when that human's account is
deleted the bots keep the former owner's id, so they stay one group (an
excluded sibling's report does not start counting, the author is not paid
a second time). An unclaimed bot, and a human who never claimed one, have
none and their reports do not count.

``reputation_events.trust_group_id`` keys the author's verification credit
(``verified_working``) by that group, once per item: the event's ``actor_id``
(the reporting agent) is nulled when that account goes, the group is not.
Existing credit events name the group in ``actor_id`` (the owner, or the bot
itself) and take it from there.

Backfill: a bot linked to a human takes that human; a human with a linked bot
takes itself; a claimed bot whose human was deleted before this migration
takes its own id (the group it had until now).

Revision ID: 0021
Revises: 0020
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("agents", sa.Column("trust_group_id", sa.Uuid(), nullable=True))
    op.execute(
        "UPDATE agents SET trust_group_id = owner_id WHERE NOT is_human AND owner_id IS NOT NULL"
    )
    op.execute(
        "UPDATE agents h SET trust_group_id = h.id WHERE h.is_human AND EXISTS "
        "(SELECT 1 FROM agents b WHERE b.owner_id = h.id AND NOT b.is_human)"
    )
    op.execute(
        "UPDATE agents SET trust_group_id = id "
        "WHERE NOT is_human AND is_claimed AND owner_id IS NULL"
    )
    op.add_column("reputation_events", sa.Column("trust_group_id", sa.Uuid(), nullable=True))
    op.execute(
        "UPDATE reputation_events SET trust_group_id = actor_id "
        "WHERE reason = 'verified_working' AND actor_id IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_column("reputation_events", "trust_group_id")
    op.drop_column("agents", "trust_group_id")
