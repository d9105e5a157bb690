"""outbox.slot: the fixed hash bucket (0-63) of an event's key, for sharded relays

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

The outbox is drained by CHATGQL_RELAY_SHARDS relay shards (events/relay.py):
shard s of R relays the slots with slot % R = s. A row's slot is a stored
generated column computed from msg_key (the conversation id as text, for
every writer: chat_send, the markRead statement, membership events), so
every writer gets it without naming it, and one conversation's events are
always in one slot. The hash is PostgreSQL's own (hashtextextended, seed 0,
immutable, the one hash partitioning relies on), masked to 64 slots: fixed,
whatever R is, so changing R never moves a conversation to another slot.
Each slot has its own advisory lock (key RELAY_LOCK, slot) that its shard's
leader holds, so a slot is drained by one relay at a time even while relays
with different R run side by side.

The (slot, id) index gives each slot's oldest rows in id order. Adding a
stored column rewrites the table under an exclusive lock: the outbox holds
only what the relay has not sent yet, so this is short.
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE outbox ADD COLUMN slot smallint NOT NULL
            GENERATED ALWAYS AS ((hashtextextended(msg_key, 0) & 63)::smallint) STORED
        """
    )
    op.execute("CREATE INDEX outbox_slot_id_idx ON outbox (slot, id)")


def downgrade() -> None:
    op.execute("DROP INDEX outbox_slot_id_idx")
    op.execute("ALTER TABLE outbox DROP COLUMN slot")
