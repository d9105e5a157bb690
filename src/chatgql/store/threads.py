"""Threads (migration 0029_threads): a reply's place in its root's thread, and who follows it.

A reply's root is the message it quotes, or that message's root when it quotes a reply (threads are
one level deep). Each thread numbers its replies gap-free (thread.last_reply_seq); the writes run in
the send's transaction, after chat_send stored the reply under the conversation's lock, so replies to
one thread are numbered in their conversation seq order. A deleted reply keeps its reply seq
(thread_reply.deleted, set by changes.tombstone_txn): a thread's unread is a subtraction, its last
reply seq less the member's thread watermark less the deleted replies above it.

Every change of a member's state of a thread takes the member's next version in that conversation
(thread_clock, migration 0032_thread_versions) and writes it on their thread_member row with the change's
kind. The lock order, in every writer: the thread rows (by root_seq), then the clocks (by user_id), then the
thread_member rows (by user_id). A reply and a delete take their thread rows exclusively and read the
followers after, so a follow or read of the thread that committed first is seen and one that comes later
waits for them; markThreadRead, followThread and unfollowThread take their thread row FOR SHARE first.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..db import Connection, Row
from .messages import MESSAGE_COLUMNS


async def add_reply_txn(
    conn: Connection,
    conversation_id: int,
    seq: int,
    reply_to_seq: int,
    sender_id: str,
    *,
    thread_only: bool,
    mentioned: Sequence[str] = (),
) -> Row:
    """File reply seq (quoting reply_to_seq, already checked to be an earlier message) in its root's thread:
    the thread's next reply seq, its thread_reply row, the thread-only count of the conversation when it is
    thread-only; the root's author, the sender and the members mentioned (already checked to be members)
    follow the thread (the sender and the mentioned ones again after an unfollow, the root's author not),
    and the sender has read it up to their reply. Returns (root_seq, reply_seq)."""
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
    # Whoever follows the thread after the reply (its followers, the sender and the mentioned, who follow
    # again, and the root's author unless they unfollowed) takes their next version: the clocks first, all of
    # them in user order (the sort consumes the whole INSERT before the first thread_member row is written),
    # then their thread_member rows. The sender reads up to their reply. One statement however many follow;
    # its snapshot is taken after the thread row was locked above, so it sees every follow committed before.
    await conn.execute(
        """
        WITH who AS (
            SELECT f.user_id FROM thread_member f
             WHERE f.conversation_id = $1 AND f.root_seq = $2 AND f.following
            UNION
            SELECT $4::text COLLATE "C"
            UNION
            SELECT unnest($5::text[]) COLLATE "C"
            UNION
            SELECT m.sender_id FROM message m
             WHERE m.conversation_id = $1 AND m.seq = $2
               AND NOT EXISTS (SELECT 1 FROM thread_member x WHERE x.conversation_id = $1 AND x.root_seq = $2
                                  AND x.user_id = m.sender_id AND NOT x.following)
        ), clock AS (
            INSERT INTO thread_clock AS c (conversation_id, user_id, version)
            SELECT $1, who.user_id, 1 FROM who ORDER BY who.user_id
            ON CONFLICT (conversation_id, user_id) DO UPDATE SET version = c.version + 1
            RETURNING c.user_id, c.version
        )
        INSERT INTO thread_member AS tm
               (conversation_id, root_seq, user_id, last_read_reply_seq, first_reply_seq, version, last_change)
        SELECT $1, $2, k.user_id, CASE WHEN k.user_id = $4 THEN $3::bigint ELSE 0 END,
               CASE WHEN k.user_id = $4 THEN $3::bigint END, k.version, 'REPLY'
          FROM clock k
         ORDER BY k.user_id
        ON CONFLICT (conversation_id, root_seq, user_id) DO UPDATE
           SET last_read_reply_seq = greatest(tm.last_read_reply_seq, excluded.last_read_reply_seq),
               following = true,
               first_reply_seq = coalesce(tm.first_reply_seq, excluded.first_reply_seq),
               version = excluded.version,
               last_change = excluded.last_change
        """,
        conversation_id,
        filed["root_seq"],
        filed["reply_seq"],
        sender_id,
        list(mentioned),
    )
    return filed


async def root_for(conn: Connection, conversation_id: int, seq: int, user_id: str) -> Row | None:
    """(root_seq, visible_from_seq) for user_id and message seq: root_seq is the root of its thread (its root when
    it is a reply, else itself; None when the conversation has no such message), visible_from_seq the first seq
    the member may read. None when user_id is not a member."""
    return await conn.fetchrow(
        """
        SELECT coalesce(r.root_seq, x.seq) AS root_seq, cm.visible_from_seq
          FROM conversation_member cm
          LEFT JOIN message x ON x.conversation_id = cm.conversation_id AND x.seq = $2
          LEFT JOIN thread_reply r ON r.conversation_id = x.conversation_id AND r.seq = x.seq
         WHERE cm.conversation_id = $1 AND cm.user_id = $3
        """,
        conversation_id,
        seq,
        user_id,
    )


# A thread as member $3 sees it, for each key k (cid, root): its counter, the deleted replies (on
# thread_reply_deleted_idx, within the thread, and above the member's watermark), the newest reply left and the
# first unread one (on the thread's reply seq key, stopping at the first reply that is not deleted), and its
# participants (the root's author, then the repliers by their first reply: thread_member.first_reply_seq).
_THREAD = """
    SELECT k.i, k.root AS root_seq, coalesce(t.last_reply_seq, 0) AS last_reply_seq, t.last_reply_at,
           coalesce(t.last_reply_seq, 0)
             - (SELECT count(*) FROM thread_reply d
                 WHERE d.conversation_id = k.cid AND d.root_seq = k.root AND d.deleted) AS reply_count,
           (SELECT r.seq FROM thread_reply r
             WHERE r.conversation_id = k.cid AND r.root_seq = k.root AND NOT r.deleted
             ORDER BY r.reply_seq DESC LIMIT 1) AS last_reply,
           coalesce(tm.last_read_reply_seq, 0) AS last_read_reply_seq,
           greatest(coalesce(t.last_reply_seq, 0) - coalesce(tm.last_read_reply_seq, 0)
             - (SELECT count(*) FROM thread_reply d
                 WHERE d.conversation_id = k.cid AND d.root_seq = k.root AND d.deleted
                   AND d.reply_seq > coalesce(tm.last_read_reply_seq, 0)), 0) AS unread_count,
           (SELECT r.reply_seq FROM thread_reply r
             WHERE r.conversation_id = k.cid AND r.root_seq = k.root
               AND r.reply_seq > coalesce(tm.last_read_reply_seq, 0) AND NOT r.deleted
             ORDER BY r.reply_seq LIMIT 1) AS first_unread_reply_seq,
           coalesce(tm.following, false) AS following,
           coalesce(tm.version, 0) AS version, tm.last_change,
           ARRAY[rm.sender_id] || ARRAY(SELECT p.user_id FROM thread_member p
                    WHERE p.conversation_id = k.cid AND p.root_seq = k.root AND p.first_reply_seq IS NOT NULL
                      AND p.user_id <> rm.sender_id
                    ORDER BY p.first_reply_seq) AS participants
      FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS k(cid, root, i)
      JOIN message rm ON rm.conversation_id = k.cid AND rm.seq = k.root
      LEFT JOIN thread t ON t.conversation_id = k.cid AND t.root_seq = k.root
      LEFT JOIN thread_member tm ON tm.conversation_id = k.cid AND tm.root_seq = k.root AND tm.user_id = $3
     ORDER BY k.i
"""


async def threads_of(conn: Connection, keys: Sequence[tuple[int, int]], user_id: str) -> list[Row]:
    """The threads of keys (conversation_id, root_seq) as user_id sees them, in keys' order (a key with no such
    root left out): (root_seq, last_reply_seq, last_reply_at, reply_count (replies not deleted), last_reply (the
    newest reply's conversation seq that is not deleted, or None), last_read_reply_seq, unread_count,
    first_unread_reply_seq, following, version (user_id's version of it, 0 for none), last_change (what took
    it, or None), participants). A root with no reply answers 0s, None and its author.
    One statement."""
    return await conn.fetch(_THREAD, [k[0] for k in keys], [k[1] for k in keys], user_id)


async def thread_of(conn: Connection, conversation_id: int, root_seq: int, user_id: str) -> Row:
    """One thread as user_id sees it (threads_of)."""
    return (await threads_of(conn, [(conversation_id, root_seq)], user_id))[0]


async def followed_page(
    conn: Connection, user_id: str, after: tuple[datetime, int, int] | None, limit: int
) -> list[Row]:
    """(conversation_id, root_seq, last_reply_at) of the threads user_id follows that have a reply, in the
    conversations they are in and whose root they may read, newest activity first (last_reply_at, then
    conversation_id, then root_seq, descending), after `after` (such a triple), at most limit."""
    return await conn.fetch(
        """
        SELECT t.conversation_id, t.root_seq, t.last_reply_at
          FROM thread_member tm
          JOIN conversation_member cm ON cm.conversation_id = tm.conversation_id AND cm.user_id = tm.user_id
          JOIN thread t ON t.conversation_id = tm.conversation_id AND t.root_seq = tm.root_seq
         WHERE tm.user_id = $1 AND tm.following AND tm.root_seq >= cm.visible_from_seq AND t.last_reply_seq > 0
           AND ($2::timestamptz IS NULL OR (t.last_reply_at, t.conversation_id, t.root_seq) < ($2, $3, $4))
         ORDER BY t.last_reply_at DESC, t.conversation_id DESC, t.root_seq DESC
         LIMIT $5
        """,
        user_id,
        None if after is None else after[0],
        None if after is None else after[1],
        None if after is None else after[2],
        limit,
    )


async def followed_totals(conn: Connection, user_id: str) -> Row:
    """(thread_unread, unread_threads): the sum of unread over the threads user_id follows (in the conversations
    they are in, whose root they may read), and how many of those have some unread."""
    return await conn.fetchrow(
        """
        SELECT coalesce(sum(u.unread), 0)::bigint AS thread_unread, count(*) FILTER (WHERE u.unread > 0) AS unread_threads
          FROM thread_member tm
          JOIN conversation_member cm ON cm.conversation_id = tm.conversation_id AND cm.user_id = tm.user_id
          JOIN thread t ON t.conversation_id = tm.conversation_id AND t.root_seq = tm.root_seq
          CROSS JOIN LATERAL (
            SELECT t.last_reply_seq - tm.last_read_reply_seq
                   - (SELECT count(*) FROM thread_reply d
                       WHERE d.conversation_id = t.conversation_id AND d.root_seq = t.root_seq AND d.deleted
                         AND d.reply_seq > tm.last_read_reply_seq) AS unread
          ) u
         WHERE tm.user_id = $1 AND tm.following AND tm.root_seq >= cm.visible_from_seq
           AND t.last_reply_seq > tm.last_read_reply_seq
        """,
        user_id,
    )


async def reply_page(
    conn: Connection, conversation_id: int, root_seq: int, after_reply_seq: int, limit: int
) -> list[Row]:
    """The replies of a thread with reply_seq > after_reply_seq, ascending, at most limit: (reply_seq, message
    columns...), tombstones of deleted ones included (on the thread's reply seq key)."""
    return await conn.fetch(
        f"""
        SELECT r.reply_seq, x.* FROM thread_reply r
        CROSS JOIN LATERAL (
            SELECT {MESSAGE_COLUMNS} FROM message WHERE conversation_id = r.conversation_id AND seq = r.seq
        ) x
         WHERE r.conversation_id = $1 AND r.root_seq = $2 AND r.reply_seq > $3
         ORDER BY r.reply_seq
         LIMIT $4
        """,
        conversation_id,
        root_seq,
        after_reply_seq,
        limit,
    )


async def lock_thread_txn(conn: Connection, conversation_id: int, root_seq: int, *, create: bool) -> int | None:
    """Lock the thread's row FOR SHARE (the first lock of markThreadRead, followThread and unfollowThread:
    a reply or a delete of the thread waits for it, and it for them) and return its last reply seq. create: a
    root with no reply yet gets its row first (last_reply_seq 0, which the lists leave out), so there is one
    to lock. None: no row (not created)."""
    if create:
        await conn.execute(
            "INSERT INTO thread (conversation_id, root_seq) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            conversation_id,
            root_seq,
        )
    return await conn.fetchval(
        "SELECT last_reply_seq FROM thread WHERE conversation_id = $1 AND root_seq = $2 FOR SHARE",
        conversation_id,
        root_seq,
    )


async def take_version_txn(
    conn: Connection,
    conversation_id: int,
    root_seq: int,
    user_id: str,
    *,
    read_to: int | None = None,
    following: bool | None = None,
) -> int | None:
    """Take user_id's next thread version in the conversation (their clock's row stays locked until commit, so
    their versions commit in order), when the change would change their row of the thread: a watermark raised
    to read_to, or following set to `following` (a member with no row counts as a change). None: it would
    not, and nothing is taken. After lock_thread_txn, before their thread_member row."""
    return await conn.fetchval(
        """
        INSERT INTO thread_clock AS c (conversation_id, user_id, version)
        SELECT $1, $3, 1
         WHERE NOT EXISTS (
               SELECT 1 FROM thread_member tm
                WHERE tm.conversation_id = $1 AND tm.root_seq = $2 AND tm.user_id = $3
                  AND ($4::bigint IS NULL OR tm.last_read_reply_seq >= $4)
                  AND ($5::boolean IS NULL OR tm.following = $5))
           AND ($4::bigint IS NULL OR $4 > 0)
        ON CONFLICT (conversation_id, user_id) DO UPDATE SET version = c.version + 1
        RETURNING c.version
        """,
        conversation_id,
        root_seq,
        user_id,
        read_to,
        following,
    )


async def mark_read_txn(
    conn: Connection, conversation_id: int, root_seq: int, user_id: str, reply_seq: int, version: int
) -> None:
    """Raise user_id's thread watermark to reply_seq (already clamped to the thread's last reply; never
    lowered), at their version. A member who does not follow the thread reads it without following it."""
    await conn.execute(
        """
        INSERT INTO thread_member AS tm
               (conversation_id, root_seq, user_id, last_read_reply_seq, following, version, last_change)
        VALUES ($1, $2, $3, $4, false, $5, 'READ')
        ON CONFLICT (conversation_id, root_seq, user_id) DO UPDATE
           SET last_read_reply_seq = greatest(tm.last_read_reply_seq, excluded.last_read_reply_seq),
               version = excluded.version, last_change = excluded.last_change
        """,
        conversation_id,
        root_seq,
        user_id,
        reply_seq,
        version,
    )


async def follow_txn(
    conn: Connection, conversation_id: int, root_seq: int, user_id: str, following: bool, version: int
) -> None:
    """Follow the thread (following=True) or stop following it, at user_id's version."""
    await conn.execute(
        """
        INSERT INTO thread_member AS tm (conversation_id, root_seq, user_id, following, version, last_change)
        VALUES ($1, $2, $3, $4, $5, $6)
        ON CONFLICT (conversation_id, root_seq, user_id) DO UPDATE
           SET following = excluded.following, version = excluded.version, last_change = excluded.last_change
        """,
        conversation_id,
        root_seq,
        user_id,
        following,
        version,
        "FOLLOW" if following else "UNFOLLOW",
    )


async def delete_replies_txn(conn: Connection, conversation_id: int, seqs: Sequence[int]) -> list[tuple[int, str]]:
    """After the replies among seqs became tombstones (changes.tombstone_txn): each follower of each of their
    threads takes a version per thread (kind DELETE). The thread rows first (by root_seq, exclusively: a follow
    or read of them waits, and the follower read below sees those committed before), then the clocks (by
    user_id; a member following several of the threads takes that many versions at once), then the
    thread_member rows. Two statements however many threads and followers. Returns the (root_seq, user_id)
    that took one."""
    roots = await conn.fetch(
        """
        SELECT t.root_seq FROM thread t
         WHERE t.conversation_id = $1
           AND t.root_seq IN (SELECT r.root_seq FROM thread_reply r WHERE r.conversation_id = $1 AND r.seq = ANY($2::bigint[]))
         ORDER BY t.root_seq
           FOR UPDATE
        """,
        conversation_id,
        list(seqs),
    )
    if not roots:
        return []
    rows = await conn.fetch(
        """
        WITH followed AS (
            SELECT f.user_id, f.root_seq,
                   row_number() OVER (PARTITION BY f.user_id ORDER BY f.root_seq) AS i,
                   count(*) OVER (PARTITION BY f.user_id) AS n
              FROM thread_member f
             WHERE f.conversation_id = $1 AND f.root_seq = ANY($2::bigint[]) AND f.following
        ), clock AS (
            INSERT INTO thread_clock AS c (conversation_id, user_id, version)
            SELECT $1, w.user_id, w.n FROM followed w WHERE w.i = 1 ORDER BY w.user_id
            ON CONFLICT (conversation_id, user_id) DO UPDATE SET version = c.version + excluded.version
            RETURNING c.user_id, c.version
        ), numbered AS (
            SELECT w.user_id, w.root_seq, k.version - w.n + w.i AS version
              FROM followed w JOIN clock k ON k.user_id = w.user_id
             ORDER BY w.user_id, w.root_seq
        )
        UPDATE thread_member tm SET version = v.version, last_change = 'DELETE'
          FROM numbered v
         WHERE tm.conversation_id = $1 AND tm.root_seq = v.root_seq AND tm.user_id = v.user_id
        RETURNING tm.root_seq, tm.user_id
        """,
        conversation_id,
        [row["root_seq"] for row in roots],
    )
    return sorted((row["root_seq"], row["user_id"]) for row in rows)


async def changed_since(
    conn: Connection, cursors: Sequence[tuple[int, int]], user_id: str, limit: int | None
) -> list[Row]:
    """Per (conversation_id, after_version): user_id's clock there (last_version, 0 for none), and the threads
    whose version for them is above after_version, ascending by version, at most limit (None: all), whose
    root they may read: rows (conversation_id, last_version, root_seq, version), root_seq None for a cursor with
    none. One statement (one snapshot: every version up to last_version has committed and is in it), on
    thread_member_version_idx. Conversations user_id is not in are left out."""
    return await conn.fetch(
        """
        SELECT k.cid AS conversation_id, coalesce(c.version, 0) AS last_version, v.root_seq, v.version
          FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS k(cid, after, i)
          JOIN conversation_member cm ON cm.conversation_id = k.cid AND cm.user_id = $3
          LEFT JOIN thread_clock c ON c.conversation_id = k.cid AND c.user_id = $3
          LEFT JOIN LATERAL (
            SELECT tm.root_seq, tm.version FROM thread_member tm
             WHERE tm.conversation_id = k.cid AND tm.user_id = $3 AND tm.version > k.after
               AND tm.root_seq >= cm.visible_from_seq
             ORDER BY tm.version
             LIMIT $4
          ) v ON true
         ORDER BY k.i, v.version
        """,
        [c for c, _ in cursors],
        [a for _, a in cursors],
        user_id,
        limit,
    )


async def follower_states_txn(conn: Connection, conversation_id: int, root_seq: int) -> list[Row]:
    """(user_id, last_reply_seq, last_read_reply_seq, version, unread_count) of each member who follows the thread
    and may read its root, by user id (a reply's or a delete's transaction, after its versions were taken)."""
    return await conn.fetch(
        """
        SELECT tm.user_id, t.last_reply_seq, tm.last_read_reply_seq, tm.version,
               greatest(t.last_reply_seq - tm.last_read_reply_seq
                 - (SELECT count(*) FROM thread_reply d
                     WHERE d.conversation_id = $1 AND d.root_seq = $2 AND d.deleted
                       AND d.reply_seq > tm.last_read_reply_seq), 0) AS unread_count
          FROM thread t
          JOIN thread_member tm ON tm.conversation_id = t.conversation_id AND tm.root_seq = t.root_seq
          JOIN conversation_member cm ON cm.conversation_id = tm.conversation_id AND cm.user_id = tm.user_id
         WHERE t.conversation_id = $1 AND t.root_seq = $2 AND tm.following AND cm.visible_from_seq <= $2
         ORDER BY tm.user_id
        """,
        conversation_id,
        root_seq,
    )
