"""attachments: validated metadata of the files a message points to (the bytes live in the client's storage)

Revision ID: 0010d
Revises: 0010c
Create Date: 2026-12-02

One row per attachment, keyed (conversation_id, seq, position): written in the send's transaction,
erased by a delete in the delete's transaction. A new table: nothing rewritten.
"""

from alembic import op

revision = "0010d"
down_revision = "0010c"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE message_attachment (
            conversation_id bigint NOT NULL,
            seq bigint NOT NULL,
            position smallint NOT NULL,
            url text NOT NULL,
            mime_type text NOT NULL,
            name text NOT NULL,
            size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
            width integer,
            height integer,
            PRIMARY KEY (conversation_id, seq, position)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE message_attachment")
