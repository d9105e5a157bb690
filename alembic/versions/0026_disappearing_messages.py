"""disappearing messages: conversation.message_ttl_seconds, message_expiry, chat_send writing it

Revision ID: 0026_disappearing_messages
Revises: 0025_scheduled_messages
Create Date: 2026-12-07

A conversation's time to live (0: off) is set by those allowed (services/disappearing.py). Each
message sent while it is on gets a message_expiry row (chat_send, under the conversation's lock:
created_at + the time to live); the scheduler claims the rows that are due (FOR UPDATE SKIP LOCKED,
message_expiry_due_idx) and makes each message a tombstone in the claim's transaction, deleting the
row. chat_send_batch leaves such a conversation's sends to chat_send, as in slow mode. A column with
a constant default and a new table: nothing rewritten.
"""

from alembic import op

from chatgql.db import function_source

revision = "0026_disappearing_messages"
down_revision = "0025_scheduled_messages"
branch_labels = None
depends_on = None

FUNCTIONS = ("chat_send", "chat_send_batch")


def upgrade() -> None:
    op.execute(
        "ALTER TABLE conversation ADD COLUMN message_ttl_seconds integer NOT NULL DEFAULT 0"
        " CONSTRAINT conversation_message_ttl_seconds_check CHECK (message_ttl_seconds >= 0)"
    )
    op.execute(
        """
        CREATE TABLE message_expiry (
            conversation_id bigint NOT NULL,
            seq bigint NOT NULL,
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (conversation_id, seq)
        )
        """
    )
    op.execute("CREATE INDEX message_expiry_due_idx ON message_expiry (expires_at)")
    for name in FUNCTIONS:
        op.execute(function_source(name, revision))


def downgrade() -> None:
    for name in FUNCTIONS:
        op.execute(function_source(name, "0021_blocks"))
    op.execute("DROP TABLE message_expiry")
    op.execute("ALTER TABLE conversation DROP COLUMN message_ttl_seconds")
