"""Marking messages read: the monotonic, clamped watermark."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import conversation_not_found
from ..events import types as events
from ..store import outbox, reads
from .checks import check_seq


@dataclass(frozen=True, slots=True)
class MarkReadResult:
    conversation_id: int
    last_read_seq: int
    last_seq: int
    advanced: bool


async def do_mark_read(engine: AsyncEngine, viewer_id: int, conversation_id: int, seq: int) -> MarkReadResult:
    """Raise the viewer's watermark to min(seq, lastSeq); never lower it.

    A read.updated event is written, in the same transaction, only when it moved.
    """
    check_seq(seq)
    async with engine.begin() as conn:
        moved = await reads.advance_watermark(conn, conversation_id, viewer_id, seq)
        if moved is not None:
            await outbox.append(
                conn,
                [
                    events.read_updated(
                        conversation_id=conversation_id, user_id=viewer_id, last_read_seq=moved.last_read_seq
                    )
                ],
            )
            return MarkReadResult(conversation_id, moved.last_read_seq, moved.last_seq, advanced=True)
        current = await reads.watermark(conn, conversation_id, viewer_id)
        if current is None:
            raise conversation_not_found(conversation_id)
        return MarkReadResult(conversation_id, current.last_read_seq, current.last_seq, advanced=False)
