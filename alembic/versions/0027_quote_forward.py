"""message.quote_conversation_id, message.quote_seq, message.forwarded: quotes and forwards

Revision ID: 0027_quote_forward
Revises: 0026_disappearing_messages
Create Date: 2026-12-07

A message may quote another (sendMessage(quote:)), of its own conversation or of another its sender
reads: the quoted message's key, which each reader sees resolved as they may read it (Message.quote).
A forwarded message (forwardMessage) is a new message of its conversation marked forwarded, with no
key of the message it came from. Nullable columns and a constant default: nothing rewritten.
"""

from alembic import op

revision = "0027_quote_forward"
down_revision = "0026_disappearing_messages"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE message ADD COLUMN quote_conversation_id bigint, ADD COLUMN quote_seq bigint,"
        " ADD COLUMN forwarded boolean NOT NULL DEFAULT false"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE message DROP COLUMN forwarded, DROP COLUMN quote_seq, DROP COLUMN quote_conversation_id")
