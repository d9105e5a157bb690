"""The before-send hook's verdicts on clientMsgIds it rejected or rewrote (send_verdict, 0020_send_verdicts)."""

from __future__ import annotations

from uuid import UUID

from ..db import Connection, Row


async def prior(conn: Connection, conversation_id: int, client_msg_id: UUID, sender_id: str) -> Row:
    """What a send of client_msg_id meets: the verdict (verdict, sender_id, body_sha256, reason: null
    without one), the stored message's seq (null: none) and whether sender_id is a member."""
    return await conn.fetchrow(
        """
        SELECT v.verdict, v.sender_id, v.body_sha256, v.reason,
               (SELECT m.seq FROM message m
                 WHERE m.conversation_id = $1 AND m.client_msg_id = $2) AS seq,
               EXISTS (SELECT 1 FROM conversation_member cm
                        WHERE cm.conversation_id = $1 AND cm.user_id = $3) AS member
          FROM (SELECT 1) one
          LEFT JOIN send_verdict v ON v.conversation_id = $1 AND v.client_msg_id = $2
        """,
        conversation_id,
        client_msg_id,
        sender_id,
    )


async def record_txn(
    conn: Connection,
    conversation_id: int,
    client_msg_id: UUID,
    sender_id: str,
    body_sha256: bytes,
    verdict: str,
    reason: str | None,
) -> bool:
    """Keep the verdict; False when one was already kept for client_msg_id (it stands)."""
    return bool(
        await conn.fetchval(
            """
            INSERT INTO send_verdict (conversation_id, client_msg_id, sender_id, body_sha256, verdict, reason)
            VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (conversation_id, client_msg_id) DO NOTHING
            RETURNING true
            """,
            conversation_id,
            client_msg_id,
            sender_id,
            body_sha256,
            verdict,
            reason,
        )
    )
