"""pinned_message: a conversation's pinned messages, and the PINNED and UNPINNED change kinds

Revision ID: 0017_pins
Revises: 0016_function_sources
Create Date: 2026-12-07

One row per pinned message, keyed (conversation_id, seq) like every key here (Citus-compatible):
who pinned it, when, and until when (expires_at, NULL: until unpinned). The pinned list is one
range of the key, at most 50 live rows (services/pins.py's MAX_PINS); a row whose expires_at has
passed or whose message is deleted is no longer pinned, and the next pin of that conversation
removes it. A pin or an unpin takes a change seq (message_change kinds PINNED, UNPINNED), never a
message seq. A new table; the kind check is replaced NOT VALID (no scan under the exclusive lock),
then validated outside the migration's transaction (a scan of message_change that lets reads and
writes go on).
"""

from alembic import op

revision = "0017_pins"
down_revision = "0016_function_sources"
branch_labels = None
depends_on = None

_OLD_KINDS = "'EDITED', 'DELETED', 'REACTION'"
_NEW_KINDS = "'EDITED', 'DELETED', 'REACTION', 'PINNED', 'UNPINNED'"


def _kinds(kinds: str) -> None:
    op.execute(
        "ALTER TABLE message_change DROP CONSTRAINT message_change_kind_check,"
        f" ADD CONSTRAINT message_change_kind_check CHECK (kind IN ({kinds})) NOT VALID"
    )
    with op.get_context().autocommit_block():  # the exclusive lock is released before the scan
        op.execute("ALTER TABLE message_change VALIDATE CONSTRAINT message_change_kind_check")


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE pinned_message (
            conversation_id bigint NOT NULL,
            seq bigint NOT NULL CHECK (seq > 0),
            pinned_by text COLLATE "C" NOT NULL,
            pinned_at timestamptz NOT NULL,
            expires_at timestamptz,
            PRIMARY KEY (conversation_id, seq)
        )
        """
    )
    _kinds(_NEW_KINDS)


def downgrade() -> None:
    op.execute("DELETE FROM message_change WHERE kind IN ('PINNED', 'UNPINNED')")
    _kinds(_OLD_KINDS)
    op.execute("DROP TABLE pinned_message")
