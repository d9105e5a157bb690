"""send_verdict: what the before-send hook decided for a clientMsgId it rejected or rewrote

Revision ID: 0020_send_verdicts
Revises: 0019_slow_mode
Create Date: 2026-12-07

The before-send hook (services/beforesend.py) may reject a message or rewrite its body. A retry
of the same clientMsgId must get the same answer without asking the hook again: a rejected one is
rejected the same way (never stored), a rewritten one answers the stored message. The verdict is
kept per (conversation, clientMsgId), with the sender and a SHA-256 of the body as sent (not the
body: nothing of a message outlives its erase). An accepted message needs no row: it is stored.
A new table: nothing rewritten.
"""

from alembic import op

revision = "0020_send_verdicts"
down_revision = "0019_slow_mode"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE send_verdict (
            conversation_id bigint NOT NULL,
            client_msg_id uuid NOT NULL,
            sender_id text COLLATE "C" NOT NULL,
            body_sha256 bytea NOT NULL,
            verdict text NOT NULL CONSTRAINT send_verdict_verdict_check CHECK (verdict IN ('REJECTED', 'REWRITTEN')),
            reason text,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (conversation_id, client_msg_id)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE send_verdict")
