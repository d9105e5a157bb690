"""Scheduled messages (migration 0025_scheduled_messages): PENDING until sent (SENT, seq), refused
(FAILED, failure) or canceled (CANCELED). Times are parameters (the caller's clock), never now()."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from ..db import Connection, Row

COLUMNS = "conversation_id, id, sender_id, client_msg_id, body, send_at, created_at, state, seq, failure, done_at"
PENDING, SENT, CANCELED, FAILED = "PENDING", "SENT", "CANCELED", "FAILED"


async def claim_due_txn(conn: Connection, now: datetime, limit: int) -> list[Row]:
    """Up to limit PENDING rows due by now, earliest first, locked for this transaction; rows another
    transaction holds are skipped (another scheduler is firing them)."""
    return await conn.fetch(
        f"""
        SELECT {COLUMNS} FROM scheduled_message
         WHERE state = 'PENDING' AND send_at <= $1
         ORDER BY send_at
         LIMIT $2
           FOR UPDATE SKIP LOCKED
        """,
        now,
        limit,
    )


async def next_due(conn: Connection) -> datetime | None:
    """When the earliest PENDING row is due (None: none is)."""
    return await conn.fetchval("SELECT min(send_at) FROM scheduled_message WHERE state = 'PENDING'")


async def finish_txn(
    conn: Connection, conversation_id: int, id_: int, state: str, now: datetime, seq: int | None, failure: str | None
) -> None:
    """Mark a claimed row SENT (with the seq it took) or FAILED (with why)."""
    await conn.execute(
        "UPDATE scheduled_message SET state = $3, done_at = $4, seq = $5, failure = $6"
        " WHERE conversation_id = $1 AND id = $2",
        conversation_id,
        id_,
        state,
        now,
        seq,
        failure,
    )


async def insert_txn(
    conn: Connection,
    conversation_id: int,
    sender_id: str,
    client_msg_id: UUID,
    body: str,
    send_at: datetime,
    now: datetime,
) -> Row | None:
    """A new PENDING row; None when the conversation holds a scheduled message with this clientMsgId already."""
    return await conn.fetchrow(
        f"""
        INSERT INTO scheduled_message (conversation_id, sender_id, client_msg_id, body, send_at, created_at)
        VALUES ($1, $2, $3, $4, $5, $6)
        ON CONFLICT (conversation_id, client_msg_id) DO NOTHING
        RETURNING {COLUMNS}
        """,
        conversation_id,
        sender_id,
        client_msg_id,
        body,
        send_at,
        now,
    )


async def by_client_msg_id(conn: Connection, conversation_id: int, client_msg_id: UUID) -> Row | None:
    return await conn.fetchrow(
        f"SELECT {COLUMNS} FROM scheduled_message WHERE conversation_id = $1 AND client_msg_id = $2",
        conversation_id,
        client_msg_id,
    )


async def message_with_client_msg_id(conn: Connection, conversation_id: int, client_msg_id: UUID) -> bool:
    """Whether the conversation holds a sent message with this clientMsgId."""
    return await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM message WHERE conversation_id = $1 AND client_msg_id = $2)",
        conversation_id,
        client_msg_id,
    )


async def lock_txn(conn: Connection, conversation_id: int, id_: int, sender_id: str) -> Row | None:
    """The sender's scheduled message, locked (waits while a scheduler fires it); None when it is not theirs."""
    return await conn.fetchrow(
        f"SELECT {COLUMNS} FROM scheduled_message WHERE conversation_id = $1 AND id = $2 AND sender_id = $3 FOR UPDATE",
        conversation_id,
        id_,
        sender_id,
    )


async def update_txn(
    conn: Connection, conversation_id: int, id_: int, body: str, send_at: datetime, state: str, now: datetime | None
) -> Row:
    return await conn.fetchrow(
        f"""
        UPDATE scheduled_message SET body = $3, send_at = $4, state = $5, done_at = $6
         WHERE conversation_id = $1 AND id = $2
        RETURNING {COLUMNS}
        """,
        conversation_id,
        id_,
        body,
        send_at,
        state,
        now,
    )


async def pending_count(conn: Connection, conversation_id: int, sender_id: str) -> int:
    return await conn.fetchval(
        "SELECT count(*) FROM scheduled_message WHERE conversation_id = $1 AND sender_id = $2 AND state = 'PENDING'",
        conversation_id,
        sender_id,
    )


async def of_sender(
    conn: Connection, sender_id: str, conversation_id: int | None, states: Sequence[str], limit: int
) -> list[Row]:
    """The sender's scheduled messages in these states (of one conversation, or all), soonest first."""
    return await conn.fetch(
        f"""
        SELECT {COLUMNS} FROM scheduled_message
         WHERE sender_id = $1 AND ($2::bigint IS NULL OR conversation_id = $2) AND state = ANY($3::text[])
         ORDER BY send_at, conversation_id, id
         LIMIT $4
        """,
        sender_id,
        conversation_id,
        list(states),
        limit,
    )


async def by_ids(conn: Connection, keys: Sequence[tuple[int, int]]) -> list[Row]:
    """Scheduled messages by (conversation_id, id)."""
    return await conn.fetch(
        f"""
        SELECT s.* FROM unnest($1::bigint[], $2::bigint[]) AS k(cid, id)
        CROSS JOIN LATERAL (
            SELECT {COLUMNS} FROM scheduled_message WHERE conversation_id = k.cid AND id = k.id
        ) s
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
    )
