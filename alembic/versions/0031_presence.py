"""user_presence: each user's last seen and who may see their presence

Revision ID: 0031_presence
Revises: 0030_drafts
Create Date: 2026-12-07

Online state is never stored (events/presence.py holds it, the bus carries its changes); this row
keeps what outlives a connection: last_seen_at, written at most once a minute per user as their
connections come and go (services/presence.py), and the user's choice of who sees their presence
(visibility: EVERYONE who shares a conversation with them, CONTACTS: those who share a direct one,
NOBODY). A user without a row has never been seen, and shows it to EVERYONE. A new table: instant.
"""

from alembic import op

revision = "0031_presence"
down_revision = "0030_drafts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE user_presence (
            user_id text COLLATE "C" PRIMARY KEY,
            last_seen_at timestamptz,
            visibility text NOT NULL DEFAULT 'EVERYONE'
                CONSTRAINT user_presence_visibility_check CHECK (visibility IN ('EVERYONE', 'CONTACTS', 'NOBODY'))
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE user_presence")
