"""webhook_dead by conversation: an index on (msg_key, id)

Revision ID: 0015_webhook_dead_key
Revises: 0014_text_user_ids
Create Date: 2026-12-06

A delete or an erase withdraws the deleted messages' events from the webhook queue and the dead
letters in its own transaction (store/webhooks.py withdraw_txn): it looks up one conversation's
rows, which the queue's (msg_key, id) index finds and, with this one, so does webhook_dead, however
many dead letters a long endpoint outage left. A new index on a table that is empty or small:
nothing rewritten.
"""

from alembic import op

revision = "0015_webhook_dead_key"
down_revision = "0014_text_user_ids"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX webhook_dead_key_id_idx ON webhook_dead (msg_key, id)")


def downgrade() -> None:
    op.execute("DROP INDEX webhook_dead_key_id_idx")
