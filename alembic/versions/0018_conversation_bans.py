"""conversation_ban: who is kept out of a group, until when, by whom and why

Revision ID: 0018_conversation_bans
Revises: 0017_pins
Create Date: 2026-12-07

A group's OWNER or an ADMIN bans a user (services/bans.py): the user is removed and cannot be
added back while the ban holds (until NULL: until unbanned; otherwise until that time). The
operator's moderation may write it too. One row per (conversation, user); an expired row is as
good as none and is replaced by the next ban. A new table: nothing rewritten.
"""

from alembic import op

revision = "0018_conversation_bans"
down_revision = "0017_pins"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE conversation_ban (
            conversation_id bigint NOT NULL,
            user_id text COLLATE "C" NOT NULL,
            until timestamptz,
            banned_by text COLLATE "C",
            reason text,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (conversation_id, user_id)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE conversation_ban")
