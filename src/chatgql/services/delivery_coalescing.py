"""Coalesced markDelivered: the markDelivered(Many) calls of one process, merged per
(conversation, user) and written together, as read_coalescing.py does for markRead.

A call (one viewer, one or more conversations) is queued; a background loop (owned by the app's
lifespan) flushes what is queued: at once when idle, and calls arriving while a flush is in
flight go together into the next one. A flush asks, per (conversation, user), the largest seq
of its calls: one membership check and one write statement (so one commit and one
delivery.updated event per key that moved) per flush, not per call.

Every caller is answered only after the flush committed, with the watermark the flush left (or
found), never a value that is not durable. A call naming a conversation the viewer is not a
member of gets NOT_FOUND and nothing of it is written (the flush checks membership first; a
member who leaves between that check and the write is the one case where the call's other
conversations are written and it still gets NOT_FOUND). A flush that fails fails all its callers.

`advanced`, per caller and conversation: as in read_coalescing.py, true iff the watermark moved
and this call's seq, clamped to lastSeq, is above the watermark as it was before the flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..db import Database
from ..errors import conversation_not_found, unavailable
from ..events.types import DeliveryUpdated
from ..store import delivery

log = logging.getLogger(__name__)

Key = tuple[int, int]  # (conversation_id, user_id)


@dataclass(frozen=True, slots=True)
class DeliveredResult:
    conversation_id: int
    delivered_seq: int  # GREATEST(delivered, read) after the call
    last_seq: int
    advanced: bool


@dataclass(slots=True)
class _Call:
    viewer_id: int
    items: list[tuple[int, int]]  # (conversation_id, seq), conversation ids distinct
    events: list[dict]  # DeliveryUpdated payloads, one per item
    future: asyncio.Future[list[DeliveredResult]]


class DeliveryCoalescer:
    """markDelivered for one process, batched. `start()` runs it; `close()` drains and stops it."""

    def __init__(
        self,
        database: Database,
        *,
        whole_up_to: int,
        window_seconds: float = 0.0,
        max_keys: int = 500,
        on_flush: Callable[[int, int], None] | None = None,
    ) -> None:
        self._database = database
        self._whole_up_to = whole_up_to
        self._window = window_seconds
        self._max_keys = max_keys
        self._on_flush = on_flush  # (keys, calls) of every flush that committed
        self._pending: list[_Call] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="mark-delivered-coalescer")

    async def close(self, timeout: float = 10.0) -> None:
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

    async def mark_delivered(
        self, viewer_id: int, items: list[tuple[int, int]], events: list[dict]
    ) -> list[DeliveredResult]:
        """One result per item, after the flush this call joins committed."""
        if self._closing:
            raise unavailable("the server is shutting down")
        future: asyncio.Future[list[DeliveredResult]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Call(viewer_id, items, events, future))
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
                    self._wake.set()
                await self._flush(batch)
        finally:
            for call in self._pending:
                call.future.cancel()
            self._pending.clear()

    def _take(self) -> list[_Call]:
        """Whole calls, up to max_keys distinct keys (at least one call)."""
        keys: set[Key] = set()
        taken = 0
        for call in self._pending:
            new = {(cid, call.viewer_id) for cid, _ in call.items} - keys
            if taken and len(keys) + len(new) > self._max_keys:
                break
            keys |= new
            taken += 1
        batch, self._pending = self._pending[:taken], self._pending[taken:]
        return batch

    async def _flush(self, batch: list[_Call]) -> None:
        try:
            async with self._database.connection() as conn:
                asked = {(cid, call.viewer_id) for call in batch for cid, _ in call.items}
                members = await delivery.members_of(conn, [k[0] for k in asked], [k[1] for k in asked])
                live: list[_Call] = []
                for call in batch:
                    missing = next((cid for cid, _ in call.items if (cid, call.viewer_id) not in members), None)
                    if missing is not None:
                        if not call.future.done():
                            call.future.set_exception(conversation_not_found(missing))
                    else:
                        live.append(call)
                merged: dict[Key, tuple[int, dict]] = {}
                for call in live:
                    for (cid, seq), event in zip(call.items, call.events, strict=True):
                        key = (cid, call.viewer_id)
                        if key not in merged or merged[key][0] < seq:
                            merged[key] = (seq, event)
                rows = []
                if merged:
                    keys = list(merged)
                    rows = await delivery.advance_delivered_many(
                        conn,
                        [k[0] for k in keys],
                        [k[1] for k in keys],
                        [merged[k][0] for k in keys],
                        [merged[k][1] for k in keys],
                        self._whole_up_to,
                        DeliveryUpdated.store_keys(),
                    )
                    if any(row["moved"] and row["member_count"] <= self._whole_up_to for row in rows):
                        self._database.events_written(conn)  # one wake-up per flush
        except Exception as error:
            for call in batch:
                if not call.future.done():
                    call.future.set_exception(error)
            return
        except BaseException:
            for call in batch:
                call.future.cancel()
            raise
        try:
            if self._on_flush is not None:
                self._on_flush(len(merged), len(live))
        except Exception:
            log.exception("after a markDelivered flush")
        found = {(row["conversation_id"], row["user_id"]): row for row in rows}
        for call in live:
            if call.future.done():
                continue  # its caller gave up: its seqs still counted
            results = []
            for cid, seq in call.items:
                row = found.get((cid, call.viewer_id))
                if row is None:  # left between the membership check and the write
                    call.future.set_exception(conversation_not_found(cid))
                    break
                results.append(
                    DeliveredResult(
                        conversation_id=cid,
                        delivered_seq=row["delivered_seq"],
                        last_seq=max(row["last_seq"], row["delivered_seq"]),
                        advanced=row["moved"] and min(seq, row["last_seq"]) > row["before"],
                    )
                )
            else:
                call.future.set_result(results)
