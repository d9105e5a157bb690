"""Conversations, members and direct pairs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from ..db import Connection, Row

_CONVERSATION_COLUMNS = "c.id, c.type, c.title, c.last_seq, c.last_message_at, c.created_at"


async def lock_for_member_txn(conn: Connection, conversation_id: int, user_id: int) -> Row | None:
    """Lock the conversation row (sends and membership changes queue up on it).

    Returns (type, last_seq, now, role) where role is the caller's role or None
    when the caller is not a member; None when the conversation does not exist.
    """
    return await conn.fetchrow(
        """
        SELECT c.type, c.last_seq, m.role,
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


async def count_members(conn: Connection, conversation_id: int) -> int:
    return await conn.fetchval("SELECT count(*) FROM conversation_member WHERE conversation_id = $1", conversation_id)


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
    args: list[object] = [user_id, limit]
    keyset = ""
    if after is not None:
        keyset = "AND (coalesce(c.last_message_at, c.created_at), c.id) < ($3::timestamptz, $4::bigint)"
        args += after
    return await conn.fetch(
        f"""
        SELECT {_CONVERSATION_COLUMNS}, m.last_read_seq, m.role,
               coalesce(c.last_message_at, c.created_at) AS activity_at
          FROM conversation_member m
          JOIN conversation c ON c.id = m.conversation_id
         WHERE m.user_id = $1 {keyset}
         ORDER BY activity_at DESC, c.id DESC
         LIMIT $2
        """,
        *args,
    )


async def inbox_page_with_last_messages(
    conn: Connection, user_id: int, limit: int, after: tuple[datetime, int] | None
) -> list[Row]:
    """inbox_page, each row with its conversation's last message (the one at last_seq) in the
    columns lm_sender_id, lm_client_msg_id, lm_body, lm_created_at (null when it has none): one
    statement for a page of conversations and their previews (the page, then the messages by
    key, was two round trips)."""
    args: list[object] = [user_id, limit]
    keyset = ""
    if after is not None:
        keyset = "AND (coalesce(c.last_message_at, c.created_at), c.id) < ($3::timestamptz, $4::bigint)"
        args += after
    return await conn.fetch(
        f"""
        SELECT p.*, lm.sender_id AS lm_sender_id, lm.client_msg_id AS lm_client_msg_id,
               lm.body AS lm_body, lm.created_at AS lm_created_at
          FROM (
            SELECT {_CONVERSATION_COLUMNS}, m.last_read_seq, m.role,
                   coalesce(c.last_message_at, c.created_at) AS activity_at
              FROM conversation_member m
              JOIN conversation c ON c.id = m.conversation_id
             WHERE m.user_id = $1 {keyset}
             ORDER BY activity_at DESC, c.id DESC
             LIMIT $2
          ) p
          LEFT JOIN message lm ON lm.conversation_id = p.id AND lm.seq = p.last_seq
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
    rows = await conn.fetch(
        """
        SELECT conversation_id, count(*) AS n FROM conversation_member
         WHERE conversation_id = ANY($1::bigint[])
         GROUP BY conversation_id
        """,
        list(conversation_ids),
    )
    return {row.conversation_id: row.n for row in rows}


async def members_of(conn: Connection, conversation_ids: Sequence[int]) -> list[Row]:
    """Members of the given conversations, ordered by conversation then user id."""
    return await conn.fetch(
        """
        SELECT conversation_id, user_id, role, last_read_seq, joined_at
          FROM conversation_member
         WHERE conversation_id = ANY($1::bigint[])
         ORDER BY conversation_id, user_id
        """,
        list(conversation_ids),
    )


async def member_user_ids(conn: Connection, conversation_id: int) -> list[int]:
    rows = await conn.fetch(
        "SELECT user_id FROM conversation_member WHERE conversation_id = $1 ORDER BY user_id", conversation_id
    )
    return [row.user_id for row in rows]
