"""Read state: one watermark per member."""

from __future__ import annotations

import orjson
from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncConnection


async def advance_watermark(
    conn: AsyncConnection, conversation_id: int, user_id: int, seq: int, event: dict
) -> Row | None:
    """The monotonic, clamped update of DESIGN.md, and its read.updated outbox
    row, in one statement (so one transaction even in autocommit).

    Returns (last_read_seq, last_seq) when the watermark moved forward; None
    when it did not (a seq at or below it, nothing newer, or not a member),
    and then no event is written. Concurrent calls serialise on the member
    row and re-check the condition, so the watermark only takes the maximum.
    event: the read.updated payload; lastReadSeq is filled in here.
    """
    result = await conn.execute(
        text(
            """
            WITH moved AS (
                UPDATE conversation_member m SET last_read_seq = LEAST(:seq, c.last_seq)
                  FROM conversation c
                 WHERE c.id = m.conversation_id AND m.conversation_id = :cid AND m.user_id = :uid
                   AND m.last_read_seq < LEAST(:seq, c.last_seq)
                RETURNING m.last_read_seq, c.last_seq
            ), event AS (
                INSERT INTO outbox (msg_key, payload)
                SELECT CAST(:cid AS text),
                       CAST(:event AS jsonb) || jsonb_build_object('lastReadSeq', moved.last_read_seq)
                  FROM moved
            )
            SELECT last_read_seq, last_seq FROM moved
            """
        ),
        {"cid": conversation_id, "uid": user_id, "seq": seq, "event": orjson.dumps(event).decode()},
    )
    return result.first()


async def watermark(conn: AsyncConnection, conversation_id: int, user_id: int) -> Row | None:
    """(last_read_seq, last_seq) for a member; None when user_id is not a member."""
    result = await conn.execute(
        text(
            """
            SELECT m.last_read_seq, c.last_seq
              FROM conversation_member m
              JOIN conversation c ON c.id = m.conversation_id
             WHERE m.conversation_id = :cid AND m.user_id = :uid
            """
        ),
        {"cid": conversation_id, "uid": user_id},
    )
    return result.first()
