"""event keys: the send functions take the event keys they fill in from the event definitions

Revision ID: 0013_event_keys
Revises: 0012_webhooks
Create Date: 2026-12-02

chat_send (0012_erase) and chat_send_batch (0012_erase) completed message.new and read.updated
with keys written in their bodies ('seq', 'createdAt', 'lastReadSeq'), and a test parsed pg_proc to
keep those in step with events/types.py. Now each takes two more arguments: the keys of message.new's
store fields (its seq, then its time) and of read.updated's (the watermark), which the caller takes
from the event definitions (Event.store_keys()); the bodies name no event key. Same statements
otherwise, same one round trip: the keys are two more parameters of the call.

A new argument list is a new function beside the old one. The old six-argument functions stay, so
that the processes of before this migration keep sending during a rolling upgrade (the first new
process migrates on start); chatgql itself calls only the new ones. A later migration drops the
old ones once no process from before this one can run (docs/operating/upgrading.md).
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0013_event_keys"
down_revision = "0012_webhooks"
branch_labels = None
depends_on = None


def _migration(name: str):
    spec = importlib.util.spec_from_file_location(f"chatgql_migration_{name}", Path(__file__).with_name(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replaced(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new, 1)
    return text


_0012 = _migration("0012_erase.py")

CHAT_SEND = _replaced(
    _0012.CHAT_SEND,
    ("CREATE OR REPLACE FUNCTION", "CREATE FUNCTION"),
    (
        "    p_read_event jsonb      -- read.updated without lastReadSeq\n",
        "    p_read_event jsonb,     -- read.updated without its watermark\n"
        "    p_message_keys text[],  -- message.new's keys for the seq and the time (events/types.py)\n"
        "    p_read_keys text[]      -- read.updated's key for the watermark\n",
    ),
    (
        "jsonb_build_object('seq', v_seq, 'createdAt', v_at)",
        "jsonb_build_object(p_message_keys[1], v_seq, p_message_keys[2], v_at)",
    ),
    ("jsonb_build_object('lastReadSeq', v_seq)", "jsonb_build_object(p_read_keys[1], v_seq)"),
)

CHAT_SEND_BATCH = _replaced(
    _0012.CHAT_SEND_BATCH,
    ("CREATE OR REPLACE FUNCTION", "CREATE FUNCTION"),
    (
        "    p_read_events jsonb[]      -- read.updated without lastReadSeq, per item\n",
        "    p_read_events jsonb[],     -- read.updated without its watermark, per item\n"
        "    p_message_keys text[],     -- message.new's keys for the seq and the time (events/types.py)\n"
        "    p_read_keys text[]         -- read.updated's key for the watermark\n",
    ),
    (
        "jsonb_build_object('seq', f.seq, 'createdAt', v_at)",
        "jsonb_build_object(p_message_keys[1], f.seq, p_message_keys[2], v_at)",
    ),
    ("jsonb_build_object('lastReadSeq', w.seq)", "jsonb_build_object(p_read_keys[1], w.seq)"),
)

_OLD_SEND = "chat_send(bigint, bigint, uuid, text, jsonb, jsonb)"
_OLD_BATCH = "chat_send_batch(bigint, bigint[], uuid[], text[], jsonb[], jsonb[])"
_NEW_SEND = "chat_send(bigint, bigint, uuid, text, jsonb, jsonb, text[], text[])"
_NEW_BATCH = "chat_send_batch(bigint, bigint[], uuid[], text[], jsonb[], jsonb[], text[], text[])"


# the functions of before (0012_erase), kept for the processes of before during an upgrade
OLD_FUNCTIONS = (_OLD_SEND, _OLD_BATCH)


def upgrade() -> None:
    op.execute(CHAT_SEND)
    op.execute(CHAT_SEND_BATCH)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {_NEW_BATCH}")
    op.execute(f"DROP FUNCTION {_NEW_SEND}")
