"""scheduled_message: messages a member schedules to be sent later, fired by the scheduler

Revision ID: 0025_scheduled_messages
Revises: 0024_history_visibility
Create Date: 2026-12-07

A scheduled message waits in scheduled_message (state PENDING) until send_at; the scheduler
(services/scheduler.py) claims it when it is due (FOR UPDATE SKIP LOCKED, scheduled_message_due_idx)
and sends it in the claim's transaction, which marks it SENT with the seq it took (or FAILED with the
reason it was refused), so it is sent once. The sender edits or cancels it (CANCELED) while it is
PENDING. A new table: nothing rewritten.
"""

from alembic import op

revision = "0025_scheduled_messages"
down_revision = "0024_history_visibility"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE scheduled_message (
            conversation_id bigint NOT NULL,
            id bigint GENERATED ALWAYS AS IDENTITY,
            sender_id text COLLATE "C" NOT NULL,
            client_msg_id uuid NOT NULL,
            body text NOT NULL,
            send_at timestamptz NOT NULL,
            created_at timestamptz NOT NULL,
            state text NOT NULL DEFAULT 'PENDING'
                CONSTRAINT scheduled_message_state_check CHECK (state IN ('PENDING', 'SENT', 'CANCELED', 'FAILED')),
            seq bigint,
            failure text,
            done_at timestamptz,
            PRIMARY KEY (conversation_id, id),
            CONSTRAINT scheduled_message_client_msg_id_key UNIQUE (conversation_id, client_msg_id)
        )
        """
    )
    op.execute("CREATE INDEX scheduled_message_due_idx ON scheduled_message (send_at) WHERE state = 'PENDING'")
    op.execute("CREATE INDEX scheduled_message_sender_idx ON scheduled_message (sender_id, send_at)")


def downgrade() -> None:
    op.execute("DROP TABLE scheduled_message")
