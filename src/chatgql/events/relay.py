"""The outbox relay: outbox rows -> publisher, in id order per slot, deleted after the ack.

The outbox is split into R shards (CHATGQL_RELAY_SHARDS) by a fixed hash of the
conversation id: every row has a slot (0-63, migration 0008) and shard s relays
the slots with slot % R == s. One conversation is always one slot, and a slot is
relayed only by the relay holding its advisory lock (RELAY_LOCK, slot), so each
conversation's events reach Kafka in order whichever process relays them.

One `OutboxRelay` runs per process. It holds one control connection of its own
(named `chatgql-relay <id>` in pg_stat_activity), which holds the slot locks of
the shards it leads and LISTENs for commits. Every `standby_seconds` it counts
the relay processes connected to the database and takes free shards up to its
fair share (R / relays, rounded up) or hands back what is over it (after that
shard's current batch), so a relay that starts later gets its share. A process that
dies (kill -9) loses its session and so its locks: another one takes its shards
at its next look, within `standby_seconds` plus a batch.

Each shard relays in id order. A wake-up (NOTIFY from any process, a commit in
this process through events.wakeup, or a poll, since notifications can be
missed while reconnecting) reads the oldest rows of every idle shard in one
statement. When that is all they hold (fewer than a batch), one drain relays
them all and reads them all again while commits keep coming (a statement a
cycle, whatever the shard count); a backlog (a full batch) starts a drain for
each shard that has rows, concurrently. A drain reads its shards again until
they are empty, then ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from ..db import Database
from ..runtime import tracing
from ..store import outbox
from .publish import Publisher

log = logging.getLogger(__name__)


def fair_share(shards: int, relays: int) -> int:
    """The most shards one of `relays` relay processes leads: shards / relays, rounded up.

    Rounded up, a relay never hands a shard back only to even out the others (the busiest
    relay leads as many either way), and the shards of a relay that died always find room.
    """
    return -(-shards // max(relays, 1))


class _Shard:
    def __init__(self, index: int, shards: int) -> None:
        self.index = index
        self.slots = outbox.shard_slots(index, shards)
        self.stopping = False
        # A drain runs (then the dispatcher leaves the shard to it); dirty: events may have
        # committed since its last read, so it reads again before it ends.
        self.task: asyncio.Task | None = None
        self.dirty = False

    @property
    def busy(self) -> bool:
        return self.task is not None and not self.task.done()


class OutboxRelay:
    def __init__(
        self,
        database: Database,
        publisher: Publisher,
        *,
        shards: int = 4,
        batch_size: int = 500,
        poll_seconds: float = 1.0,
        standby_seconds: float = 0.5,
        publish_timeout: float = 30.0,
        on_relayed: Callable[[int, int], None] = lambda shard, n: None,
        on_step: Callable[[str, float], None] = lambda step, seconds: None,
        on_hand_back: Callable[[], None] = lambda: None,
        local: bool = False,
        webhook_kinds: Sequence[str] = (),
    ) -> None:
        """local: the publisher reaches this process's subscribers only (the memory bus, no Kafka),
        so a relay of another process on the same database takes events away from them.
        webhook_kinds: relayed rows of these kinds are copied into the webhook queue as they are
        deleted (events/webhooks.py). on_step: each read of a batch (with the previous one's delete
        when a drain goes on), publish, and delete on its own that succeeded, with its seconds.
        on_hand_back: called before a shard is handed back to be led elsewhere (this process's
        consumer then fetches what it had left to this relay)."""
        if outbox.SLOTS % shards:
            raise ValueError(f"the relay shard count must divide {outbox.SLOTS}")
        self._database = database
        self._publisher = publisher
        # Kafka and the bus carry the payload's JSON text as PostgreSQL gives it: not decoded here.
        self._text = getattr(publisher, "takes_text", False)
        self.shards = shards
        self._batch_size = batch_size
        self._poll_seconds = poll_seconds
        self._standby_seconds = standby_seconds
        self._publish_timeout = publish_timeout
        self._on_relayed = on_relayed
        self._on_step = on_step
        self.on_hand_back = on_hand_back
        self._local = local
        self._webhook_kinds = tuple(webhook_kinds)
        self._shared_noted = False
        self.name = f"{outbox.RELAY_APPLICATION} {uuid.uuid4().hex[:12]}"
        self._led: dict[int, _Shard] = {}
        self._wakeup = asyncio.Event()

    @property
    def shards_led(self) -> list[int]:
        return sorted(self._led)

    @property
    def is_leader(self) -> bool:
        """This process leads every shard (then nobody else needs to be told of its commits)."""
        return len(self._led) == self.shards

    def wake(self) -> None:
        """Events committed: look at every shard led here now."""
        self._wakeup.set()
        for shard in self._led.values():
            shard.dirty = True

    async def run(self) -> None:
        """Relay until cancelled; any failure (database, Kafka) is retried."""
        while True:
            try:
                await self._control()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("outbox relay failed; retrying", exc_info=True)
                await asyncio.sleep(self._standby_seconds)

    async def _control(self) -> None:
        # The locks and LISTEN are session state: they live on a connection of their own.
        conn = await self._database.dedicated(application_name=self.name)
        dispatcher: asyncio.Task | None = None
        try:
            await outbox.listen(conn, self.wake)
            dispatcher = asyncio.create_task(self._dispatch(), name="outbox-relay-dispatch")
            while True:
                await self._rebalance(conn)
                await asyncio.sleep(self._standby_seconds)
        finally:
            # The locks go with the session: stop relaying first, then close it (terminate:
            # the database may be gone).
            if dispatcher is not None:
                dispatcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await dispatcher
            await self._stop_all()
            conn.terminate()

    async def _rebalance(self, conn) -> None:
        """Take free shards up to this relay's fair share, or hand back what is over it."""
        relays = await outbox.relay_processes(conn)  # also: the control connection still works
        if self.name not in relays:
            relays.append(self.name)
        quota = fair_share(self.shards, len(relays))
        if self._local and len(relays) > 1 and not self._shared_noted:
            self._shared_noted = True
            log.warning(
                "%d relay processes share this database, but this one publishes to its own process only "
                "(the memory:// bus, no Kafka): each delivers live only the events of the shards it leads, "
                "so subscribers miss the others' live (sync still has them). Give the processes one bus "
                "(CHATGQL_BROADCAST_URL=redis://...) or Kafka, or one database each",
                len(relays),
            )
        while len(self._led) > quota:
            shard = self._led[max(self._led)]
            self.on_hand_back()
            await self._stop(shard)
            await outbox.release_slots(conn, shard.slots)
            log.info("relay shard %d handed back (%d relay processes)", shard.index, len(relays))
        if len(self._led) >= quota:
            return
        # Start where this relay's share would be, so relays starting together try different shards.
        start = sorted(relays).index(self.name) * quota
        for offset in range(self.shards):
            index = (start + offset) % self.shards
            if index in self._led:
                continue
            shard = _Shard(index, self.shards)
            if await outbox.take_slots(conn, shard.slots):
                self._led[index] = shard
                self.wake()  # what waits in it (a dead relay's backlog) goes now
                # Said when relays share the outbox (a handover); alone, a relay leads every shard.
                log.log(
                    logging.INFO if len(relays) > 1 else logging.DEBUG,
                    "relay shard %d led here (%d relay processes)",
                    index,
                    len(relays),
                )
                if len(self._led) >= quota:
                    return

    async def _stop(self, shard: _Shard) -> None:
        """Stop relaying `shard` after its current batch (cancelled if it takes too long)."""
        shard.stopping = True
        if shard.task is not None:
            done, _ = await asyncio.wait({shard.task}, timeout=self._publish_timeout + 5)
            if not done:
                shard.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await shard.task
        self._led.pop(shard.index, None)

    async def _stop_all(self) -> None:
        shards = list(self._led.values())
        self._led.clear()
        for shard in shards:
            shard.stopping = True
            if shard.task is not None:
                shard.task.cancel()
        for shard in shards:
            if shard.task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await shard.task

    async def _dispatch(self) -> None:
        """On every wake-up (and every poll_seconds), read the oldest rows of all the idle shards
        led here in one statement, and start a drain for each shard that has some: with little
        traffic a wake-up costs one read, not one per shard. A busy shard reads for itself."""
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that
            # arrives as the event is set, and the relay then never stops.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_seconds):
                    await self._wakeup.wait()
            self._wakeup.clear()
            idle = {s.index: s for s in self._led.values() if not s.busy and not s.stopping}
            for shard in idle.values():
                shard.dirty = False
            if not idle:
                continue
            try:
                async with self._timed_connection("read") as conn:
                    rows = await outbox.oldest(
                        conn,
                        [slot for s in idle.values() for slot in s.slots],
                        self._batch_size,
                        text=self._text,
                        traced=tracing.ON,
                    )
            except Exception:
                log.warning("outbox relay could not read the outbox; retrying", exc_info=True)
                await asyncio.sleep(self._standby_seconds)
                self._wakeup.set()
                continue
            # Handed back (or the relay stopped) while reading: its next leader sends those rows.
            kept = {i: s for i, s in idle.items() if self._led.get(i) is s and not s.stopping and not s.busy}
            rows = [row for row in rows if row.slot % self.shards in kept]
            if not rows:
                continue
            if len(rows) < self._batch_size:
                # Every idle shard's rows, as of the read: one drain for all of them, a statement a
                # cycle however many shards its rows are in (a drain each cost a delete each, and a
                # task each, for a wake-up's few rows). A backlog drains by shard, concurrently.
                group = list(kept.values())
                task = asyncio.create_task(self._drain(group, rows, True), name="outbox-relay-shards")
                for shard in group:
                    shard.task = task
                continue
            batches: dict[int, list] = {}
            for row in rows:
                batches.setdefault(row.slot % self.shards, []).append(row)
            for index, batch in batches.items():
                shard = kept[index]
                shard.task = asyncio.create_task(self._drain([shard], batch), name=f"outbox-relay-shard-{index}")

    async def _drain(self, shards: list[_Shard], rows: list | None = None, complete: bool = False) -> None:
        """Relay the shards' rows until their slots are empty (rows: a first batch read for them;
        complete: they were all their slots held then). One shard (a backlog's), or the idle shards
        of a wake-up together: either way one read a batch, of all their slots, in id order.

        The rows of a batch are deleted once published, by the next read (one statement: a busy
        drain costs one round trip per batch), or on their own when the drain ends. A read or delete
        that fails is tried again with the same ids: a batch is published again only if this process
        stops before its delete (at least once). A shard handed back ends the drain after its batch."""
        slots = [slot for shard in shards for slot in shard.slots]
        name = ",".join(str(shard.index) for shard in shards)
        relayed: list[int] = []  # published, not yet deleted
        ended = False
        try:
            while not any(shard.stopping for shard in shards):
                try:
                    if rows is None:
                        for shard in shards:
                            shard.dirty = False
                        async with self._timed_connection("read") as conn:
                            rows = await outbox.oldest(
                                conn,
                                slots,
                                self._batch_size,
                                text=self._text,
                                delete=relayed,
                                queue_kinds=self._webhook_kinds,
                                traced=tracing.ON,
                            )
                        relayed = []
                        complete = len(rows) < self._batch_size
                    if rows:
                        started = time.perf_counter()
                        await self._publish(rows)
                        self._on_step("publish", time.perf_counter() - started)
                        relayed = [row.id for row in rows]
                        self._count(shards, rows)
                except Exception:
                    log.warning("outbox relay shard %s failed; retrying", name, exc_info=True)
                    await asyncio.sleep(self._standby_seconds)
                    complete = False
                if complete and not any(shard.dirty for shard in shards):  # nothing more read, nor committed since
                    if not relayed:
                        break
                    # Deleted here, not after the loop: a commit while this waits wakes a busy shard
                    # (dirty), which must read again, or its events wait for the next poll.
                    await self._delete(name, relayed)
                    relayed = []
                    if not any(shard.dirty for shard in shards):
                        break
                rows = None
            ended = True
        finally:
            if relayed:
                if ended:
                    await self._delete(name, relayed)
                else:  # cancelled (the relay stops): one bounded try, else its next leader sends them again
                    with contextlib.suppress(BaseException):
                        async with asyncio.timeout(2):
                            async with self._database.connection() as conn:
                                await outbox.delete(conn, relayed, self._webhook_kinds)
            if len(shards) > 1 and any(shard.stopping for shard in shards):
                # Ended for a shard handed back: the others are idle again, with what came meanwhile.
                self._wakeup.set()

    @contextlib.asynccontextmanager
    async def _timed_connection(self, step: str) -> AsyncIterator[Any]:
        """A pooled connection for one step (read, delete), its seconds told to on_step if it succeeds."""
        started = time.perf_counter()
        async with self._database.connection() as conn:
            yield conn
        self._on_step(step, time.perf_counter() - started)

    def _count(self, shards: list[_Shard], rows: list) -> None:
        if len(shards) == 1:
            self._on_relayed(shards[0].index, len(rows))
            return
        counts: dict[int, int] = {}
        for row in rows:
            index = row.slot % self.shards
            counts[index] = counts.get(index, 0) + 1
        for index, count in counts.items():
            self._on_relayed(index, count)

    async def _publish(self, rows: list) -> None:
        """Publish rows (a prefix of each of their slots, in id order)."""
        # A publish that never completes must not stall the shard for good:
        # time it out, and the shard reads again (the rows are still there).
        async with asyncio.timeout(self._publish_timeout):
            batch = [(row.msg_key, row.payload) for row in rows]
            if not tracing.ON:
                await self._publisher.publish(batch, [row.created for row in rows])
                return
            with tracing.relaying([row.get("traceparent") for row in rows]) as traces:
                await self._publisher.publish(batch, [row.created for row in rows], traces)

    async def _delete(self, name: str, ids: list[int]) -> None:
        """Delete relayed rows, trying again while the database fails (a cancelled drain gives up:
        its next leader publishes them again)."""
        while True:
            try:
                async with self._timed_connection("delete") as conn:
                    await outbox.delete(conn, ids, self._webhook_kinds)
                return
            except Exception:
                log.warning("outbox relay shard %s could not delete relayed rows; retrying", name, exc_info=True)
                await asyncio.sleep(self._standby_seconds)
