"""erase: operator erases and retention as tombstones; a retried send of a changed message is its ack

Revision ID: 0012_erase
Revises: 0010d
Create Date: 2026-12-02

- message_change.user_id becomes nullable: NULL is a change made by the operator, not by a user
  (`chatgql erase-user`, the retention policy); the tombstone's deleted_by is NULL too. Dropping a
  NOT NULL is a catalog change: nothing is scanned or rewritten. message_change.reason (nullable,
  no default, no check: instant) says which: 'ERASE' or 'RETENTION'.
- conversation.retained_seq (constant default: instant): the seq up to which the retention policy
  has erased, so each pass starts after it and never walks the tombstones again.
- chat_send (0002, with 0005's generic plans) and chat_send_batch (0009) answer a retry of a message
  that was since edited or deleted with its acknowledgement (duplicate, the same seq) instead of
  CONFLICT: a stored message is idempotent by clientMsgId whatever happened to it after. The retry
  of an edited message carries the original body, the first of its edit history (message_edit);
  a deleted message's body is erased, so the same sender and clientMsgId are enough. A different
  body for an edited message, or another sender, is CONFLICT as before.
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0012_erase"
down_revision = "0012_search"
branch_labels = None
depends_on = None


def _migration(name: str):
    spec = importlib.util.spec_from_file_location(f"chatgql_migration_{name}", Path(__file__).with_name(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replaced(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new, 1)


# The stored message's original body, when it was edited since (the first entry of its history).
_ORIGINAL = """(SELECT e.body FROM message_edit e
                WHERE e.conversation_id = p_conversation_id AND e.seq = {seq}
                ORDER BY e.change_seq LIMIT 1)"""

_SEND_0002 = _replaced(
    _migration("0002_send_function.py").CHAT_SEND.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1),
    "LANGUAGE plpgsql AS $$",
    "LANGUAGE plpgsql\nSET plan_cache_mode = force_generic_plan  -- 0005\nAS $$",
)
CHAT_SEND = _replaced(
    _SEND_0002,
    "CASE WHEN v_old.sender_id = p_sender_id AND v_old.body = p_body",
    "CASE WHEN v_old.sender_id = p_sender_id AND (v_old.body = p_body OR v_old.deleted_at IS NOT NULL\n"
    "                 OR (v_old.edited_at IS NOT NULL AND p_body = " + _ORIGINAL.format(seq="v_old.seq") + "))",
)

_BATCH_0009 = _migration("0009_send_batch_lock_order.py").CHAT_SEND_BATCH
CHAT_SEND_BATCH = _BATCH_0009
for _old, _new in (
    (
        "SELECT m.client_msg_id, m.seq, m.sender_id, m.body, m.created_at FROM message m",
        "SELECT m.client_msg_id, m.seq, m.sender_id, m.body, m.created_at, m.deleted_at IS NOT NULL AS deleted,\n"
        "               CASE WHEN m.edited_at IS NOT NULL THEN "
        + _ORIGINAL.format(seq="m.seq")
        + " END AS first_body\n"
        "          FROM message m",
    ),
    (
        "f.body, v_at AS created_at FROM fresh f",
        "f.body, v_at AS created_at, false AS deleted, NULL::text AS first_body FROM fresh f",
    ),
    ("o.body, o.created_at FROM old o", "o.body, o.created_at, o.deleted, o.first_body FROM old o"),
    (
        "WHEN o.sender_id = k.sender_id AND o.body = k.body THEN 'duplicate'",
        "WHEN o.sender_id = k.sender_id AND (o.body = k.body OR o.deleted OR o.first_body = k.body) THEN 'duplicate'",
    ),
):
    CHAT_SEND_BATCH = _replaced(CHAT_SEND_BATCH, _old, _new)


def upgrade() -> None:
    op.execute("ALTER TABLE message_change ALTER COLUMN user_id DROP NOT NULL")
    op.execute("ALTER TABLE message_change ADD COLUMN reason text")
    op.execute("ALTER TABLE conversation ADD COLUMN retained_seq bigint NOT NULL DEFAULT 0")
    op.execute(CHAT_SEND)
    op.execute(CHAT_SEND_BATCH)


def downgrade() -> None:
    op.execute(_BATCH_0009)
    op.execute(_SEND_0002)
    op.execute("ALTER TABLE conversation DROP COLUMN retained_seq")
    op.execute("ALTER TABLE message_change DROP COLUMN reason")
    op.execute("UPDATE message_change SET user_id = 0 WHERE user_id IS NULL")
    op.execute("ALTER TABLE message_change ALTER COLUMN user_id SET NOT NULL")
