"""Group commit: sends to one hot conversation share a transaction.

Every send to a conversation locks its row until commit, so one conversation
stores one message per commit, whatever the number of senders. A
SendBatcher (one per API process) keeps, per conversation, the sends that
arrive while one is in flight:

- a send to an idle conversation goes alone, right away (chat_send, no timer);
- the sends that queued behind it go together, in arrival order, at most
  `max_batch` per transaction (chat_send_batch, migration 0006), batch after
  batch until none is waiting; then the conversation is idle again.

PostgreSQL still decides everything: the batch function takes the lock,
dedupes every clientMsgId under it and assigns the seqs. A caller is answered
with its own row only after the transaction that holds it committed; when the
transaction fails (connection lost, backend killed), every caller in it gets
that error, as a lone send would, and its retry is idempotent as ever.
Several API processes each batch what they hold; their batches queue on the
row lock like single sends do.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import NamedTuple
from uuid import UUID

from ..db import Connection, Database, Row
from ..errors import RETRY_AFTER_SECONDS, Unavailable
from ..events.types import MESSAGE_KEYS, READ_KEYS
from ..runtime.tasks import process_task
from ..store import messages

# The keys chat_send fills in, from the event definitions (the SQL names none).
STORED = "stored"  # chat_send's outcome for a message it stored (and whose events it wrote)
ALONE = "alone"  # chat_send_batch's outcome for every item of a conversation in slow mode: nothing done


class SendItem(NamedTuple):
    sender_id: str
    client_msg_id: UUID
    body: str
    message_event: dict  # MessageNew's payload (chat_send adds its store fields, MESSAGE_KEYS)
    read_event: dict  # ReadUpdated's payload (chat_send adds its store field, READ_KEYS)


def send_item(conn: Connection, conversation_id: int, item: SendItem) -> Awaitable[Row]:
    """chat_send of one item on conn (in the caller's transaction, if it holds one); await it. The
    store's coroutine itself, not one of its own around it (one coroutine less a send)."""
    return messages.send(
        conn,
        conversation_id=conversation_id,
        sender_id=item.sender_id,
        client_msg_id=item.client_msg_id,
        body=item.body,
        message_event=item.message_event,
        read_event=item.read_event,
        message_keys=MESSAGE_KEYS,
        read_keys=READ_KEYS,
    )


async def send_alone(database: Database, conversation_id: int, item: SendItem) -> Row:
    """One send, its own transaction (chat_send); a stored message wakes the relay after it."""
    async with database.connection() as conn:
        row = await send_item(conn, conversation_id, item)
        if row["outcome"] == STORED:  # only a stored message wrote events (by key: no Row.__getattr__)
            database.events_written(conn)
    return row


class ShuttingDown(Unavailable):
    """The process stopped before the transaction holding this send ran (retryable: nothing was stored)."""


class _Lane:
    """One conversation with a send in flight, and the sends waiting behind it."""

    __slots__ = ("task", "waiting")

    def __init__(self) -> None:
        self.waiting: deque[tuple[SendItem, asyncio.Future[Row]]] = deque()
        self.task: asyncio.Task | None = None


class SendBatcher:
    def __init__(self, database: Database, *, max_batch: int, on_batch: Callable[[int], None] | None = None) -> None:
        self._database = database
        self._max_batch = max_batch
        self._on_batch = on_batch or (lambda size: None)
        self._lanes: dict[int, _Lane] = {}

    async def send(self, conversation_id: int, item: SendItem) -> Row:
        """Store one send (chat_send's row: outcome, seq, sender_id, body, created_at), after commit."""
        lane = self._lanes.get(conversation_id)
        if lane is not None:
            future: asyncio.Future[Row] = asyncio.get_running_loop().create_future()
            lane.waiting.append((item, future))
            return await future
        # Idle: this send goes alone, now, in the caller's own task.
        lane = self._lanes[conversation_id] = _Lane()
        try:
            self._on_batch(1)
            return await send_alone(self._database, conversation_id, item)
        finally:
            self._hand_on(conversation_id, lane)

    def waiting(self, conversation_id: int) -> int:
        """How many sends to the conversation wait behind the one in flight."""
        lane = self._lanes.get(conversation_id)
        return 0 if lane is None else len(lane.waiting)

    def _hand_on(self, conversation_id: int, lane: _Lane) -> None:
        if lane.waiting:
            # it stores the sends of others, not those of the request that started it
            lane.task = process_task(self._drain(conversation_id, lane), "send-batch")
        else:
            del self._lanes[conversation_id]

    async def _drain(self, conversation_id: int, lane: _Lane) -> None:
        batch: list[tuple[SendItem, asyncio.Future[Row]]] = []
        try:
            while lane.waiting:
                batch = []
                while lane.waiting and len(batch) < self._max_batch:
                    waiting = lane.waiting.popleft()
                    if not waiting[1].done():  # a caller that gave up (cancelled) is left out
                        batch.append(waiting)
                if not batch:
                    continue
                self._on_batch(len(batch))
                try:
                    rows = await self._store(conversation_id, [item for item, _ in batch])
                except Exception as error:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                else:
                    for (_, future), row in zip(batch, rows, strict=True):
                        if not future.done():
                            future.set_result(row)
                batch = []
        finally:
            # Cancelled (the process stops): nobody may wait forever.
            for _, future in [*batch, *lane.waiting]:
                if not future.done():
                    future.set_exception(
                        ShuttingDown(
                            f"the server stopped before this message was stored; retry after {RETRY_AFTER_SECONDS} s",
                            retryAfter=RETRY_AFTER_SECONDS,
                        )
                    )
            lane.waiting.clear()
            del self._lanes[conversation_id]

    async def _store(self, conversation_id: int, items: list[SendItem]) -> list[Row]:
        if len(items) == 1:
            return [await send_alone(self._database, conversation_id, items[0])]
        async with self._database.connection() as conn:
            rows = await messages.send_batch(conn, conversation_id, items, MESSAGE_KEYS, READ_KEYS)
            if any(row.outcome == STORED for row in rows):  # one wake-up for the batch's commit
                self._database.events_written(conn)
        if rows and rows[0].outcome == ALONE:  # slow mode: each send checked alone, in order
            return [await send_alone(self._database, conversation_id, item) for item in items]
        return rows

    async def close(self) -> None:
        """Stop the batches in flight (their callers get an error); at shutdown."""
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
