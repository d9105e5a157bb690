"""Disappearing messages (migration 0026_disappearing_messages): a conversation's time to live, and
when each message sent while it was on expires (message_expiry, written by chat_send)."""

from __future__ import annotations

from datetime import datetime

from ..db import Connection, Row


async def set_ttl_txn(conn: Connection, conversation_id: int, seconds: int) -> bool:
    """Set the conversation's time to live (0: off); False when it was that already."""
    changed = await conn.fetchval(
        "UPDATE conversation SET message_ttl_seconds = $2 WHERE id = $1 AND message_ttl_seconds <> $2 RETURNING true",
        conversation_id,
        seconds,
    )
    return bool(changed)


async def claim_due_txn(conn: Connection, now: datetime, limit: int) -> list[Row]:
    """Up to limit expiries due by now, earliest first, locked for this transaction (those another
    transaction holds skipped): rows (conversation_id, seq, expires_at)."""
    return await conn.fetch(
        """
        SELECT conversation_id, seq, expires_at FROM message_expiry
         WHERE expires_at <= $1
         ORDER BY expires_at
         LIMIT $2
           FOR UPDATE SKIP LOCKED
        """,
        now,
        limit,
    )


async def next_due(conn: Connection) -> datetime | None:
    return await conn.fetchval("SELECT min(expires_at) FROM message_expiry")


async def done_txn(conn: Connection, conversation_id: int, seq: int) -> None:
    await conn.execute("DELETE FROM message_expiry WHERE conversation_id = $1 AND seq = $2", conversation_id, seq)
