"""Conversations, members and direct pairs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from ..db import Connection, Row

_CONVERSATION_COLUMNS = "c.id, c.type, c.title, c.last_seq, c.last_message_at, c.created_at"


async def lock_for_member_txn(conn: Connection, conversation_id: int, user_id: int) -> Row | None:
    """Lock the conversation row (sends and membership changes queue up on it).

    Returns (type, last_seq, member_count, now, role) where role is the caller's
    role or None when the caller is not a member; None when the conversation does
    not exist.
    """
    return await conn.fetchrow(
        """
        SELECT c.type, c.last_seq, c.member_count, m.role,
               -- taken under the lock, never before the previous message's time
               greatest(clock_timestamp(), c.last_message_at) AS now
          FROM conversation c
          LEFT JOIN conversation_member m
            ON m.conversation_id = c.id AND m.user_id = $2
         WHERE c.id = $1
           FOR NO KEY UPDATE OF c
        """,
        conversation_id,
        user_id,
    )


async def insert_conversation(conn: Connection, type_: str, title: str | None, created_by: int | None = None) -> Row:
    return await conn.fetchrow(
        "INSERT INTO conversation (type, title, created_by) VALUES ($1, $2, $3) RETURNING id, created_at",
        type_,
        title,
        created_by,
    )


_GROUP_QUOTA_LOCK = 7261303  # advisory lock namespace (two-key form): one user's group creations, one at a time


async def lock_group_quota_txn(conn: Connection, user_id: int) -> None:
    """Serialize user_id's group creations until the transaction ends, so that two
    concurrent ones (in any process) cannot both pass the daily count."""
    await conn.execute("SELECT pg_advisory_xact_lock($1, hashint8($2))", _GROUP_QUOTA_LOCK, user_id)


async def groups_created_since(conn: Connection, user_id: int, seconds: float) -> Row:
    """(count, oldest_age) of the GROUPs user_id created in the last `seconds`;
    oldest_age: how many seconds ago the oldest of them was created (None without any)."""
    return await conn.fetchrow(
        """
        SELECT count(*) AS count,
               extract(epoch FROM clock_timestamp() - min(created_at))::float8 AS oldest_age
          FROM conversation
         WHERE type = 'GROUP' AND created_by = $1
           AND created_at > clock_timestamp() - make_interval(secs => $2)
        """,
        user_id,
        float(seconds),
    )


async def insert_members(
    conn: Connection,
    conversation_id: int,
    members: Sequence[tuple[int, str]],
    last_read_seq: int = 0,
) -> list[int]:
    """Add (user_id, role) pairs; ids already present are skipped. Returns the ids added."""
    if not members:
        return []
    rows = await conn.fetch(
        """
        INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
        SELECT $1, u.user_id, u.role, $4
          FROM unnest($2::bigint[], $3::text[]) AS u(user_id, role)
        ON CONFLICT (conversation_id, user_id) DO NOTHING
        RETURNING user_id
        """,
        conversation_id,
        [uid for uid, _ in members],
        [role for _, role in members],
        last_read_seq,
    )
    return sorted(row.user_id for row in rows)


async def member_ids_among(conn: Connection, conversation_id: int, user_ids: Iterable[int]) -> set[int]:
    rows = await conn.fetch(
        "SELECT user_id FROM conversation_member WHERE conversation_id = $1 AND user_id = ANY($2::bigint[])",
        conversation_id,
        list(user_ids),
    )
    return {row.user_id for row in rows}


async def delete_member(conn: Connection, conversation_id: int, user_id: int) -> str | None:
    """Remove a member; returns the role they had, or None if they were not a member."""
    return await conn.fetchval(
        "DELETE FROM conversation_member WHERE conversation_id = $1 AND user_id = $2 RETURNING role",
        conversation_id,
        user_id,
    )


async def promote_if_ownerless(conn: Connection, conversation_id: int) -> int | None:
    """When no OWNER remains, make the longest-standing member the OWNER; returns their id."""
    return await conn.fetchval(
        """
        UPDATE conversation_member SET role = 'OWNER'
         WHERE conversation_id = $1
           AND NOT EXISTS (SELECT 1 FROM conversation_member
                            WHERE conversation_id = $1 AND role = 'OWNER')
           AND user_id = (SELECT user_id FROM conversation_member
                           WHERE conversation_id = $1
                           ORDER BY joined_at, user_id LIMIT 1)
        RETURNING user_id
        """,
        conversation_id,
    )


async def find_direct(conn: Connection, user_low: int, user_high: int) -> int | None:
    return await conn.fetchval(
        "SELECT conversation_id FROM direct_pair WHERE user_low = $1 AND user_high = $2", user_low, user_high
    )


async def claim_direct_pair(conn: Connection, user_low: int, user_high: int, conversation_id: int) -> bool:
    """Record conversation_id as the pair's chat. False when another one got there first."""
    claimed = await conn.fetchval(
        """
        INSERT INTO direct_pair (user_low, user_high, conversation_id)
        VALUES ($1, $2, $3)
        ON CONFLICT (user_low, user_high) DO NOTHING
        RETURNING conversation_id
        """,
        user_low,
        user_high,
        conversation_id,
    )
    return claimed is not None


async def for_viewer(conn: Connection, conversation_ids: Sequence[int], user_id: int) -> list[Row]:
    """The conversations among ids that user_id is a member of, with the viewer's watermark."""
    return await conn.fetch(
        f"""
        SELECT {_CONVERSATION_COLUMNS}, m.last_read_seq, m.role
          FROM conversation c
          JOIN conversation_member m ON m.conversation_id = c.id AND m.user_id = $2
         WHERE c.id = ANY($1::bigint[])
        """,
        list(conversation_ids),
        user_id,
    )


async def inbox_page(conn: Connection, user_id: int, limit: int, after: tuple[datetime, int] | None) -> list[Row]:
    """The viewer's conversations, newest activity first, keyset-paginated on
    (coalesce(last_message_at, created_at), id). Fetch limit + 1 to learn hasNextPage."""
    page, args = _inbox_page_query(user_id, limit, after)
    return await conn.fetch(page, *args)


def _inbox_page_query(user_id: int, limit: int, after: tuple[datetime, int] | None) -> tuple[str, list[object]]:
    """The inbox page's SELECT and its arguments ($1 user, $2 limit, $3-$4 the keyset)."""
    args: list[object] = [user_id, limit]
    keyset = ""
    if after is not None:
        keyset = "AND (coalesce(c.last_message_at, c.created_at), c.id) < ($3::timestamptz, $4::bigint)"
        args += after
    page = f"""
        SELECT {_CONVERSATION_COLUMNS}, m.last_read_seq, m.role,
               coalesce(c.last_message_at, c.created_at) AS activity_at
          FROM conversation_member m
          JOIN conversation c ON c.id = m.conversation_id
         WHERE m.user_id = $1 {keyset}
         ORDER BY activity_at DESC, c.id DESC
         LIMIT $2
        """
    return page, args


async def inbox_page_with_last_messages(
    conn: Connection, user_id: int, limit: int, after: tuple[datetime, int] | None
) -> list[Row]:
    """inbox_page, each row with its conversation's last message (the one at last_seq) in the
    columns lm_sender_id, lm_client_msg_id, lm_body, lm_created_at (null when it has none): one
    statement for a page of conversations and their previews (the page, then the messages by
    key, was two round trips)."""
    page, args = _inbox_page_query(user_id, limit, after)
    return await conn.fetch(
        f"""
        SELECT p.*, lm.sender_id AS lm_sender_id, lm.client_msg_id AS lm_client_msg_id,
               lm.body AS lm_body, lm.created_at AS lm_created_at
          FROM ({page}) p
          -- LATERAL ... LIMIT 1: one index probe of one partition per conversation, whatever
          -- the planner thinks of the table's size (a plain join may become a hash join that
          -- scans every partition; tests/test_partitioning.py)
          LEFT JOIN LATERAL (
            SELECT sender_id, client_msg_id, body, created_at FROM message
             WHERE conversation_id = p.id AND seq = p.last_seq
             LIMIT 1
          ) lm ON true
         ORDER BY p.activity_at DESC, p.id DESC
        """,
        *args,
    )


async def viewer_totals(conn: Connection, user_id: int) -> Row:
    return await conn.fetchrow(
        """
        SELECT coalesce(sum(c.last_seq - m.last_read_seq), 0) AS total_unread,
               count(*) FILTER (WHERE c.last_seq > m.last_read_seq) AS unread_conversations
          FROM conversation_member m
          JOIN conversation c ON c.id = m.conversation_id
         WHERE m.user_id = $1
        """,
        user_id,
    )


async def member_counts(conn: Connection, conversation_ids: Sequence[int]) -> dict[int, int]:
    """Stored counts (conversation.member_count, kept by triggers: 0007), not a count of rows."""
    rows = await conn.fetch(
        "SELECT id, member_count FROM conversation WHERE id = ANY($1::bigint[])", list(conversation_ids)
    )
    return {row.id: row.member_count for row in rows}


async def member_pages(conn: Connection, pages: Sequence[tuple[int, int, int]]) -> list[Row]:
    """(conversation_id, after_user_id, limit) -> members with user_id > after, ascending, at most
    limit of them; one statement for every page (each a range of the primary key)."""
    return await conn.fetch(
        """
        SELECT p.i, m.conversation_id, m.user_id, m.role, m.last_read_seq, m.joined_at
          FROM unnest($1::bigint[], $2::bigint[], $3::int[]) WITH ORDINALITY AS p(cid, after, lim, i)
          CROSS JOIN LATERAL (
                SELECT * FROM conversation_member m
                 WHERE m.conversation_id = p.cid AND m.user_id > p.after
                 ORDER BY m.user_id LIMIT p.lim) m
         ORDER BY p.i, m.user_id
        """,
        [cid for cid, _, _ in pages],
        [after for _, after, _ in pages],
        [limit for _, _, limit in pages],
    )


async def member_rows(conn: Connection, keys: Sequence[tuple[int, int]]) -> list[Row]:
    """The membership rows of (conversation_id, user_id) pairs that are members."""
    return await conn.fetch(
        """
        SELECT m.conversation_id, m.user_id, m.role, m.last_read_seq, m.joined_at
          FROM unnest($1::bigint[], $2::bigint[]) AS k(cid, uid)
          JOIN conversation_member m ON m.conversation_id = k.cid AND m.user_id = k.uid
        """,
        [cid for cid, _ in keys],
        [uid for _, uid in keys],
    )


# "Seen" questions about messages lo..hi of a conversation, answered from conversation_member_read_idx
# (0007) by index-only scans, whatever the group's size:
#  'h' rows (w, n): n members with LEAST(last_read_seq, hi) = w, among those with last_read_seq >= lo: the
#      members who have read seq (lo <= seq <= hi) are the sum of n over w >= seq (at most hi - lo + 1 rows);
#  'l' rows (user_id, last_read_seq): the two lowest watermarks: the lowest among the members other than a
#      sender is one of them (seen: every other member has read seq);
#  's' rows (user_id, last_read_seq): the senders' own watermarks (a sender is not counted as a reader).
SEEN_STATE_SQL = """
WITH k AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS k(cid, lo, hi))
SELECT k.cid, 'h' AS kind, h.w AS a, h.n AS b
  FROM k CROSS JOIN LATERAL (
        SELECT LEAST(m.last_read_seq, k.hi) AS w, count(*) AS n
          FROM conversation_member m
         WHERE m.conversation_id = k.cid AND m.last_read_seq >= k.lo
         GROUP BY 1) h
UNION ALL
SELECT k.cid, 'l', l.user_id, l.last_read_seq
  FROM k CROSS JOIN LATERAL (
        SELECT m.user_id, m.last_read_seq FROM conversation_member m
         WHERE m.conversation_id = k.cid
         ORDER BY m.last_read_seq LIMIT 2) l
UNION ALL
SELECT m.conversation_id, 's', m.user_id, m.last_read_seq
  FROM unnest($4::bigint[], $5::bigint[]) AS s(cid, uid)
  JOIN conversation_member m ON m.conversation_id = s.cid AND m.user_id = s.uid
"""


async def seen_state(
    conn: Connection, ranges: Sequence[tuple[int, int, int]], senders: Sequence[tuple[int, int]]
) -> list[Row]:
    """ranges: (conversation_id, lo, hi) seqs; senders: (conversation_id, sender_id). Rows
    (cid, kind, a, b) as SEEN_STATE_SQL says; O(members who read lo) index entries, not O(members)."""
    return await conn.fetch(
        SEEN_STATE_SQL,
        [cid for cid, _, _ in ranges],
        [lo for _, lo, _ in ranges],
        [hi for _, _, hi in ranges],
        [cid for cid, _ in senders],
        [uid for _, uid in senders],
    )


async def seen_by_pages(conn: Connection, keys: Sequence[tuple[int, int, int, int, int]]) -> list[Row]:
    """(conversation_id, seq, sender_id, after_user_id, limit) -> rows (i, user_id): the members other
    than the sender with last_read_seq >= seq and user_id > after, ascending, at most limit; one
    statement. Each page reads O(readers of seq) index entries (as seenByCount does), not O(members)."""
    return await conn.fetch(
        """
        SELECT k.i, s.user_id
          FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::int[])
               WITH ORDINALITY AS k(cid, seq, sender, after, lim, i)
          CROSS JOIN LATERAL (
                -- The readers from conversation_member_read_idx, then the first `lim` of them: without
                -- the fence (OFFSET 0) the planner may walk the primary key in user_id order through
                -- every member who has not read seq (all 100,000 of them for a new message).
                SELECT r.user_id FROM (
                    SELECT m.user_id FROM conversation_member m
                     WHERE m.conversation_id = k.cid AND m.last_read_seq >= k.seq
                       AND m.user_id <> k.sender AND m.user_id > k.after
                    OFFSET 0) r
                 ORDER BY r.user_id LIMIT k.lim) s
         ORDER BY k.i, s.user_id
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
        [k[3] for k in keys],
        [k[4] for k in keys],
    )


async def live_members(conn: Connection, conversation_id: int, whole_up_to: int, among: Sequence[int]) -> Row | None:
    """(member_count, user_ids) for the live path: every member's id when the conversation has at most
    whole_up_to members; above that only the members among `among` (the users subscribed in this
    process), so the answer is bounded by subscribers, never by members. None: no such conversation."""
    return await conn.fetchrow(
        """
        SELECT c.member_count,
               CASE WHEN c.member_count <= $2
                    THEN ARRAY(SELECT m.user_id FROM conversation_member m WHERE m.conversation_id = c.id)
                    ELSE ARRAY(SELECT m.user_id FROM conversation_member m
                                WHERE m.conversation_id = c.id AND m.user_id = ANY($3::bigint[]))
               END AS user_ids
          FROM conversation c
         WHERE c.id = $1
        """,
        conversation_id,
        whole_up_to,
        list(among),
    )
