"""Changes to stored messages (edits, deletes): the change seq and its log (migration 0010).

Every function here runs inside the caller's transaction, under the conversation's lock
(conversations.lock_for_member_txn): that lock is what makes the change seq gap-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..db import Connection, Row
from . import mentions, reactions
from .messages import MESSAGE_COLUMNS, visible_to


async def lock_message_txn(conn: Connection, conversation_id: int, seq: int) -> Row | None:
    """The message at (conversation_id, seq), locked for the change; None when there is none."""
    return await conn.fetchrow(
        f"SELECT {MESSAGE_COLUMNS} FROM message WHERE conversation_id = $1 AND seq = $2 FOR UPDATE",
        conversation_id,
        seq,
    )


async def record_change_txn(conn: Connection, conversation_id: int, seq: int, kind: str, user_id: str) -> int:
    """Take the conversation's next change seq and log what it changed; returns the change seq."""
    return (await record_changes_txn(conn, conversation_id, [seq], kind, user_id))[seq]


async def record_changes_txn(
    conn: Connection,
    conversation_id: int,
    seqs: Sequence[int],
    kind: str,
    user_id: str | None,
    reason: str | None = None,
) -> dict[int, int]:
    """The next len(seqs) change seqs, one per message in the order given, each logged; seq -> change seq.
    user_id None: the operator made the change, for `reason` (ERASE, RETENTION)."""
    rows = await conn.fetch(
        """
        WITH next AS (
            UPDATE conversation SET last_change_seq = last_change_seq + cardinality($2::bigint[]) WHERE id = $1
            RETURNING last_change_seq
        )
        INSERT INTO message_change (conversation_id, change_seq, seq, kind, user_id, reason)
        SELECT $1, next.last_change_seq - cardinality($2::bigint[]) + s.n, s.seq, $3, $4, $5
          FROM next, unnest($2::bigint[]) WITH ORDINALITY AS s(seq, n)
        RETURNING seq, change_seq
        """,
        conversation_id,
        list(seqs),
        kind,
        user_id,
        reason,
    )
    return {row["seq"]: row["change_seq"] for row in rows}


async def edit_txn(conn: Connection, conversation_id: int, seq: int, change_seq: int, body: str) -> Row:
    """Replace the body (the previous one, with when it was written, joins message_edit); returns the message.
    The edit has one moment: the previous body's replacedAt is the message's new editedAt (never before
    the previous body was written), so the next edit's history entry starts where this one ends."""
    return await conn.fetchrow(
        f"""
        WITH old AS (
            SELECT body AS old_body, coalesce(edited_at, created_at) AS written_at,
                   greatest(clock_timestamp(), coalesce(edited_at, created_at)) AS edit_at
              FROM message
             WHERE conversation_id = $1 AND seq = $2
        ), history AS (
            INSERT INTO message_edit (conversation_id, seq, change_seq, body, written_at, replaced_at)
            SELECT $1, $2, $3, old.old_body, old.written_at, old.edit_at FROM old
        )
        UPDATE message m SET body = $4, edited_at = old.edit_at
          FROM old
         WHERE m.conversation_id = $1 AND m.seq = $2
        RETURNING {MESSAGE_COLUMNS}
        """,
        conversation_id,
        seq,
        change_seq,
        body,
    )


async def tombstone_txn(
    conn: Connection, conversation_id: int, seqs: Sequence[int], deleted_by: str | None
) -> list[Row]:
    """Make the messages among seqs that are not deleted yet tombstones: body, edit history, attachments, reactions
    and mentions erased, deletedAt/deletedBy set (deleted_by None: the operator). For every member whose watermark
    is below some of them, that many more deleted messages unread (member rows locked in user order, the order
    every writer of member rows takes them in: migration 0009). A deleted reply stops counting in its parent's
    replyCount, and the parent's lastReplyAt is its newest reply left; a deleted thread reply is marked so in
    thread_reply (its thread's unread leaves it out). The one delete path: deleteMessage, the
    operator's erase and retention. Returns the new tombstones in seq order (none for a seq already deleted)."""
    tombstones = await conn.fetch(
        f"""
        UPDATE message SET body = '', deleted_at = clock_timestamp(), deleted_by = $3
         WHERE conversation_id = $1 AND seq = ANY($2::bigint[]) AND deleted_at IS NULL
        RETURNING {MESSAGE_COLUMNS}
        """,
        conversation_id,
        list(seqs),
        deleted_by,
    )
    if not tombstones:
        return []
    tombstones = sorted(tombstones, key=lambda row: row["seq"])
    gone = [row["seq"] for row in tombstones]
    await conn.execute(
        """
        WITH erased AS (
            DELETE FROM message_edit WHERE conversation_id = $1 AND seq = ANY($2::bigint[])
        ), unattached AS (
            DELETE FROM message_attachment WHERE conversation_id = $1 AND seq = ANY($2::bigint[])
        ), unthreaded AS (  -- a deleted reply keeps its reply seq, out of its thread's unread (store/threads.py)
            UPDATE thread_reply SET deleted = true WHERE conversation_id = $1 AND seq = ANY($2::bigint[])
        ), unread AS (  -- width_bucket: how many of the (ascending) seqs are <= the member's watermark
            SELECT user_id, last_read_seq FROM conversation_member
             WHERE conversation_id = $1 AND last_read_seq < $3
             ORDER BY user_id
               FOR NO KEY UPDATE
        )
        UPDATE conversation_member m
           SET unread_deleted = m.unread_deleted + cardinality($2::bigint[]) - width_bucket(u.last_read_seq, $2::bigint[])
          FROM unread u
         WHERE m.conversation_id = $1 AND m.user_id = u.user_id
        """,
        conversation_id,
        gone,
        gone[-1],
    )
    await reactions.erase_txn(conn, conversation_id, gone)
    await mentions.delete_txn(conn, conversation_id, gone)
    parents = [row["reply_to_seq"] for row in tombstones if row["reply_to_seq"] is not None]
    if parents:
        counted = await conn.fetch(
            f"""
            UPDATE message p
               SET reply_count = p.reply_count - r.n,
                   last_reply_at = (SELECT c.created_at FROM message c
                                     WHERE c.conversation_id = $1 AND c.reply_to_seq = p.seq AND c.deleted_at IS NULL
                                     ORDER BY c.seq DESC LIMIT 1)
              FROM (SELECT parent, count(*) AS n FROM unnest($2::bigint[]) AS parent GROUP BY parent) r
             WHERE p.conversation_id = $1 AND p.seq = r.parent
            RETURNING {MESSAGE_COLUMNS}
            """,
            conversation_id,
            parents,
        )
        recounted = {row["seq"]: row for row in counted}  # a parent erased with its replies: its count now
        tombstones = [recounted.get(row["seq"], row) for row in tombstones]
    return tombstones


async def edit_histories(conn: Connection, keys: Sequence[tuple[int, int]]) -> list[Row]:
    """The previous bodies of messages (conversation_id, seq), oldest first: rows
    (conversation_id, seq, change_seq, body, written_at, replaced_at)."""
    return await conn.fetch(
        """
        SELECT e.* FROM unnest($1::bigint[], $2::bigint[]) AS k(cid, seq)
        CROSS JOIN LATERAL (
            SELECT conversation_id, seq, change_seq, body, written_at, replaced_at FROM message_edit
             WHERE conversation_id = k.cid AND seq = k.seq
             ORDER BY change_seq
        ) e
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
    )


async def after_many(conn: Connection, cursors: Sequence[tuple[int, int, int]], viewer_id: str) -> list[Row]:
    """For each (conversation_id, after_change_seq, limit): the changes with change_seq > after, ascending,
    at most limit, each with the message as it is now: rows (change_seq, kind, changed_by, reason, message columns...).
    Only changes to messages viewer_id may read (messages.visible_to: none from before a late join)."""
    return await conn.fetch(
        f"""
        SELECT ch.change_seq, ch.kind, ch.user_id AS changed_by, ch.reason, m.*
          FROM unnest($1::bigint[], $2::bigint[], $3::int[]) AS k(cid, after_change, lim)
         CROSS JOIN LATERAL (
            SELECT change_seq, seq, kind, user_id, reason FROM message_change
             WHERE conversation_id = k.cid AND change_seq > k.after_change AND {visible_to("$4")}
             ORDER BY change_seq
             LIMIT k.lim
         ) ch
         CROSS JOIN LATERAL (
            SELECT {MESSAGE_COLUMNS} FROM message
             WHERE conversation_id = k.cid AND seq = ch.seq
             LIMIT 1
         ) m
         ORDER BY m.conversation_id, ch.change_seq
        """,
        [c[0] for c in cursors],
        [c[1] for c in cursors],
        [c[2] for c in cursors],
        viewer_id,
    )


# The operator's erases (services/erase.py): what to tombstone, found in bounded reads.


async def conversations_with_messages_of(conn: Connection, sender_id: str) -> list[int]:
    """The conversations where sender_id has messages not deleted yet. No index serves a sender across
    conversations: one scan of the message table, once per erase (then index ranges per conversation)."""
    rows = await conn.fetch(
        "SELECT DISTINCT conversation_id FROM message WHERE sender_id = $1 AND deleted_at IS NULL ORDER BY 1",
        sender_id,
    )
    return [row["conversation_id"] for row in rows]


async def lock_conversation_txn(conn: Connection, conversation_id: int) -> int | None:
    """Lock the conversation (as a send or a change does); returns its retained_seq, None when there is none."""
    return await conn.fetchval("SELECT retained_seq FROM conversation WHERE id = $1 FOR NO KEY UPDATE", conversation_id)


async def seqs_of_sender_txn(
    conn: Connection, conversation_id: int, sender_id: str, after: int, limit: int
) -> list[int]:
    """Up to limit seqs after `after` of sender_id's messages not deleted yet, ascending (the primary key's range)."""
    rows = await conn.fetch(
        """
        SELECT seq FROM message
         WHERE conversation_id = $1 AND seq > $3 AND sender_id = $2 AND deleted_at IS NULL
         ORDER BY seq LIMIT $4
        """,
        conversation_id,
        sender_id,
        after,
        limit,
    )
    return [row["seq"] for row in rows]


async def retention_candidates(conn: Connection, older_than: datetime, after_id: int, limit: int) -> list[int]:
    """Up to limit conversation ids above after_id whose first message past retained_seq was sent before
    older_than: one primary-key probe per conversation."""
    rows = await conn.fetch(
        """
        SELECT c.id FROM conversation c
         WHERE c.id > $2 AND c.retained_seq < c.last_seq AND c.created_at < $1
           AND EXISTS (SELECT 1 FROM message m
                        WHERE m.conversation_id = c.id AND m.seq = c.retained_seq + 1 AND m.created_at < $1)
         ORDER BY c.id LIMIT $3
        """,
        older_than,
        after_id,
        limit,
    )
    return [row["id"] for row in rows]


async def expired_txn(
    conn: Connection, conversation_id: int, after: int, older_than: datetime, limit: int
) -> tuple[list[int], int, bool]:
    """Of the next `limit` messages after seq `after`, those sent before older_than: a prefix, as created_at
    never goes back while seq grows (chat_send: never before the previous message). Returns the seqs among
    them not deleted yet, the last of them (`after` when none), and whether all `limit` were (more may follow)."""
    rows = await conn.fetch(
        """
        SELECT seq, created_at < $3 AS expired, deleted_at IS NULL AS live FROM message
         WHERE conversation_id = $1 AND seq > $2 ORDER BY seq LIMIT $4
        """,
        conversation_id,
        after,
        older_than,
        limit,
    )
    expired = []
    for row in rows:
        if not row["expired"]:
            break
        expired.append(row)
    last = expired[-1]["seq"] if expired else after
    return [row["seq"] for row in expired if row["live"]], last, len(expired) == limit


async def set_retained_txn(conn: Connection, conversation_id: int, seq: int) -> None:
    await conn.execute("UPDATE conversation SET retained_seq = $2 WHERE id = $1", conversation_id, seq)
