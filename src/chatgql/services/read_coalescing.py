"""How a markRead reaches the database: alone (mark_read_alone), or coalesced with the other
markRead calls of the process (ReadCoalescer). services/reads.py builds the read.updated
payload and picks one, as services/messages.py does with groupcommit.py.

Read-storm coalescing: the markRead calls of one process, merged per (conversation, user)
and written together, one statement and one commit per flush.

A call is queued under its key; a background loop (owned by the app's lifespan) flushes what
is queued. Nothing waits on a timer when the process is idle: the first call is flushed at
once, and calls that arrive while a flush is in flight go together into the next one (at most
`max_keys` keys a flush; the rest wait for the one after). `window_seconds` > 0 adds a short
wait before each flush, so that more calls share it (fewer commits, more latency).

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
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice

from ..db import Database, Row
from ..errors import conversation_not_found, unavailable
from ..events.types import ReadUpdated
from ..store import reads
from .checks import check_seq

READ_KEYS = ReadUpdated.store_keys()  # what the watermark statements fill in (the SQL names no event key)

log = logging.getLogger(__name__)

Key = tuple[int, int]  # (conversation_id, user_id)


@dataclass(frozen=True, slots=True)
class MarkReadResult:
    conversation_id: int
    last_read_seq: int
    last_seq: int
    advanced: bool
    unread_deleted: int = 0  # deleted messages above last_read_seq: unread = last_seq - last_read_seq - this
    # The member's own read position: below last_read_seq while a markUnread rewind lasts
    # (services/reads.py raises it); None: equal to last_read_seq.
    own_read: int | None = None


async def mark_read_alone(
    database: Database, viewer_id: int, conversation_id: int, seq: int, event: dict
) -> MarkReadResult:
    """One markRead, one statement: the watermark update and its read.updated event (`event`,
    ReadUpdated's payload) are one transaction; the event is written only when the watermark moved."""
    async with database.connection() as conn:
        moved = await reads.advance_watermark(conn, conversation_id, viewer_id, seq, event, READ_KEYS)
        if moved is not None:
            database.events_written(conn)  # the statement committed its read.updated: wake the relay
            return MarkReadResult(
                conversation_id, moved.last_read_seq, moved.last_seq, advanced=True, unread_deleted=moved.unread_deleted
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


class ReadCoalescer:
    """markRead for one process, batched. Start `run()` as a task; `close()` drains and stops it."""

    def __init__(
        self,
        database: Database,
        *,
        window_seconds: float = 0.0,
        max_keys: int = 500,
        on_flush: Callable[[int, int], None] | None = None,
    ) -> None:
        self._database = database
        self._window = window_seconds
        self._max_keys = max_keys
        self._on_flush = on_flush  # (keys, calls) of every flush that committed
        self._pending: dict[Key, list[_Call]] = {}
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="mark-read-coalescer")

    async def close(self, timeout: float = 10.0) -> None:
        """Flush what is queued, then stop (cancelled after timeout: unflushed callers are cancelled)."""
        self._closing = True
        self._wake.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def mark_read(self, viewer_id: int, conversation_id: int, seq: int, event: dict) -> MarkReadResult:
        """do_mark_read's answer, from the flush this call joins (see the module docstring).
        event: ReadUpdated's payload for (conversation_id, viewer_id)."""
        check_seq(seq)
        if self._closing:
            raise unavailable("the server is shutting down")
        future: asyncio.Future[MarkReadResult] = asyncio.get_running_loop().create_future()
        self._pending.setdefault((conversation_id, viewer_id), []).append(_Call(seq, event, future))
        self._wake.set()
        return await future

    async def run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                if self._window > 0 and not self._closing:
                    await asyncio.sleep(self._window)
                self._wake.clear()
                if not self._pending:
                    if self._closing:
                        return
                    continue
                batch = self._take()
                if self._pending:
                    self._wake.set()  # more than one flush's worth: the next goes right after
                await self._flush(batch)
        finally:
            for calls in self._pending.values():  # cancelled: nothing will flush these
                for call in calls:
                    call.future.cancel()
            self._pending.clear()

    def _take(self) -> dict[Key, list[_Call]]:
        if len(self._pending) <= self._max_keys:
            batch, self._pending = self._pending, {}
            return batch
        return {key: self._pending.pop(key) for key in list(islice(self._pending, self._max_keys))}

    async def _flush(self, batch: dict[Key, list[_Call]]) -> None:
        keys = list(batch)
        seqs = [max(call.seq for call in calls) for calls in batch.values()]
        payloads = [calls[0].event for calls in batch.values()]
        try:
            async with self._database.connection() as conn:
                rows = await reads.advance_watermarks(
                    conn, [cid for cid, _ in keys], [uid for _, uid in keys], seqs, payloads, READ_KEYS
                )
                if any(row.moved for row in rows):  # one wake-up per flush, not one per markRead
                    self._database.events_written(conn)
        except Exception as error:
            for calls in batch.values():
                for call in calls:
                    if not call.future.done():
                        call.future.set_exception(error)
            return
        except BaseException:  # cancelled mid-flush: whether it committed is unknown
            for calls in batch.values():
                for call in calls:
                    call.future.cancel()
            raise
        try:
            if self._on_flush is not None:
                self._on_flush(len(keys), sum(len(calls) for calls in batch.values()))
        except Exception:  # metrics: never worth a caller's answer
            log.exception("after a markRead flush")
        found = {(row.conversation_id, row.user_id): row for row in rows}
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
    """One caller's result from its key's flush row (store.reads.advance_watermarks)."""
    return MarkReadResult(
        conversation_id=row.conversation_id,
        last_read_seq=row.last_read_seq,
        # lastSeq as the flush saw it; a watermark read after the snapshot (locked) may be newer
        last_seq=max(row.last_seq, row.last_read_seq),
        advanced=row.moved and min(seq, row.last_seq) > row.before,
        unread_deleted=row.unread_deleted,
        own_read=row.own_read,
    )
