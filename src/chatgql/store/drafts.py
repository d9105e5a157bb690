"""Drafts (migration 0030_drafts): a member's unsent text, per conversation (root_seq 0) and per
thread (root_seq: the replyTo it will be sent with).

A draft is shown while its member is a member, its body is not empty, and no message of theirs
came after it: a message they sent with seq > base_seq and the same replyTo (none for root_seq 0)
clears it. That rule is read here, so the send path writes nothing for drafts; the row stays until
the member's next save of that key overwrites it. Time is the caller's (the API's clock).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..db import Connection, Row

DRAFT_COLUMNS = "d.conversation_id, d.root_seq, d.body, d.base_seq, d.version, d.updated_at"

# Not cleared by a later message of the member's sent to the same place.
_NOT_SENT = """NOT EXISTS (
    SELECT 1 FROM message s
     WHERE s.conversation_id = d.conversation_id AND s.seq > d.base_seq
       AND s.sender_id = d.user_id AND coalesce(s.reply_to_seq, 0) = d.root_seq)"""


async def save_txn(
    conn: Connection, conversation_id: int, user_id: str, root_seq: int, body: str, now: datetime
) -> tuple[bool, Row | None]:
    """Write the member's draft (body '' clears it; clearing a draft never saved writes nothing):
    (whether user_id is a member, the row after the write as DRAFT_COLUMNS; None when nothing was
    written: not a member, a root_seq that is no message the member may read, or nothing to clear).
    base_seq is the conversation's last_seq now; version the row's previous one plus one."""
    row = await conn.fetchrow(
        """
        WITH who AS (
            SELECT c.last_seq, m.visible_from_seq FROM conversation c
              JOIN conversation_member m ON m.conversation_id = c.id AND m.user_id = $2
             WHERE c.id = $1
        ), saved AS (
            INSERT INTO message_draft AS d (conversation_id, user_id, root_seq, body, base_seq, version, updated_at)
            SELECT $1, $2, $3::bigint, $4::text, who.last_seq, 1, $5 FROM who
             WHERE ($3::bigint = 0 OR $3::bigint BETWEEN who.visible_from_seq AND who.last_seq)
               AND ($4::text <> '' OR EXISTS (SELECT 1 FROM message_draft x
                                         WHERE x.conversation_id = $1 AND x.user_id = $2 AND x.root_seq = $3::bigint))
            ON CONFLICT (conversation_id, user_id, root_seq) DO UPDATE
               SET body = EXCLUDED.body, base_seq = EXCLUDED.base_seq, version = d.version + 1,
                   updated_at = EXCLUDED.updated_at
            RETURNING d.conversation_id, d.root_seq, d.body, d.base_seq, d.version, d.updated_at
        )
        SELECT EXISTS (SELECT 1 FROM who) AS member, saved.* FROM (SELECT 1) AS one LEFT JOIN saved ON true
        """,
        conversation_id,
        user_id,
        root_seq,
        body,
        now,
    )
    assert row is not None
    return row["member"], row if row["version"] is not None else None


async def drafts_of(conn: Connection, user_id: str, conversation_ids: Sequence[int] | None, limit: int) -> list[Row]:
    """The user's drafts shown now (see the module docstring), of these conversations (None: of all of
    theirs), the newest save first, at most limit: rows of DRAFT_COLUMNS."""
    where = "" if conversation_ids is None else "AND d.conversation_id = ANY($3::bigint[])"
    args: tuple = (user_id, limit) if conversation_ids is None else (user_id, limit, list(conversation_ids))
    return await conn.fetch(
        f"""
        SELECT {DRAFT_COLUMNS}
          FROM message_draft d
          JOIN conversation_member m ON m.conversation_id = d.conversation_id AND m.user_id = d.user_id
         WHERE d.user_id = $1 {where} AND d.body <> '' AND {_NOT_SENT}
         ORDER BY d.updated_at DESC, d.conversation_id, d.root_seq
         LIMIT $2
        """,
        *args,
    )


async def erase_user_txn(conn: Connection, user_id: str) -> int:
    """Delete every draft of user_id (the operator's erase): how many."""
    gone = await conn.fetchval(
        "WITH gone AS (DELETE FROM message_draft WHERE user_id = $1 RETURNING 1) SELECT count(*) FROM gone", user_id
    )
    return int(gone)
