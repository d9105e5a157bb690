"""Threads (migration 0025_threads): a reply's place in its root's thread, and who follows it.

A reply's root is the message it quotes, or that message's root when it quotes a reply (threads are
one level deep). Each thread numbers its replies gap-free (thread.last_reply_seq); the writes run in
the send's transaction, after chat_send stored the reply under the conversation's lock, so replies to
one thread are numbered in their conversation seq order.
"""

from __future__ import annotations

from ..db import Connection, Row


async def add_reply_txn(
    conn: Connection, conversation_id: int, seq: int, reply_to_seq: int, sender_id: str, *, thread_only: bool
) -> Row:
    """File reply seq (quoting reply_to_seq, already checked to be an earlier message) in its root's thread:
    the thread's next reply seq, its thread_reply row, the thread-only count of the conversation when it is
    thread-only; the root's author and the sender follow the thread, and the sender has read it up to their
    reply. Returns (root_seq, reply_seq)."""
    filed = await conn.fetchrow(
        """
        WITH root AS (
            SELECT coalesce((SELECT r.root_seq FROM thread_reply r
                              WHERE r.conversation_id = $1 AND r.seq = $3), $3::bigint) AS seq
        ), numbered AS (
            INSERT INTO thread AS t (conversation_id, root_seq, last_reply_seq, last_reply_at)
            SELECT $1, root.seq, 1, m.created_at
              FROM root, message m
             WHERE m.conversation_id = $1 AND m.seq = $2
            ON CONFLICT (conversation_id, root_seq)
            DO UPDATE SET last_reply_seq = t.last_reply_seq + 1, last_reply_at = excluded.last_reply_at
            RETURNING t.root_seq, t.last_reply_seq
        )
        INSERT INTO thread_reply (conversation_id, seq, root_seq, reply_seq, thread_only)
        SELECT $1, $2, n.root_seq, n.last_reply_seq, $4 FROM numbered n
        RETURNING root_seq, reply_seq
        """,
        conversation_id,
        seq,
        reply_to_seq,
        thread_only,
    )
    if thread_only:
        await conn.execute(
            "UPDATE conversation SET thread_only_count = thread_only_count + 1 WHERE id = $1", conversation_id
        )
    # the sender reads up to their reply and follows again; the root's author follows (unless they unfollowed)
    await conn.execute(
        """
        INSERT INTO thread_member AS tm (conversation_id, root_seq, user_id, last_read_reply_seq)
        SELECT $1, $2, u.user_id, CASE WHEN u.user_id = $4 THEN $3::bigint ELSE 0 END
          FROM (SELECT $4::text COLLATE "C" AS user_id
                UNION
                SELECT m.sender_id FROM message m WHERE m.conversation_id = $1 AND m.seq = $2) u
         ORDER BY u.user_id
        ON CONFLICT (conversation_id, root_seq, user_id) DO UPDATE
           SET last_read_reply_seq = greatest(tm.last_read_reply_seq, excluded.last_read_reply_seq),
               following = tm.following OR excluded.user_id = $4
        """,
        conversation_id,
        filed["root_seq"],
        filed["reply_seq"],
        sender_id,
    )
    return filed


async def root_of(conn: Connection, conversation_id: int, seq: int) -> int | None:
    """The root of message seq's thread: its root when it is a reply, else itself; None when the
    conversation has no such message."""
    return await conn.fetchval(
        """
        SELECT coalesce(r.root_seq, m.seq)
          FROM message m
          LEFT JOIN thread_reply r ON r.conversation_id = m.conversation_id AND r.seq = m.seq
         WHERE m.conversation_id = $1 AND m.seq = $2
        """,
        conversation_id,
        seq,
    )


async def thread_of(conn: Connection, conversation_id: int, root_seq: int, user_id: str) -> Row:
    """A thread as user_id sees it: (root_seq, last_reply_seq, last_reply_at, reply_count (replies not deleted),
    last_reply (the newest reply's conversation seq, or None), last_read_reply_seq, following, participants
    (the root's author, then whoever replied, each once, by their first reply)). A root with no reply
    answers 0s, None and its author."""
    return await conn.fetchrow(
        """
        SELECT $2::bigint AS root_seq,
               coalesce(t.last_reply_seq, 0) AS last_reply_seq, t.last_reply_at,
               (SELECT count(*) FROM thread_reply r JOIN message x ON x.conversation_id = r.conversation_id
                   AND x.seq = r.seq
                 WHERE r.conversation_id = $1 AND r.root_seq = $2 AND x.deleted_at IS NULL) AS reply_count,
               (SELECT r.seq FROM thread_reply r
                 WHERE r.conversation_id = $1 AND r.root_seq = $2 AND r.reply_seq = t.last_reply_seq) AS last_reply,
               coalesce(tm.last_read_reply_seq, 0) AS last_read_reply_seq,
               coalesce(tm.following, false) AS following,
               ARRAY(SELECT p.sender_id FROM (
                       SELECT root.sender_id, 0::bigint AS at
                       UNION ALL
                       SELECT x.sender_id, r.seq FROM thread_reply r JOIN message x
                           ON x.conversation_id = r.conversation_id AND x.seq = r.seq
                        WHERE r.conversation_id = $1 AND r.root_seq = $2) p
                      GROUP BY p.sender_id ORDER BY min(p.at), p.sender_id) AS participants
          FROM message root
          LEFT JOIN thread t ON t.conversation_id = $1 AND t.root_seq = $2
          LEFT JOIN thread_member tm ON tm.conversation_id = $1 AND tm.root_seq = $2 AND tm.user_id = $3
         WHERE root.conversation_id = $1 AND root.seq = $2
        """,
        conversation_id,
        root_seq,
        user_id,
    )


async def mark_read_txn(conn: Connection, conversation_id: int, root_seq: int, user_id: str, reply_seq: int) -> None:
    """Raise user_id's thread watermark to reply_seq (clamped to the thread's last reply; never lowered).
    A member who does not follow the thread reads it without following it."""
    await conn.execute(
        """
        INSERT INTO thread_member AS tm (conversation_id, root_seq, user_id, last_read_reply_seq, following)
        SELECT $1, $2, $3, least($4::bigint, coalesce(t.last_reply_seq, 0)), false
          FROM (SELECT 1) one
          LEFT JOIN thread t ON t.conversation_id = $1 AND t.root_seq = $2
        ON CONFLICT (conversation_id, root_seq, user_id) DO UPDATE
           SET last_read_reply_seq = greatest(tm.last_read_reply_seq, excluded.last_read_reply_seq)
        """,
        conversation_id,
        root_seq,
        user_id,
        reply_seq,
    )


async def follow_txn(conn: Connection, conversation_id: int, root_seq: int, user_id: str, following: bool) -> None:
    """Follow the thread (following=True) or stop following it."""
    await conn.execute(
        """
        INSERT INTO thread_member AS tm (conversation_id, root_seq, user_id, following) VALUES ($1, $2, $3, $4)
        ON CONFLICT (conversation_id, root_seq, user_id) DO UPDATE SET following = excluded.following
        """,
        conversation_id,
        root_seq,
        user_id,
        following,
    )
