"""wake the relay after commit, not from inside the write transaction

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

A transaction that issued NOTIFY takes a database-wide lock at commit and
holds it through its WAL flush, so every send queued behind every other one
at commit (pgbench of chat_send, 8 clients: 630-2,200 tps with the trigger,
2,550-2,600 without, on the same machine in the same minutes). The API now
sends a debounced pg_notify in a statement of its own after the write has
committed (chatgql.events.wakeup); the relay still LISTENs and still polls.
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP TRIGGER outbox_notify ON outbox")
    op.execute("DROP FUNCTION outbox_notify()")


def downgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('chatgql_outbox', '');
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
            FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify()
        """
    )
