"""threads: a thread's own sequence and read state, and who follows it

Revision ID: 0029_threads
Revises: 0028_saved_messages
Create Date: 2026-12-07

A reply opens or continues the thread of its root (docs/guide/threads.md). Each thread numbers its
replies gap-free (thread.last_reply_seq, a second counter beside the conversation's seq, which every
reply still takes); thread_reply says which thread a reply is in, its number there, and whether it is
thread-only (not also sent to the conversation: it counts in the thread's unread, not the
conversation's), and whether it is deleted (a tombstone keeps its reply seq; thread_reply_deleted_idx
counts the deleted ones above a thread watermark). thread_member is a member's thread watermark,
whether they follow it, and the reply seq of their first reply (participants, in that order).

The conversation's unread stays a subtraction: conversation.thread_only_count says whether a
conversation has had a thread-only reply, and thread_reply_thread_only_idx counts those above a
member's read position. New tables and a column with a default: nothing rewritten.
"""

from alembic import op

revision = "0029_threads"
down_revision = "0028_saved_messages"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE thread (
            conversation_id bigint NOT NULL,
            root_seq bigint NOT NULL CHECK (root_seq > 0),
            last_reply_seq bigint NOT NULL DEFAULT 0 CHECK (last_reply_seq >= 0),
            last_reply_at timestamptz,
            PRIMARY KEY (conversation_id, root_seq)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE thread_reply (
            conversation_id bigint NOT NULL,
            seq bigint NOT NULL,
            root_seq bigint NOT NULL,
            reply_seq bigint NOT NULL CHECK (reply_seq > 0),
            thread_only boolean NOT NULL,
            deleted boolean NOT NULL DEFAULT false,
            PRIMARY KEY (conversation_id, seq),
            CONSTRAINT thread_reply_root_reply_seq_key UNIQUE (conversation_id, root_seq, reply_seq)
        )
        """
    )
    op.execute(
        "CREATE INDEX thread_reply_thread_only_idx ON thread_reply (conversation_id, seq) WHERE thread_only"
    )
    op.execute(
        "CREATE INDEX thread_reply_deleted_idx ON thread_reply (conversation_id, root_seq, reply_seq) WHERE deleted"
    )
    op.execute(
        """
        CREATE TABLE thread_member (
            conversation_id bigint NOT NULL,
            root_seq bigint NOT NULL,
            user_id text COLLATE "C" NOT NULL,
            last_read_reply_seq bigint NOT NULL DEFAULT 0 CHECK (last_read_reply_seq >= 0),
            following boolean NOT NULL DEFAULT true,
            first_reply_seq bigint,
            PRIMARY KEY (conversation_id, root_seq, user_id)
        )
        """
    )
    op.execute("CREATE INDEX thread_member_following_idx ON thread_member (user_id) WHERE following")
    op.execute("ALTER TABLE conversation ADD COLUMN thread_only_count bigint NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE conversation DROP COLUMN thread_only_count")
    op.execute("DROP TABLE thread_member")
    op.execute("DROP TABLE thread_reply")
    op.execute("DROP TABLE thread")
