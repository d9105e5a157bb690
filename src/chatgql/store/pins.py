"""Pinned messages (migration 0017_pins): a conversation's pins, who made each, when, until when.

A pin is live while its message is not deleted and its expires_at (if any) is after `now`, the
time the caller passes (services/pins.py: the API's clock). The writes run inside the caller's
transaction, under the conversation's lock (conversations.lock_for_member_txn), as every change
to a message does.
"""

from __future__ import annotations

from datetime import datetime

from ..db import Connection, Row
from ..models import MESSAGE_FIELDS
from .messages import visible_to

_PIN_COLUMNS = "p.pinned_by, p.pinned_at, p.expires_at"
_LIVE = "(p.expires_at IS NULL OR p.expires_at > $2)"


async def prune_txn(conn: Connection, conversation_id: int, now: datetime) -> None:
    """Remove the conversation's pins that are no longer live: expired by now, or of a deleted message."""
    await conn.execute(
        f"""
        DELETE FROM pinned_message p
         WHERE p.conversation_id = $1
           AND (NOT {_LIVE} OR EXISTS (
                SELECT 1 FROM message m
                 WHERE m.conversation_id = $1 AND m.seq = p.seq AND m.deleted_at IS NOT NULL))
        """,
        conversation_id,
        now,
    )


async def pin_of_txn(conn: Connection, conversation_id: int, seq: int) -> Row | None:
    """The message's pin (pinned_by, pinned_at, expires_at), None when it has none."""
    return await conn.fetchrow(
        "SELECT pinned_by, pinned_at, expires_at FROM pinned_message WHERE conversation_id = $1 AND seq = $2",
        conversation_id,
        seq,
    )


async def put_txn(
    conn: Connection, conversation_id: int, seq: int, user_id: str, now: datetime, expires_at: datetime | None
) -> Row:
    """Pin the message, or replace its pin (by user_id, at now, until expires_at); returns the pin."""
    return await conn.fetchrow(
        """
        INSERT INTO pinned_message (conversation_id, seq, pinned_by, pinned_at, expires_at) VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (conversation_id, seq) DO UPDATE
           SET pinned_by = excluded.pinned_by, pinned_at = excluded.pinned_at, expires_at = excluded.expires_at
        RETURNING pinned_by, pinned_at, expires_at
        """,
        conversation_id,
        seq,
        user_id,
        now,
        expires_at,
    )


async def count_txn(conn: Connection, conversation_id: int) -> int:
    """The conversation's pins (after prune_txn: the live ones)."""
    return await conn.fetchval("SELECT count(*) FROM pinned_message WHERE conversation_id = $1", conversation_id)


async def unpin_txn(conn: Connection, conversation_id: int, seq: int) -> None:
    """Remove the message's pin."""
    await conn.execute("DELETE FROM pinned_message WHERE conversation_id = $1 AND seq = $2", conversation_id, seq)


async def pinned(conn: Connection, conversation_id: int, now: datetime, viewer_id: str) -> list[Row]:
    """The live pins with their messages, newest pin first: rows (pinned_by, pinned_at, expires_at,
    message columns...), of the messages viewer_id may read (messages.visible_to). One range of the primary
    key, at most the cap's rows and those not pruned yet."""
    columns = ", ".join(f"m.{name}" for name in MESSAGE_FIELDS)
    return await conn.fetch(
        f"""
        SELECT {_PIN_COLUMNS}, {columns}
          FROM pinned_message p
          JOIN message m ON m.conversation_id = $1 AND m.seq = p.seq
         WHERE p.conversation_id = $1 AND {_LIVE} AND m.deleted_at IS NULL AND {visible_to("$3", "$1", "p.seq")}
         ORDER BY p.pinned_at DESC, p.seq DESC
        """,
        conversation_id,
        now,
        viewer_id,
    )
