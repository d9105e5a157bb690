"""Read state: one watermark per member."""

from __future__ import annotations

from ..db import Connection, Row


async def advance_watermark(conn: Connection, conversation_id: int, user_id: int, seq: int, event: dict) -> Row | None:
    """The monotonic, clamped update of DESIGN.md, and its read.updated outbox
    row, in one statement (so one transaction even in autocommit).

    Returns (last_read_seq, last_seq) when the watermark moved forward; None
    when it did not (a seq at or below it, nothing newer, or not a member),
    and then no event is written. Concurrent calls serialise on the member
    row and re-check the condition, so the watermark only takes the maximum.
    event: the read.updated payload; lastReadSeq is filled in here.
    """
    return await conn.fetchrow(
        """
        WITH moved AS (
            UPDATE conversation_member m SET last_read_seq = LEAST($3::bigint, c.last_seq)
              FROM conversation c
             WHERE c.id = m.conversation_id AND m.conversation_id = $1::bigint AND m.user_id = $2::bigint
               AND m.last_read_seq < LEAST($3::bigint, c.last_seq)
            RETURNING m.last_read_seq, c.last_seq
        ), event AS (
            INSERT INTO outbox (msg_key, payload)
            SELECT ($1::bigint)::text, $4::jsonb || jsonb_build_object('lastReadSeq', moved.last_read_seq)
              FROM moved
        )
        SELECT last_read_seq, last_seq FROM moved
        """,
        conversation_id,
        user_id,
        seq,
        event,
    )


async def watermark(conn: Connection, conversation_id: int, user_id: int) -> Row | None:
    """(last_read_seq, last_seq) for a member; None when user_id is not a member."""
    return await conn.fetchrow(
        """
        SELECT m.last_read_seq, c.last_seq
          FROM conversation_member m
          JOIN conversation c ON c.id = m.conversation_id
         WHERE m.conversation_id = $1 AND m.user_id = $2
        """,
        conversation_id,
        user_id,
    )
