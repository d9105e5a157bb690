"""message becomes PARTITION BY HASH (conversation_id), 16 partitions

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

Why: the message table is the one that grows without bound (DESIGN.md: 120 GB
a day at full scale). Hash partitions by conversation_id keep each index a
sixteenth of the size (vacuum, reindex and the buffer cache work per
partition), and every statement on the hot paths carries conversation_id, so
each one touches one partition (tests/store/test_partitioning.py checks the plans
and the per-partition counters). The keys stay what they were and both start
with conversation_id, the partition key: PRIMARY KEY (conversation_id, seq),
UNIQUE (conversation_id, client_msg_id) -- which is also what Citus needs to
distribute the table by conversation_id.

How, in the migration's one transaction (Alembic runs the whole upgrade in
one): lock the old table against writes, create the partitioned table and
its 16 partitions without indexes, copy the rows, drop the old table, rename
the new one into its place (and its NOT NULL constraints), then build the primary key, the unique key (one
index build per partition, faster than inserting into live indexes) and the
foreign key to conversation under their old names. chat_send (0002) gets
`SET plan_cache_mode = force_generic_plan` (see upgrade() for the measured
why); altering it also makes sessions that compiled it against the old table
(a message%ROWTYPE variable) compile it again. The downgrade does the same in
reverse. Nothing else depends on the table (no views, no grants).
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

PARTITIONS = 16

_COLUMNS = """
    conversation_id bigint NOT NULL,
    seq             bigint NOT NULL CONSTRAINT message_seq_check CHECK (seq > 0),
    sender_id       bigint NOT NULL,
    client_msg_id   uuid NOT NULL,
    body            text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
"""

_KEYS = [
    "ALTER TABLE message ADD CONSTRAINT message_pkey PRIMARY KEY (conversation_id, seq)",
    "ALTER TABLE message ADD CONSTRAINT message_client_msg_id_key UNIQUE (conversation_id, client_msg_id)",
    """
    ALTER TABLE message ADD CONSTRAINT message_conversation_id_fkey
        FOREIGN KEY (conversation_id) REFERENCES conversation (id)
    """,
]

# PostgreSQL 18 names NOT NULL constraints after the table they were created on
# (message_partitioned_body_not_null): give them the names a fresh database has.
# Before 18 they are not constraints of their own and this finds none.
_NOT_NULL_NAMES = """
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT n.conname, a.attname FROM pg_constraint n
               JOIN pg_attribute a ON a.attrelid = n.conrelid AND a.attnum = n.conkey[1]
              WHERE n.conrelid = 'message'::regclass AND n.contype = 'n'
    LOOP
        EXECUTE format('ALTER TABLE message RENAME CONSTRAINT %I TO %I', c.conname, 'message_' || c.attname || '_not_null');
    END LOOP;
END $$
"""

_CHAT_SEND = "chat_send(bigint, bigint, uuid, text, jsonb, jsonb)"


def upgrade() -> None:
    op.execute("LOCK TABLE message IN ACCESS EXCLUSIVE MODE")
    op.execute(f"CREATE TABLE message_partitioned ({_COLUMNS}) PARTITION BY HASH (conversation_id)")
    for remainder in range(PARTITIONS):
        op.execute(
            f"CREATE TABLE message_p{remainder:02d} PARTITION OF message_partitioned"
            f" FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {remainder})"
        )
    op.execute("INSERT INTO message_partitioned SELECT * FROM message")
    _replace("message_partitioned")
    # Left to choose, the plan cache re-plans chat_send's statements on message at every call:
    # a generic plan's estimate covers all 16 partitions (the executor prunes them, the estimate
    # does not know), so the custom plan always looks cheaper. pgbench of chat_send on the
    # partitioned table: 75% of the unpartitioned table's rate re-planning, the same rate with
    # generic plans (bench/results/partition.md). Changing the function also makes every session
    # compile it again: its message%ROWTYPE variable named the table that was dropped.
    op.execute(f"ALTER FUNCTION {_CHAT_SEND} SET plan_cache_mode = force_generic_plan")


def downgrade() -> None:
    op.execute("LOCK TABLE message IN ACCESS EXCLUSIVE MODE")
    op.execute(f"CREATE TABLE message_unpartitioned ({_COLUMNS})")
    op.execute("INSERT INTO message_unpartitioned SELECT * FROM message")
    _replace("message_unpartitioned")  # the partitions go with the partitioned table
    op.execute(f"ALTER FUNCTION {_CHAT_SEND} RESET plan_cache_mode")  # and every session compiles it again


def _replace(new_table: str) -> None:
    """Drop message, give new_table its name, constraint names and keys."""
    op.execute("DROP TABLE message")
    op.execute(f"ALTER TABLE {new_table} RENAME TO message")
    op.execute(_NOT_NULL_NAMES)
    for statement in _KEYS:
        op.execute(statement)
    op.execute("ANALYZE message")
