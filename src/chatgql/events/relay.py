"""The outbox relay: outbox rows -> publisher, in id order, deleted after the ack.

Exactly one relay is active per database: the one holding a session-level
advisory lock on its own connection. Others stand by and take over when that
connection goes away. The leader wakes on LISTEN/NOTIFY at commit and polls
as a fallback, since notifications can be missed while reconnecting.
Writers in this process also set `wake` directly (events.wakeup).
"""

from __future__ import annotations

import asyncio
import logging

from ..db import Database
from ..store import outbox
from .publish import Publisher

log = logging.getLogger(__name__)


class OutboxRelay:
    def __init__(
        self,
        database: Database,
        publisher: Publisher,
        *,
        batch_size: int = 500,
        poll_seconds: float = 1.0,
        standby_seconds: float = 1.0,
        publish_timeout: float = 30.0,
        on_relayed=lambda n: None,
    ) -> None:
        self._database = database
        self._publisher = publisher
        self._batch_size = batch_size
        self._poll_seconds = poll_seconds
        self._standby_seconds = standby_seconds
        self._publish_timeout = publish_timeout
        self._on_relayed = on_relayed
        self.is_leader = False
        self.wake = asyncio.Event()  # set after commits in this process, and on NOTIFY

    async def run(self) -> None:
        """Relay until cancelled; any failure (database, Kafka) is retried."""
        while True:
            try:
                await self._lead()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("outbox relay failed; retrying", exc_info=True)
                await asyncio.sleep(self._standby_seconds)

    async def _lead(self) -> None:
        # The lock and LISTEN are session state: they live on a connection of their own.
        lock_conn = await self._database.dedicated()
        try:
            while not await outbox.try_lead(lock_conn):
                await asyncio.sleep(self._standby_seconds)
            self.is_leader = True
            await outbox.listen(lock_conn, self.wake.set)
            while True:
                self.wake.clear()
                await self.drain()
                try:
                    await asyncio.wait_for(self.wake.wait(), self._poll_seconds)
                except TimeoutError:
                    # Quiet: make sure the lock connection (and so the lock) is alive.
                    await outbox.try_lead(lock_conn)
        finally:
            self.is_leader = False
            # Closing the session releases the lock (terminate: the database may be gone).
            lock_conn.terminate()

    async def drain(self) -> int:
        """Relay everything in the outbox now; returns how many events were sent."""
        sent = 0
        while True:
            async with self._database.connection() as conn:
                rows = await outbox.oldest(conn, self._batch_size)
            if not rows:
                return sent
            # A publish that never completes must not stall the relay for good:
            # time it out, and run() starts over (the rows are still there).
            async with asyncio.timeout(self._publish_timeout):
                await self._publisher.publish([(row.msg_key, row.payload) for row in rows])
            async with self._database.connection() as conn:
                await outbox.delete(conn, [row.id for row in rows])
            sent += len(rows)
            self._on_relayed(len(rows))
