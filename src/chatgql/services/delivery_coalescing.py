"""Coalesced markDelivered: the markDelivered(Many) calls of one process, merged per
(conversation, user) and written together, as read_coalescing.py does for markRead.

A call (one viewer, one or more conversations) is queued; services/coalescing.py's loop flushes
what is queued, as it does for markRead. A flush asks, per (conversation, user), the largest seq
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
from dataclasses import dataclass
from typing import Any

from ..db import Connection, Database, Row
from ..errors import conversation_not_found
from ..events.types import DELIVERY_KEYS
from ..store import delivery
from .coalescing import Coalescer

Key = tuple[int, str]  # (conversation_id, user_id)


@dataclass(frozen=True, slots=True)
class DeliveredResult:
    conversation_id: int
    delivered_seq: int  # GREATEST(delivered, read) after the call
    last_seq: int
    advanced: bool


@dataclass(slots=True)
class _Call:
    viewer_id: str
    items: list[tuple[int, int]]  # (conversation_id, seq), conversation ids distinct
    events: list[dict]  # DeliveryUpdated payloads, one per item
    future: asyncio.Future[list[DeliveredResult]]


@dataclass(slots=True)
class _Written:
    live: list[_Call]  # the batch's calls whose viewer is a member of all their conversations
    keys: int  # distinct (conversation, user) the flush wrote
    rows: dict[Key, Row]  # the write's rows by key


class DeliveryCoalescer(Coalescer[list[_Call], _Written]):
    """markDelivered for one process, batched (services/coalescing.py runs the flushes)."""

    task_name = "mark-delivered-coalescer"

    def __init__(self, database: Database, *, whole_up_to: int, **options: Any) -> None:
        super().__init__(database, **options)
        self._whole_up_to = whole_up_to
        self._pending: list[_Call] = []

    async def mark_delivered(
        self, viewer_id: str, items: list[tuple[int, int]], events: list[dict]
    ) -> list[DeliveredResult]:
        """One result per item, after the flush this call joins committed."""
        future: asyncio.Future[list[DeliveredResult]] = self._new_future()
        self._pending.append(_Call(viewer_id, items, events, future))
        self._wake.set()
        return await future

    def _queued(self) -> bool:
        return bool(self._pending)

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

    def _drop_queued(self) -> list[asyncio.Future[Any]]:
        futures = [call.future for call in self._pending]
        self._pending.clear()
        return futures

    def _futures(self, batch: list[_Call]) -> list[asyncio.Future[Any]]:
        return [call.future for call in batch]

    async def _write(self, conn: Connection, batch: list[_Call]) -> _Written:
        asked = {(cid, call.viewer_id) for call in batch for cid, _ in call.items}
        members = await delivery.members_of(conn, [k[0] for k in asked], [k[1] for k in asked])
        live: list[_Call] = []
        for call in batch:
            missing = next((cid for cid, _ in call.items if (cid, call.viewer_id) not in members), None)
            if missing is None:
                live.append(call)
            elif not call.future.done():
                call.future.set_exception(conversation_not_found(missing))
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
                DELIVERY_KEYS,
            )
            if any(row["moved"] and row["member_count"] <= self._whole_up_to for row in rows):
                self._database.events_written(conn)  # one wake-up per flush
        return _Written(live, len(merged), {(row["conversation_id"], row["user_id"]): row for row in rows})

    def _counts(self, batch: list[_Call], written: _Written) -> tuple[int, int]:
        return written.keys, len(written.live)

    def _answer(self, batch: list[_Call], written: _Written) -> None:
        for call in written.live:
            if call.future.done():
                continue  # its caller gave up: its seqs still counted
            results = []
            for cid, seq in call.items:
                row = written.rows.get((cid, call.viewer_id))
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
