"""message_mention: who a message mentions, for unread-mention counts without a history scan

Revision ID: 0011a
Revises: 0011
Create Date: 2026-12-02

One row per (conversation, mentioned user, seq), written in the send's transaction. The
primary key starts with the conversation id (Citus-compatible, like every key here) and
then the user: a member's unread mentions are one index range (seq above their own read
position), O(their unread mentions), never a scan of the history. Edits and deletes of a
message replace or drop its rows (store/mentions.py: replace_txn, delete_txn). A new table:
nothing is rewritten.
"""

from alembic import op

revision = "0011a"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE message_mention (
            conversation_id bigint NOT NULL,
            user_id bigint NOT NULL,
            seq bigint NOT NULL CHECK (seq > 0),
            PRIMARY KEY (conversation_id, user_id, seq)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE message_mention")
