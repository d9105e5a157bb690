"""webhooks: the queue of events for the app's webhook endpoint, and its dead letters

Revision ID: 0012_webhooks
Revises: 0010d
Create Date: 2026-12-02

webhook_queue gets a copy of each relayed outbox row of the kinds CHATGQL_WEBHOOK_EVENTS names,
written by the statement that deletes the relayed rows from the outbox (store/outbox.py), so an
event is queued exactly once, in the transaction that takes it out of the outbox. The row keeps
the outbox id: with the key (the conversation), (msg_key, id) is each conversation's order.
webhook_id is the idempotency key the endpoint sees on every attempt (webhook-id). body is the
request body, fixed at the first attempt, so a retry sends the same bytes.
webhook_dead holds what ran out of attempts, until an operator replays it (chatgql webhooks replay).
Two new tables: nothing rewritten.
"""

from alembic import op

revision = "0012_webhooks"
down_revision = "0012_erase"
branch_labels = None
depends_on = None

_COLUMNS = """
    id bigint PRIMARY KEY,
    msg_key text NOT NULL,
    webhook_id uuid NOT NULL DEFAULT gen_random_uuid(),
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    body text,
    last_error text
"""


def upgrade() -> None:
    op.execute(f"CREATE TABLE webhook_queue ({_COLUMNS})")
    op.execute("CREATE INDEX webhook_queue_key_id_idx ON webhook_queue (msg_key, id)")
    op.execute(f"CREATE TABLE webhook_dead ({_COLUMNS}, dead_at timestamptz NOT NULL DEFAULT now())")


def downgrade() -> None:
    op.execute("DROP TABLE webhook_dead")
    op.execute("DROP TABLE webhook_queue")
