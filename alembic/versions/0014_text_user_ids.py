"""text user ids: a user id is the identity provider's subject, an opaque string of 1..255 characters

Revision ID: 0014_text_user_ids
Revises: 0013_event_keys
Create Date: 2026-12-02

Every column that holds a user id becomes `text COLLATE "C"`, its old decimal value as text
(`7` becomes `'7'`): an existing user keeps their id, their tokens (`sub` was always a string)
and every node id and cursor they were given (graphql/ids.py encodes a user id as its text).
COLLATE "C" compares bytes: as fast as a comparison gets for text, and an order that never
depends on the server's locale. Orders by user id become text order ("10" < "9"): members
pages and seenBy are ordered so, and so is direct_pair's pair of users.

- conversation_member.user_id, message.sender_id and deleted_by (the partitioned table: the
  ALTER recurses to its 16 partitions), message_change.user_id, message_reaction.user_id,
  message_mention.user_id, user_setting.user_id, conversation.created_by: converted in place
  (ALTER COLUMN TYPE rewrites each table and rebuilds its indexes under its exclusive lock:
  docs/operating/upgrading.md says how long on a large message table).
- direct_pair(user_low, user_high) keeps the rule user_low < user_high, now in text order:
  the rows whose two users compare the other way as text are swapped (9 and 10: '10' < '9').
  Each pair of users is one row before and after (a pair is unordered), so the swap cannot
  collide with another row.
- chat_send and chat_send_batch take and answer the sender as text. The bigint ones (0013's
  and 0012_erase's, kept by 0013 for rolling upgrades) are dropped: a process of before this
  migration passes Python ints where the columns are now text, which asyncpg refuses for every
  statement, not only the sends, so keeping them would not keep such a process working.
  Stop the old processes, migrate, start the new ones (docs/operating/upgrading.md).
- Events already in the outbox and webhook_queue keep their numeric ids in their JSON; every
  consumer reads a number there as its decimal text (events/types.py), so nothing is rewritten.

The downgrade converts back with ::bigint: it fails, changing nothing, while any user id is not
a decimal number.
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0014_text_user_ids"
down_revision = "0013_event_keys"
branch_labels = None
depends_on = None


def _migration(name: str):
    spec = importlib.util.spec_from_file_location(f"chatgql_migration_{name}", Path(__file__).with_name(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replaced(text: str, *pairs: tuple[str, str, int]) -> str:
    """text with each old replaced by new, where old occurs exactly count times."""
    for old, new, count in pairs:
        assert text.count(old) == count, old
        text = text.replace(old, new)
    return text


_0013 = _migration("0013_event_keys.py")

# (table, column) of every user id. message_change.user_id, message.deleted_by and
# conversation.created_by are nullable (an operator's change, not deleted, no creator).
COLUMNS = (
    ("conversation", "created_by"),
    ("conversation_member", "user_id"),
    ("message", "sender_id"),
    ("message", "deleted_by"),
    ("message_change", "user_id"),
    ("message_reaction", "user_id"),
    ("message_mention", "user_id"),
    ("user_setting", "user_id"),
    ("direct_pair", "user_low"),
    ("direct_pair", "user_high"),
)

CHAT_SEND = _replaced(
    _0013.CHAT_SEND,
    ("    p_sender_id bigint,\n", "    p_sender_id text,\n", 1),
    ("seq bigint, sender_id bigint, body text", "seq bigint, sender_id text, body text", 1),
    ("NULL::bigint, NULL::bigint, NULL::text", "NULL::bigint, NULL::text, NULL::text", 2),
)

CHAT_SEND_BATCH = _replaced(
    _0013.CHAT_SEND_BATCH,
    ("    p_sender_ids bigint[],\n", "    p_sender_ids text[],\n", 1),
    ("seq bigint, sender_id bigint, body text", "seq bigint, sender_id text, body text", 1),
    ("'not_found', NULL::bigint, NULL::bigint, NULL::text", "'not_found', NULL::bigint, NULL::text, NULL::text", 1),
)

_BIGINT_FUNCTIONS = (
    "chat_send(bigint, bigint, uuid, text, jsonb, jsonb)",
    "chat_send_batch(bigint, bigint[], uuid[], text[], jsonb[], jsonb[])",
    "chat_send(bigint, bigint, uuid, text, jsonb, jsonb, text[], text[])",
    "chat_send_batch(bigint, bigint[], uuid[], text[], jsonb[], jsonb[], text[], text[])",
)
_TEXT_FUNCTIONS = (
    "chat_send(bigint, text, uuid, text, jsonb, jsonb, text[], text[])",
    "chat_send_batch(bigint, text[], uuid[], text[], jsonb[], jsonb[], text[], text[])",
)

# Swap the pairs whose order differs between numbers and texts (both directions use it: the
# comparison is made on the column type of the moment).
_REKEY_PAIRS = "UPDATE direct_pair SET user_low = user_high, user_high = user_low WHERE user_low > user_high"


def _alter(kind: str, using: str) -> None:
    tables: dict[str, list[str]] = {}
    for table, column in COLUMNS:
        tables.setdefault(table, []).append(f"ALTER COLUMN {column} TYPE {kind} USING {column}::{using}")
    for table, changes in tables.items():  # one rewrite per table
        op.execute(f"ALTER TABLE {table} " + ", ".join(changes))


def upgrade() -> None:
    for function in _BIGINT_FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {function}")
    op.execute("ALTER TABLE direct_pair DROP CONSTRAINT direct_pair_order_check")
    _alter('text COLLATE "C"', "text")
    op.execute(_REKEY_PAIRS)
    op.execute("ALTER TABLE direct_pair ADD CONSTRAINT direct_pair_order_check CHECK (user_low < user_high)")
    op.execute(CHAT_SEND)
    op.execute(CHAT_SEND_BATCH)
    # The statistics of the rewritten columns, for the plans of the first statements after.
    for table, _ in COLUMNS:
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    for function in _TEXT_FUNCTIONS:
        op.execute(f"DROP FUNCTION {function}")
    op.execute("ALTER TABLE direct_pair DROP CONSTRAINT direct_pair_order_check")
    _alter("bigint", "bigint")
    op.execute(_REKEY_PAIRS)
    op.execute("ALTER TABLE direct_pair ADD CONSTRAINT direct_pair_order_check CHECK (user_low < user_high)")
    op.execute(_0013.CHAT_SEND)
    op.execute(_0013.CHAT_SEND_BATCH)
    for statement in (_0013._0012.CHAT_SEND, _0013._0012.CHAT_SEND_BATCH):
        op.execute(statement.replace("CREATE OR REPLACE FUNCTION", "CREATE FUNCTION", 1))
