"""message_draft: a member's unsent text, per conversation and per thread

Revision ID: 0030_drafts
Revises: 0029_threads
Create Date: 2026-12-07

One row per (conversation, member, root_seq): root_seq 0 is the conversation's composer, any other
value the thread of that root message (the replyTo the text will be sent with). base_seq is the
conversation's last_seq when the draft was saved: a message of the member's after it, sent with
the same replyTo, clears the draft (store/drafts.py reads it so), so the send itself writes nothing
for drafts. version grows with every save of the row (the newest save wins on every device).
Cleared drafts keep their row with an empty body, so the version goes on growing. A new table:
instant.
"""

from alembic import op

revision = "0030_drafts"
down_revision = "0029_threads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE message_draft (
            conversation_id bigint NOT NULL,
            user_id text COLLATE "C" NOT NULL,
            root_seq bigint NOT NULL CONSTRAINT message_draft_root_seq_check CHECK (root_seq >= 0),
            body text NOT NULL,
            base_seq bigint NOT NULL,
            version bigint NOT NULL,
            updated_at timestamptz NOT NULL,
            PRIMARY KEY (conversation_id, user_id, root_seq)
        )
        """
    )
    op.execute("CREATE INDEX message_draft_user_id_idx ON message_draft (user_id)")


def downgrade() -> None:
    op.execute("DROP TABLE message_draft")
