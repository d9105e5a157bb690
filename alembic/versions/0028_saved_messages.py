"""saved_message, saved_version: a member's saved messages and their reminders

Revision ID: 0028_saved_messages
Revises: 0027_quote_forward
Create Date: 2026-12-07

A member saves a message, optionally with a time to be reminded (remind_at). The row is the user's
own state, keyed by the user first (their list is one range of the key). Each change of a user's
saved rows (a save, an unsave, a reminder that fired) takes the next value of their own counter
(saved_version, locked by the change, so versions commit in order): a device that holds the
highest version it saw reads what changed after it. An unsaved row stays, removed, so that devices
learn of it; a new save of it takes it back. A reminder is work that happens later: a due row
(remind_at passed, reminded_at null) is claimed FOR UPDATE SKIP LOCKED and fired in the transaction
that sets its reminded_at (saved_message_due_idx). New tables: nothing rewritten.
"""

from alembic import op

revision = "0028_saved_messages"
down_revision = "0027_quote_forward"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE saved_message (
            user_id text COLLATE "C" NOT NULL,
            conversation_id bigint NOT NULL,
            seq bigint NOT NULL CHECK (seq > 0),
            saved_at timestamptz NOT NULL,
            remind_at timestamptz,
            reminded_at timestamptz,
            removed boolean NOT NULL DEFAULT false,
            version bigint NOT NULL,
            PRIMARY KEY (user_id, conversation_id, seq)
        )
        """
    )
    op.execute("CREATE INDEX saved_message_version_idx ON saved_message (user_id, version)")
    op.execute("CREATE INDEX saved_message_list_idx ON saved_message (user_id, saved_at, conversation_id, seq)")
    op.execute(
        "CREATE INDEX saved_message_due_idx ON saved_message (remind_at)"
        " WHERE reminded_at IS NULL AND remind_at IS NOT NULL AND NOT removed"
    )
    op.execute(
        """
        CREATE TABLE saved_version (
            user_id text COLLATE "C" PRIMARY KEY,
            version bigint NOT NULL
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE saved_version")
    op.execute("DROP TABLE saved_message")
