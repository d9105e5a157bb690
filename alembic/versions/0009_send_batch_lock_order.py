"""chat_send_batch(): lock the senders' member rows in user order first

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

A send batch moves each sender's watermark (the UPDATE of conversation_member
in 0006's function), and the markRead flush (store/reads.advance_watermarks)
moves many watermarks in one statement, locking the rows that will move in
(conversation_id, user_id) order. The batch's UPDATE locked its rows in
whatever order its plan visited them, so a batch and a flush over the same
members could each hold a row the other wanted: PostgreSQL ended one of them
with `deadlock detected` (found by the overload soak: markRead answered
INTERNAL_SERVER_ERROR; tests/services/test_group_commit.py races the two).

The function is 0006's, with one statement added after the conversation's
lock: the senders' member rows, locked in user_id order before anything moves.
Every writer of member rows now takes them in one order (a batch holds rows of
one conversation only), so no cycle can form. The rows are the ones the
watermark UPDATE would lock anyway, plus those of senders whose watermark
does not move (at most CHATGQL_SEND_BATCH_MAX rows).
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_SPEC = importlib.util.spec_from_file_location("chatgql_migration_0006", Path(__file__).with_name("0006_send_batch.py"))
assert _SPEC is not None and _SPEC.loader is not None
_V0006 = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_V0006)

AFTER = "    v_at := greatest(clock_timestamp(), v_last_at);  -- never before the previous message\n"
LOCK_SENDERS = """
    -- The senders' member rows, in user_id order: the order markRead's flush locks them in.
    PERFORM 1 FROM conversation_member cm
      WHERE cm.conversation_id = p_conversation_id AND cm.user_id = ANY (p_sender_ids)
      ORDER BY cm.user_id
        FOR NO KEY UPDATE;
"""
assert _V0006.CHAT_SEND_BATCH.count(AFTER) == 1
PREVIOUS = _V0006.CHAT_SEND_BATCH.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
CHAT_SEND_BATCH = PREVIOUS.replace(AFTER, AFTER + LOCK_SENDERS, 1)


def upgrade() -> None:
    op.execute(CHAT_SEND_BATCH)


def downgrade() -> None:
    op.execute(PREVIOUS)
