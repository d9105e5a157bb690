"""Who is kept out of a group (conversation_ban, 0018_conversation_bans). A ban holds while its
`until` is null or later than the transaction's time; an expired row is as good as none."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from ..db import Connection, Row

BAN_COLUMNS = "b.conversation_id, b.user_id, b.until, b.banned_by, b.reason, b.created_at"
HOLDS = "(b.until IS NULL OR b.until > now())"


async def ban_txn(
    conn: Connection,
    conversation_id: int,
    user_id: str,
    until: datetime | None,
    banned_by: str | None,
    reason: str | None,
) -> Row:
    """Ban user_id (a ban already there, expired or not, is replaced); returns the ban."""
    return await conn.fetchrow(
        f"""
        INSERT INTO conversation_ban AS b (conversation_id, user_id, until, banned_by, reason)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (conversation_id, user_id) DO UPDATE
           SET until = excluded.until, banned_by = excluded.banned_by, reason = excluded.reason,
               created_at = now()
        RETURNING {BAN_COLUMNS}
        """,
        conversation_id,
        user_id,
        until,
        banned_by,
        reason,
    )


async def unban_txn(conn: Connection, conversation_id: int, user_id: str) -> bool:
    """Lift user_id's ban; False when no ban held (an expired one is removed all the same)."""
    held = await conn.fetchval(
        f"DELETE FROM conversation_ban b WHERE b.conversation_id = $1 AND b.user_id = $2 RETURNING {HOLDS}",
        conversation_id,
        user_id,
    )
    return bool(held)


async def banned_among(conn: Connection, conversation_id: int, user_ids: Iterable[str]) -> list[str]:
    """Those of user_ids a ban keeps out of the conversation now, in id order."""
    rows = await conn.fetch(
        f"""
        SELECT b.user_id FROM conversation_ban b
         WHERE b.conversation_id = $1 AND b.user_id = ANY($2::text[]) AND {HOLDS}
         ORDER BY b.user_id
        """,
        conversation_id,
        list(user_ids),
    )
    return [row["user_id"] for row in rows]


async def ban_page(conn: Connection, conversation_id: int, after_user_id: str, limit: int) -> list[Row]:
    """The bans that hold, user_id > after_user_id ascending, at most limit (a range of the key)."""
    return await conn.fetch(
        f"""
        SELECT {BAN_COLUMNS} FROM conversation_ban b
         WHERE b.conversation_id = $1 AND b.user_id > $2 AND {HOLDS}
         ORDER BY b.user_id LIMIT $3
        """,
        conversation_id,
        after_user_id,
        limit,
    )
