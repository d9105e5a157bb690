"""replies: a message may quote an earlier one of its conversation (reply_to_seq); the quoted one keeps
its reply count and the time of its last reply

Revision ID: 0010c
Revises: 0010b
Create Date: 2026-12-02

Columns added without a table rewrite (nullable, or a constant default). message_reply_idx pages a
message's replies; it is partial (only replies are in it), so a plain send pays the predicate, not an
index insert. Building it reads the whole message table once (CREATE INDEX on the partitioned table:
each partition in turn, holding its lock): on a big table, build it per partition CONCURRENTLY first
(docs/operating/upgrading.md).
"""

from alembic import op

revision = "0010c"
down_revision = "0010b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE message ADD COLUMN reply_to_seq bigint")
    op.execute("ALTER TABLE message ADD COLUMN reply_count integer NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE message ADD COLUMN last_reply_at timestamptz")
    op.execute(
        "CREATE INDEX message_reply_idx ON message (conversation_id, reply_to_seq, seq) WHERE reply_to_seq IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX message_reply_idx")
    op.execute("ALTER TABLE message DROP COLUMN last_reply_at")
    op.execute("ALTER TABLE message DROP COLUMN reply_count")
    op.execute("ALTER TABLE message DROP COLUMN reply_to_seq")
