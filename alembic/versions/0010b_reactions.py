"""reactions: one row per (message, user, emoji) and a count per (message, emoji) kept on write

Revision ID: 0010b
Revises: 0010
Create Date: 2026-12-02

- message_reaction: who reacted with what, keyed (conversation_id, seq, user_id, emoji), so adding
  twice is one row (idempotent) and the viewer's own reactions to a page of messages are a prefix
  probe; message_reaction_emoji_idx pages who reacted with one emoji by user id.
- message_reaction_count: per (message, emoji) how many, kept by the statement that adds or removes
  (under the conversation's lock, as every change): Message.reactions reads at most
  CHATGQL_MAX_REACTIONS_PER_MESSAGE rows, never counts reactions; the distinct-emoji limit is the
  number of those rows.
A reaction takes a change seq (kind REACTION), never a message seq. A delete erases both tables' rows.
"""

from alembic import op

revision = "0010b"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE message_reaction (
            conversation_id bigint NOT NULL,
            seq bigint NOT NULL,
            user_id bigint NOT NULL,
            emoji text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (conversation_id, seq, user_id, emoji)
        )
        """
    )
    op.execute("CREATE INDEX message_reaction_emoji_idx ON message_reaction (conversation_id, seq, emoji, user_id)")
    op.execute(
        """
        CREATE TABLE message_reaction_count (
            conversation_id bigint NOT NULL,
            seq bigint NOT NULL,
            emoji text NOT NULL,
            count integer NOT NULL CHECK (count > 0),
            first_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (conversation_id, seq, emoji)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE message_reaction_count")
    op.execute("DROP TABLE message_reaction")
