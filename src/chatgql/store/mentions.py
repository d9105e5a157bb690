"""Mentions (0011a): message_mention rows, keyed (conversation_id, user_id, seq).

A member's unread mentions are the rows of their key range above their own read position:
O(unread mentions) index entries, never a scan of the history. Edits and deletes of a message
keep them exact with replace_txn and delete_txn, in the edit's or delete's transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..db import Connection, Row
from .conversations import MUTED, OWN_READ


async def insert_txn(conn: Connection, conversation_id: int, seq: int, user_ids: Sequence[str]) -> None:
    if user_ids:
        await conn.execute(
            """
            INSERT INTO message_mention (conversation_id, user_id, seq)
            SELECT $1, u, $2 FROM unnest($3::text[]) AS u
            ON CONFLICT DO NOTHING
            """,
            conversation_id,
            seq,
            list(user_ids),
        )


async def insert_everyone_txn(conn: Connection, conversation_id: int, seq: int, sender_id: str) -> None:
    """An everyone-mention: a row for each member but the sender (one index entry each, as a direct mention)."""
    await conn.execute(
        """
        INSERT INTO message_mention (conversation_id, user_id, seq)
        SELECT $1, user_id, $2 FROM conversation_member WHERE conversation_id = $1 AND user_id <> $3
        ON CONFLICT DO NOTHING
        """,
        conversation_id,
        seq,
        sender_id,
    )


async def replace_txn(conn: Connection, conversation_id: int, seq: int, user_ids: Sequence[str]) -> None:
    """An edited message's mentions are now user_ids (those gone stop counting at once)."""
    await delete_txn(conn, conversation_id, [seq])
    await insert_txn(conn, conversation_id, seq, user_ids)


async def delete_txn(conn: Connection, conversation_id: int, seqs: Sequence[int]) -> None:
    """Deleted messages mention nobody any more."""
    await conn.execute(
        "DELETE FROM message_mention WHERE conversation_id = $1 AND seq = ANY($2::bigint[])",
        conversation_id,
        list(seqs),
    )


async def of_messages(conn: Connection, keys: Sequence[tuple[int, int]]) -> list[Row]:
    """(conversation_id, seq, user_id) of the messages' mentions, user ids ascending."""
    return await conn.fetch(
        """
        SELECT mm.conversation_id, mm.seq, mm.user_id
          FROM unnest($1::bigint[], $2::bigint[]) AS k(cid, seq)
          JOIN message_mention mm ON mm.conversation_id = k.cid AND mm.seq = k.seq
         ORDER BY mm.conversation_id, mm.seq, mm.user_id
        """,
        [cid for cid, _ in keys],
        [seq for _, seq in keys],
    )


async def unread_counts(conn: Connection, user_id: str, conversation_ids: Sequence[int]) -> list[Row]:
    """(conversation_id, unread_mentions) of user_id in the conversations among ids they are in."""
    return await conn.fetch(
        f"""
        SELECT m.conversation_id,
               (SELECT count(*) FROM message_mention mm
                 WHERE mm.conversation_id = m.conversation_id AND mm.user_id = m.user_id
                   AND mm.seq > {OWN_READ}) AS unread_mentions
          FROM conversation_member m
         WHERE m.user_id = $1 AND m.conversation_id = ANY($2::bigint[])
        """,
        user_id,
        list(conversation_ids),
    )


async def total_unread(conn: Connection, user_id: str, *, count_muted: bool) -> int:
    """user_id's unread mentions over all their conversations (muted ones too when count_muted):
    one index range per conversation."""
    muted = "" if count_muted else f" AND NOT {MUTED}"
    return await conn.fetchval(
        f"""
        SELECT coalesce(sum((SELECT count(*) FROM message_mention mm
                              WHERE mm.conversation_id = m.conversation_id AND mm.user_id = m.user_id
                                AND mm.seq > {OWN_READ})), 0)
          FROM conversation_member m
         WHERE m.user_id = $1{muted}
        """,
        user_id,
    )
