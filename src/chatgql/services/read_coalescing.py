"""How a markRead reaches the database: alone (mark_read_alone), or coalesced with the other
markRead calls of the process (ReadCoalescer). services/reads.py builds the read.updated
payload and picks one, as services/messages.py does with groupcommit.py.

Read-storm coalescing: the markRead calls of one process, merged per (conversation, user)
and written together, one statement and one commit per flush.

A call is queued under its key; services/coalescing.py's loop flushes what is queued (at once
when idle, calls arriving meanwhile together in the next flush, at most `max_keys` keys a flush).

Calls for the same key in one flush are merged: the flush asks for the largest seq. Every
caller is answered only after the flush committed, with the watermark the flush left (or found,
if it did not move), never with a value that is not durable. A flush that fails fails all of
its callers with its error, as a single markRead would have failed.

`advanced`, per caller: true iff this caller's seq, clamped to the conversation's lastSeq as the
flush saw it, is above the watermark as it was just before the flush raised it; that is, the
watermark moved and this call alone would have moved it (at least part of the way). Alone, a
call gets exactly what the uncoalesced markRead answers: true iff its statement moved the
watermark. Two devices asking 50 and 60 of a watermark at 40 in one flush both get true (and
lastReadSeq 60); asking 50 of a watermark at 55 gets false.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from itertools import islice
from typing import Any

from ..db import Connection, Database, Row
from ..errors import conversation_not_found
from ..events.types import READ_KEYS
from ..store import reads
from .checks import check_seq
from .coalescing import Coalescer

Key = tuple[int, str]  # (conversation_id, user_id)


@dataclass(frozen=True, slots=True)
class MarkReadResult:
    conversation_id: int
    last_read_seq: int
    last_seq: int
    advanced: bool
    unread_deleted: int = 0  # deleted messages above the own read position: unread = last_seq - own - this
    # The member's own read position: below last_read_seq while a markUnread rewind lasts, above it
    # with private receipts (services/reads.py raises it); None: equal to last_read_seq.
    own_read: int | None = None


async def mark_read_alone(
    database: Database, viewer_id: str, conversation_id: int, seq: int, event: dict
) -> MarkReadResult:
    """One markRead, one statement: the watermark update and its read.updated event (`event`,
    ReadUpdated's payload) are one transaction; the event is written only when the watermark moved."""
    async with database.connection() as conn:
        moved = await reads.advance_watermark(conn, conversation_id, viewer_id, seq, event, READ_KEYS)
        if moved is not None:
            database.events_written(conn)  # the statement committed its read.updated: wake the relay
            return MarkReadResult(
                conversation_id,
                moved.last_read_seq,
                moved.last_seq,
                advanced=True,
                unread_deleted=moved.unread_deleted,
                own_read=moved.own_read,
            )
        # Nothing moved: read the watermark as it is now (it may be higher than
        # the update's snapshot showed, if another device just raised it).
        current = await reads.watermark(conn, conversation_id, viewer_id)
    if current is None:
        raise conversation_not_found(conversation_id)
    return MarkReadResult(
        conversation_id,
        current.last_read_seq,
        current.last_seq,
        advanced=False,
        own_read=current.own_read,
        unread_deleted=current.unread_deleted,
    )


@dataclass(slots=True)
class _Call:
    seq: int
    event: dict  # ReadUpdated's payload for the call's key (the same for every call of the key)
    future: asyncio.Future[MarkReadResult]


_Batch = dict[Key, list[_Call]]


class ReadCoalescer(Coalescer[_Batch, list[Row]]):
    """markRead for one process, batched (services/coalescing.py runs the flushes)."""

    task_name = "mark-read-coalescer"

    def __init__(self, database: Database, **options: Any) -> None:
        super().__init__(database, **options)
        self._pending: _Batch = {}

    async def mark_read(self, viewer_id: str, conversation_id: int, seq: int, event: dict) -> MarkReadResult:
        """do_mark_read's answer, from the flush this call joins (see the module docstring).
        event: ReadUpdated's payload for (conversation_id, viewer_id)."""
        check_seq(seq)
        future: asyncio.Future[MarkReadResult] = self._new_future()
        self._pending.setdefault((conversation_id, viewer_id), []).append(_Call(seq, event, future))
        self._wake.set()
        return await future

    def _queued(self) -> bool:
        return bool(self._pending)

    def _take(self) -> _Batch:
        if len(self._pending) <= self._max_keys:
            batch, self._pending = self._pending, {}
            return batch
        return {key: self._pending.pop(key) for key in list(islice(self._pending, self._max_keys))}

    def _drop_queued(self) -> list[asyncio.Future[Any]]:
        futures = [call.future for calls in self._pending.values() for call in calls]
        self._pending.clear()
        return futures

    def _futures(self, batch: _Batch) -> list[asyncio.Future[Any]]:
        return [call.future for calls in batch.values() for call in calls]

    async def _write(self, conn: Connection, batch: _Batch) -> list[Row]:
        keys = list(batch)
        seqs = [max(call.seq for call in calls) for calls in batch.values()]
        payloads = [calls[0].event for calls in batch.values()]
        rows = await reads.advance_watermarks(
            conn, [cid for cid, _ in keys], [uid for _, uid in keys], seqs, payloads, READ_KEYS
        )
        if any(row["moved"] for row in rows):  # one wake-up per flush, not one per markRead
            self._database.events_written(conn)
        return rows

    def _counts(self, batch: _Batch, written: list[Row]) -> tuple[int, int]:
        return len(batch), sum(len(calls) for calls in batch.values())

    def _answer(self, batch: _Batch, written: list[Row]) -> None:
        found = {(row["conversation_id"], row["user_id"]): row for row in written}
        for key, calls in batch.items():
            row = found.get(key)
            for call in calls:
                if call.future.done():
                    continue  # its caller gave up (the request was cancelled): the seq still counted
                if row is None:
                    call.future.set_exception(conversation_not_found(key[0]))
                else:
                    call.future.set_result(answer(row, call.seq))


def answer(row: Row, seq: int) -> MarkReadResult:
    """One caller's result from its key's flush row (store.reads.advance_watermarks). Its columns
    by key: a Row's attribute access is a Python __getattr__ (eight per markRead)."""
    last_read_seq, last_seq = row["last_read_seq"], row["last_seq"]
    return MarkReadResult(
        conversation_id=row["conversation_id"],
        last_read_seq=last_read_seq,
        # lastSeq as the flush saw it; a watermark read after the snapshot (locked) may be newer
        last_seq=max(last_seq, last_read_seq),
        advanced=row["moved"] and min(seq, last_seq) > row["before"],
        unread_deleted=row["unread_deleted"],
        own_read=row["own_read"],
    )
