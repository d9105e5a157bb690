"""Marking messages read: the monotonic, clamped watermark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..db import Database
from ..errors import conversation_not_found
from ..events.types import ReadUpdated
from ..store import reads
from .checks import check_seq

if TYPE_CHECKING:
    from .read_coalescing import ReadCoalescer


@dataclass(frozen=True, slots=True)
class MarkReadResult:
    conversation_id: int
    last_read_seq: int
    last_seq: int
    advanced: bool


async def do_mark_read(
    database: Database, viewer_id: int, conversation_id: int, seq: int, *, coalescer: ReadCoalescer | None = None
) -> MarkReadResult:
    """Raise the viewer's watermark to min(seq, lastSeq); never lower it.

    The update and its read.updated event are one statement, so one
    transaction; the event is written only when the watermark moved.
    With a coalescer, the call joins the process's next flush (many keys,
    one statement; read_coalescing.py says what `advanced` then means); it is
    answered after that flush committed.
    """
    check_seq(seq)
    if coalescer is not None:
        return await coalescer.mark_read(viewer_id, conversation_id, seq)
    event = ReadUpdated(conversation_id=conversation_id, user_id=viewer_id).payload()
    async with database.connection() as conn:
        moved = await reads.advance_watermark(conn, conversation_id, viewer_id, seq, event)
        if moved is not None:
            database.events_written(conn)  # the statement committed its read.updated: wake the relay
            return MarkReadResult(conversation_id, moved.last_read_seq, moved.last_seq, advanced=True)
        # Nothing moved: read the watermark as it is now (it may be higher than
        # the update's snapshot showed, if another device just raised it).
        current = await reads.watermark(conn, conversation_id, viewer_id)
    if current is None:
        raise conversation_not_found(conversation_id)
    return MarkReadResult(conversation_id, current.last_read_seq, current.last_seq, advanced=False)
