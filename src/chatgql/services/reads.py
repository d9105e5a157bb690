"""Marking messages read: the monotonic, clamped watermark."""

from __future__ import annotations

from dataclasses import replace

from ..db import Database
from ..events.types import ReadUpdated
from .checks import check_seq
from .membership import raise_own_read
from .read_coalescing import MarkReadResult, ReadCoalescer, mark_read_alone


async def do_mark_read(
    database: Database, viewer_id: str, conversation_id: int, seq: int, *, coalescer: ReadCoalescer | None = None
) -> MarkReadResult:
    """Raise the viewer's watermark to min(seq, lastSeq); never lower it.

    The update and its read.updated event are one statement, so one
    transaction; the event is written only when the watermark moved.
    With a coalescer, the call joins the process's next flush (many keys,
    one statement; read_coalescing.py says what `advanced` then means); it is
    answered after that flush committed.
    """
    check_seq(seq)
    event = ReadUpdated(conversation_id=conversation_id, user_id=viewer_id).payload()
    if coalescer is not None:
        result = await coalescer.mark_read(viewer_id, conversation_id, seq, event)
    else:
        result = await mark_read_alone(database, viewer_id, conversation_id, seq, event)
    if result.own_read is not None and result.own_read < min(seq, result.last_seq):
        # A markUnread rewind and a seq below the watermark, or private receipts: only the viewer's
        # own read position rises (a second statement, only then). The answer is the state after it,
        # its own position and the deleted messages above that position together.
        own = await raise_own_read(database, viewer_id, conversation_id, seq)
        if own is not None:
            return replace(result, own_read=own["own_read"], unread_deleted=own["unread_deleted"])
    return result
