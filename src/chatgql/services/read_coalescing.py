"""Read-storm coalescing: the markRead calls of one process, merged per (conversation, user)
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

from asyncpg.exceptions import DeadlockDetectedError

from ..db import Database, Row
from ..errors import conversation_not_found
from ..events import types as events
from ..store import reads
from .checks import check_seq
from .reads import MarkReadResult

log = logging.getLogger(__name__)

_DEADLOCK_TRIES = 3  # a flush PostgreSQL chose as a deadlock's victim is run again, up to this many times in all

Key = tuple[int, int]  # (conversation_id, user_id)


@dataclass(slots=True)
class _Call:
    seq: int
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
        on_events: Callable[[], None] | None = None,
    ) -> None:
        self._database = database
        self._window = window_seconds
        self._max_keys = max_keys
        self._on_flush = on_flush  # (keys, calls) of every flush that committed
        self._on_events = on_events  # after a flush that wrote read.updated rows (wakes the relay)
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

    async def mark_read(self, viewer_id: int, conversation_id: int, seq: int) -> MarkReadResult:
        """do_mark_read's answer, from the flush this call joins (see the module docstring)."""
        check_seq(seq)
        if self._closing:
            raise RuntimeError("the server is shutting down")
        future: asyncio.Future[MarkReadResult] = asyncio.get_running_loop().create_future()
        self._pending.setdefault((conversation_id, viewer_id), []).append(_Call(seq, future))
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
        payloads = [events.read_updated(conversation_id=cid, user_id=uid)[1] for cid, uid in keys]
        try:
            for attempt in range(_DEADLOCK_TRIES):
                try:
                    async with self._database.connection() as conn:
                        rows = await reads.advance_watermarks(
                            conn, [cid for cid, _ in keys], [uid for _, uid in keys], seqs, payloads
                        )
                    break
                except DeadlockDetectedError:
                    # One statement, rolled back whole: try it again. A send batch
                    # (chat_send_batch) updates its senders' member rows in no set order,
                    # this statement in key order: under load the two can deadlock (found
                    # by tests/faults/test_soak.py: 13 markReads answered INTERNAL_SERVER_ERROR).
                    if attempt == _DEADLOCK_TRIES - 1:
                        raise
                    log.info("a markRead flush deadlocked with another transaction; trying again")
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
            if self._on_events is not None and any(row.moved for row in rows):
                self._on_events()
        except Exception:  # metrics and the relay's wake-up: never worth a caller's answer
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
    )
