"""Conversations, members and direct pairs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncConnection

_CONVERSATION_COLUMNS = "c.id, c.type, c.title, c.last_seq, c.last_message_at, c.created_at"


async def lock_for_member_txn(conn: AsyncConnection, conversation_id: int, user_id: int) -> Row | None:
    """Lock the conversation row (sends and membership changes queue up on it).

    Returns (type, last_seq, now, role) where role is the caller's role or None
    when the caller is not a member; None when the conversation does not exist.
    """
    result = await conn.execute(
        text(
            """
            SELECT c.type, c.last_seq, m.role,
                   -- taken under the lock, never before the previous message's time
                   greatest(clock_timestamp(), c.last_message_at) AS now
              FROM conversation c
              LEFT JOIN conversation_member m
                ON m.conversation_id = c.id AND m.user_id = :uid
             WHERE c.id = :cid
               FOR NO KEY UPDATE OF c
            """
        ),
        {"cid": conversation_id, "uid": user_id},
    )
    return result.first()


async def insert_conversation(conn: AsyncConnection, type_: str, title: str | None) -> Row:
    result = await conn.execute(
        text(
            """
            INSERT INTO conversation (type, title) VALUES (:type, :title)
            RETURNING id, created_at
            """
        ),
        {"type": type_, "title": title},
    )
    return result.one()


async def insert_members(
    conn: AsyncConnection,
    conversation_id: int,
    members: Sequence[tuple[int, str]],
    last_read_seq: int = 0,
) -> list[int]:
    """Add (user_id, role) pairs; ids already present are skipped. Returns the ids added."""
    if not members:
        return []
    result = await conn.execute(
        text(
            """
            INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
            SELECT :cid, u.user_id, u.role, :lrs
              FROM unnest(CAST(:uids AS bigint[]), CAST(:roles AS text[])) AS u(user_id, role)
            ON CONFLICT (conversation_id, user_id) DO NOTHING
            RETURNING user_id
            """
        ),
        {
            "cid": conversation_id,
            "uids": [uid for uid, _ in members],
            "roles": [role for _, role in members],
            "lrs": last_read_seq,
        },
    )
    return sorted(row.user_id for row in result)


async def member_ids_among(conn: AsyncConnection, conversation_id: int, user_ids: Iterable[int]) -> set[int]:
    result = await conn.execute(
        text(
            """
            SELECT user_id FROM conversation_member
             WHERE conversation_id = :cid AND user_id = ANY(CAST(:uids AS bigint[]))
            """
        ),
        {"cid": conversation_id, "uids": list(user_ids)},
    )
    return {row.user_id for row in result}


async def count_members(conn: AsyncConnection, conversation_id: int) -> int:
    result = await conn.execute(
        text("SELECT count(*) FROM conversation_member WHERE conversation_id = :cid"),
        {"cid": conversation_id},
    )
    return result.scalar_one()


async def delete_member(conn: AsyncConnection, conversation_id: int, user_id: int) -> str | None:
    """Remove a member; returns the role they had, or None if they were not a member."""
    result = await conn.execute(
        text(
            """
            DELETE FROM conversation_member
             WHERE conversation_id = :cid AND user_id = :uid
            RETURNING role
            """
        ),
        {"cid": conversation_id, "uid": user_id},
    )
    return result.scalar_one_or_none()


async def promote_if_ownerless(conn: AsyncConnection, conversation_id: int) -> int | None:
    """When no OWNER remains, make the longest-standing member the OWNER; returns their id."""
    result = await conn.execute(
        text(
            """
            UPDATE conversation_member SET role = 'OWNER'
             WHERE conversation_id = :cid
               AND NOT EXISTS (SELECT 1 FROM conversation_member
                                WHERE conversation_id = :cid AND role = 'OWNER')
               AND user_id = (SELECT user_id FROM conversation_member
                               WHERE conversation_id = :cid
                               ORDER BY joined_at, user_id LIMIT 1)
            RETURNING user_id
            """
        ),
        {"cid": conversation_id},
    )
    return result.scalar_one_or_none()


async def find_direct(conn: AsyncConnection, user_low: int, user_high: int) -> int | None:
    result = await conn.execute(
        text("SELECT conversation_id FROM direct_pair WHERE user_low = :low AND user_high = :high"),
        {"low": user_low, "high": user_high},
    )
    return result.scalar_one_or_none()


async def claim_direct_pair(conn: AsyncConnection, user_low: int, user_high: int, conversation_id: int) -> bool:
    """Record conversation_id as the pair's chat. False when another one got there first."""
    result = await conn.execute(
        text(
            """
            INSERT INTO direct_pair (user_low, user_high, conversation_id)
            VALUES (:low, :high, :cid)
            ON CONFLICT (user_low, user_high) DO NOTHING
            RETURNING conversation_id
            """
        ),
        {"low": user_low, "high": user_high, "cid": conversation_id},
    )
    return result.scalar_one_or_none() is not None


async def for_viewer(conn: AsyncConnection, conversation_ids: Sequence[int], user_id: int) -> list[Row]:
    """The conversations among ids that user_id is a member of, with the viewer's watermark."""
    result = await conn.execute(
        text(
            f"""
            SELECT {_CONVERSATION_COLUMNS}, m.last_read_seq, m.role
              FROM conversation c
              JOIN conversation_member m ON m.conversation_id = c.id AND m.user_id = :uid
             WHERE c.id = ANY(CAST(:cids AS bigint[]))
            """
        ),
        {"cids": list(conversation_ids), "uid": user_id},
    )
    return list(result)


async def inbox_page(
    conn: AsyncConnection,
    user_id: int,
    limit: int,
    after: tuple[datetime, int] | None,
) -> list[Row]:
    """The viewer's conversations, newest activity first, keyset-paginated on
    (coalesce(last_message_at, created_at), id). Fetch limit + 1 to learn hasNextPage."""
    params: dict[str, object] = {"uid": user_id, "limit": limit}
    keyset = ""
    if after is not None:
        keyset = "AND (coalesce(c.last_message_at, c.created_at), c.id) < (:after_at, :after_id)"
        params["after_at"], params["after_id"] = after
    result = await conn.execute(
        text(
            f"""
            SELECT {_CONVERSATION_COLUMNS}, m.last_read_seq, m.role,
                   coalesce(c.last_message_at, c.created_at) AS activity_at
              FROM conversation_member m
              JOIN conversation c ON c.id = m.conversation_id
             WHERE m.user_id = :uid {keyset}
             ORDER BY activity_at DESC, c.id DESC
             LIMIT :limit
            """
        ),
        params,
    )
    return list(result)


async def viewer_totals(conn: AsyncConnection, user_id: int) -> Row:
    result = await conn.execute(
        text(
            """
            SELECT coalesce(sum(c.last_seq - m.last_read_seq), 0) AS total_unread,
                   count(*) FILTER (WHERE c.last_seq > m.last_read_seq) AS unread_conversations
              FROM conversation_member m
              JOIN conversation c ON c.id = m.conversation_id
             WHERE m.user_id = :uid
            """
        ),
        {"uid": user_id},
    )
    return result.one()


async def member_counts(conn: AsyncConnection, conversation_ids: Sequence[int]) -> dict[int, int]:
    result = await conn.execute(
        text(
            """
            SELECT conversation_id, count(*) AS n FROM conversation_member
             WHERE conversation_id = ANY(CAST(:cids AS bigint[]))
             GROUP BY conversation_id
            """
        ),
        {"cids": list(conversation_ids)},
    )
    return {row.conversation_id: row.n for row in result}


async def members_of(conn: AsyncConnection, conversation_ids: Sequence[int]) -> list[Row]:
    """Members of the given conversations, ordered by conversation then user id."""
    result = await conn.execute(
        text(
            """
            SELECT conversation_id, user_id, role, last_read_seq, joined_at
              FROM conversation_member
             WHERE conversation_id = ANY(CAST(:cids AS bigint[]))
             ORDER BY conversation_id, user_id
            """
        ),
        {"cids": list(conversation_ids)},
    )
    return list(result)


async def member_user_ids(conn: AsyncConnection, conversation_id: int) -> list[int]:
    result = await conn.execute(
        text("SELECT user_id FROM conversation_member WHERE conversation_id = :cid ORDER BY user_id"),
        {"cid": conversation_id},
    )
    return [row.user_id for row in result]
