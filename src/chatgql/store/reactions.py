"""Reactions (migration 0010b): who reacted with what, and a count per (message, emoji) kept on write.

The writes run inside the caller's transaction, under the conversation's lock
(conversations.lock_for_member_txn), as every change to a message does.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..db import Connection, Row


async def add_txn(conn: Connection, conversation_id: int, seq: int, user_id: str, emoji: str, max_emojis: int) -> str:
    """Add user_id's emoji to the message: 'added', 'present' (already there: nothing written) or
    'too_many' (a new emoji on a message that has max_emojis distinct ones: nothing written)."""
    if await conn.fetchval(
        "SELECT 1 FROM message_reaction WHERE conversation_id = $1 AND seq = $2 AND user_id = $3 AND emoji = $4",
        conversation_id,
        seq,
        user_id,
        emoji,
    ):
        return "present"
    counted = await conn.fetchval(
        "UPDATE message_reaction_count SET count = count + 1 WHERE conversation_id = $1 AND seq = $2 AND emoji = $3"
        " RETURNING count",
        conversation_id,
        seq,
        emoji,
    )
    if counted is None:
        emojis = await conn.fetchval(
            "SELECT count(*) FROM message_reaction_count WHERE conversation_id = $1 AND seq = $2",
            conversation_id,
            seq,
        )
        if emojis >= max_emojis:
            return "too_many"
        await conn.execute(
            "INSERT INTO message_reaction_count (conversation_id, seq, emoji, count) VALUES ($1, $2, $3, 1)",
            conversation_id,
            seq,
            emoji,
        )
    await conn.execute(
        "INSERT INTO message_reaction (conversation_id, seq, user_id, emoji) VALUES ($1, $2, $3, $4)",
        conversation_id,
        seq,
        user_id,
        emoji,
    )
    return "added"


async def remove_txn(conn: Connection, conversation_id: int, seq: int, user_id: str, emoji: str) -> bool:
    """Remove user_id's emoji from the message; False when it was not there (nothing written)."""
    return await conn.fetchval(
        """
        WITH gone AS (
            DELETE FROM message_reaction
             WHERE conversation_id = $1 AND seq = $2 AND user_id = $3 AND emoji = $4
            RETURNING 1
        ), fewer AS (
            UPDATE message_reaction_count SET count = count - 1
             WHERE conversation_id = $1 AND seq = $2 AND emoji = $4 AND count > 1 AND EXISTS (SELECT 1 FROM gone)
        ), last AS (
            DELETE FROM message_reaction_count
             WHERE conversation_id = $1 AND seq = $2 AND emoji = $4 AND count = 1 AND EXISTS (SELECT 1 FROM gone)
        )
        SELECT EXISTS (SELECT 1 FROM gone)
        """,
        conversation_id,
        seq,
        user_id,
        emoji,
    )


async def erase_txn(conn: Connection, conversation_id: int, seqs: Sequence[int]) -> None:
    """Every reaction to the messages (a delete erases them)."""
    for table in ("message_reaction", "message_reaction_count"):
        await conn.execute(
            f"DELETE FROM {table} WHERE conversation_id = $1 AND seq = ANY($2::bigint[])", conversation_id, list(seqs)
        )


async def summaries(conn: Connection, keys: Sequence[tuple[int, int]], viewer_id: str) -> list[Row]:
    """Per message (conversation_id, seq): rows (conversation_id, seq, emoji, count, mine) in the order each
    emoji first appeared; `mine`: the viewer reacted with it. Reads the stored counts, never the reactions."""
    return await conn.fetch(
        """
        SELECT r.conversation_id, r.seq, r.emoji, r.count,
               EXISTS (SELECT 1 FROM message_reaction v
                        WHERE v.conversation_id = r.conversation_id AND v.seq = r.seq
                          AND v.user_id = $3 AND v.emoji = r.emoji) AS mine
          FROM unnest($1::bigint[], $2::bigint[]) AS k(cid, seq)
          JOIN message_reaction_count r ON r.conversation_id = k.cid AND r.seq = k.seq
         ORDER BY r.conversation_id, r.seq, r.first_at, r.emoji
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        viewer_id,
    )


async def reacted_by_pages(conn: Connection, keys: Sequence[tuple[int, int, str, str, int]]) -> list[Row]:
    """(conversation_id, seq, emoji, after_user_id, limit) -> rows (i, user_id): who reacted with the emoji,
    user ids above after, ascending, at most limit; one statement."""
    return await conn.fetch(
        """
        SELECT k.i, r.user_id
          FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::int[])
               WITH ORDINALITY AS k(cid, seq, emoji, after, lim, i)
          CROSS JOIN LATERAL (
                SELECT user_id FROM message_reaction
                 WHERE conversation_id = k.cid AND seq = k.seq AND emoji = k.emoji AND user_id > k.after
                 ORDER BY user_id LIMIT k.lim) r
         ORDER BY k.i, r.user_id
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
        [k[3] for k in keys],
        [k[4] for k in keys],
    )
