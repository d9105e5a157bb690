"""message changes: edits and deletes with a second gap-free counter (the change seq)

Revision ID: 0010
Revises: 0011b
Create Date: 2026-12-02

Edits and deletes never take a message seq (seq stays the count of messages
sent: unread is a subtraction, a gap is a missing message). Each change takes
the next value of conversation.last_change_seq under the conversation's lock
and is recorded in message_change (what changed: kind, seq, who), the log that
sync and resumable subscriptions replay after a client's change cursor.

- message: edited_at, deleted_at, deleted_by (nullable, no default: instant).
  A delete leaves the row as a tombstone at its seq with body '' and erases
  its edit history (message_edit) in the same transaction.
- message_edit: the previous bodies of an edited message (readable by members).
- conversation_member.unread_deleted: deleted messages above the member's
  watermark, so unreadCount = last_seq - last_read_seq - unread_deleted with no
  COUNT over history. A delete adds one to the members that had not read the
  message (index range on conversation_member_read_idx); a watermark move over
  deleted messages is corrected by the row trigger below, which counts only
  the deleted seqs between the old and the new watermark (the partial index
  message_change_deleted_idx) and fires only when the member has any
  (unread_deleted > 0) or the watermark moves back: a plain markRead or send
  does not call it (the WHEN clause is evaluated without calling the function).
  New members start at lastSeq (nothing unread), so inserts need no trigger.
"""

from alembic import op

revision = "0010"
down_revision = "0011b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE conversation ADD COLUMN last_change_seq bigint NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE conversation_member ADD COLUMN unread_deleted bigint NOT NULL DEFAULT 0")
    op.execute(
        "ALTER TABLE conversation_member ADD CONSTRAINT conversation_member_unread_deleted_check"
        " CHECK (unread_deleted >= 0)"
    )
    op.execute("ALTER TABLE message ADD COLUMN edited_at timestamptz")
    op.execute("ALTER TABLE message ADD COLUMN deleted_at timestamptz")
    op.execute("ALTER TABLE message ADD COLUMN deleted_by bigint")
    op.execute(
        """
        CREATE TABLE message_change (
            conversation_id bigint NOT NULL,
            change_seq bigint NOT NULL CHECK (change_seq > 0),
            seq bigint NOT NULL,
            kind text NOT NULL CHECK (kind IN ('EDITED', 'DELETED', 'REACTION')),
            user_id bigint NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (conversation_id, change_seq)
        )
        """
    )
    op.execute(
        "CREATE INDEX message_change_deleted_idx ON message_change (conversation_id, seq) WHERE kind = 'DELETED'"
    )
    op.execute(
        """
        CREATE TABLE message_edit (
            conversation_id bigint NOT NULL,
            seq bigint NOT NULL,
            change_seq bigint NOT NULL,
            body text NOT NULL,
            written_at timestamptz NOT NULL,
            replaced_at timestamptz NOT NULL,
            PRIMARY KEY (conversation_id, seq, change_seq)
        )
        """
    )
    op.execute(
        """
        CREATE FUNCTION conversation_member_unread_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.last_read_seq > OLD.last_read_seq THEN
                NEW.unread_deleted := OLD.unread_deleted - (
                    SELECT count(*) FROM message_change
                     WHERE conversation_id = NEW.conversation_id AND kind = 'DELETED'
                       AND seq > OLD.last_read_seq AND seq <= NEW.last_read_seq);
            ELSE
                NEW.unread_deleted := OLD.unread_deleted + (
                    SELECT count(*) FROM message_change
                     WHERE conversation_id = NEW.conversation_id AND kind = 'DELETED'
                       AND seq > NEW.last_read_seq AND seq <= OLD.last_read_seq);
            END IF;
            RETURN NEW;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER conversation_member_unread_deleted BEFORE UPDATE OF last_read_seq ON conversation_member
        FOR EACH ROW
        WHEN (NEW.last_read_seq <> OLD.last_read_seq
              AND (OLD.unread_deleted > 0 OR NEW.last_read_seq < OLD.last_read_seq))
        EXECUTE FUNCTION conversation_member_unread_deleted()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER conversation_member_unread_deleted ON conversation_member")
    op.execute("DROP FUNCTION conversation_member_unread_deleted()")
    op.execute("DROP TABLE message_edit")
    op.execute("DROP TABLE message_change")
    op.execute("ALTER TABLE message DROP COLUMN deleted_by")
    op.execute("ALTER TABLE message DROP COLUMN deleted_at")
    op.execute("ALTER TABLE message DROP COLUMN edited_at")
    op.execute("ALTER TABLE conversation_member DROP COLUMN unread_deleted")
    op.execute("ALTER TABLE conversation DROP COLUMN last_change_seq")
