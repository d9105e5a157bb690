"""The Kafka consumer (group `fanout`): chat.events -> this process's subscribers or the bus.

Each getmany() batch is handed on in one go to a Sink:

- DispatchSink (memory://, subscribers in this process): each record's JSON is
  decoded once and the event goes straight to the Dispatcher with its commit time
  (the record's timestamp, which the relay sets to the outbox row's created_at);
- BusSink (redis://, redis+cluster://): the records' bytes go to the bus as they
  are, in the commit-time envelope, pipelined (one round trip per batch); each
  API process's feed decodes them once.

Offsets are committed by a task of their own, in the background, with explicit
offsets: for each partition, the offset after the last record handed on, never
further. A record is handed on when the sink returned: on the Dispatcher, in every
subscription's buffer (or its subscription ended with the resync error); on the
bus, acknowledged by Redis. So a process killed at any point has committed only
what reached its subscribers or the bus, and the group's next consumer starts
after that (what was handed on but not committed yet comes again: at least once,
which subscribers dedupe by seq). Partitions taken away by a rebalance get their
handed-on offsets committed first (for at most FINAL_COMMIT_SECONDS: what was not
committed then comes again).

Its own relay's records are not fetched back while that relay is the only one (deliver_own):
a partition the consumer has handed on to its end is paused, and each record the relay then
has acknowledged there is handed on by the relay's publish, when its offset is exactly the
partition's next; any other record (another producer's) ends the pause, and the consumer
fetches from the first record not handed on. Offsets are committed alike either way. Kafka
then serves one produce an event instead of a produce and a fetch, and this process decodes
no fetch response for it (bench/results/perf-round4.md).

What waits here is bounded: aiokafka buffers at most one fetch per partition
(max_partition_fetch_bytes each, FETCH_MAX_BYTES a request), and the loop holds
one batch of at most MAX_RECORDS records at a time; the sink is awaited, so a
slow Dispatcher or Redis holds the rest in Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import RecordMetadata

from ..runtime import tracing
from .bus import Bus, envelope
from .dispatch import Dispatcher

log = logging.getLogger(__name__)

# Records in one hand-off at most.
MAX_RECORDS = 1000
# aiokafka's fetch buffer: at most one fetch per partition is held unconsumed.
MAX_PARTITION_FETCH_BYTES = 1024 * 1024
FETCH_MAX_BYTES = 16 * 1024 * 1024
# The committer commits at most this often (what was handed on meanwhile goes in one commit).
COMMIT_INTERVAL_SECONDS = 0.1
# How long a consumer that stops waits for its last commit, and a rebalance for the commit of the
# partitions it takes away: aiokafka's commit retries for as long as Kafka answers with a retriable
# error or not at all, and once the consumer is closing it no longer looks for a coordinator, so a
# commit under way then never ends. What was not committed comes again (at least once).
FINAL_COMMIT_SECONDS = 5.0
# How long a consumer's stop() may take after that; past it the consumer is left behind (logged).
STOP_SECONDS = 15.0


class OwnRecord:
    """A record this process's relay published and Kafka acknowledged, as a sink takes it."""

    __slots__ = ("key", "offset", "timestamp", "tp", "value")

    def __init__(self, key: str, value: bytes, timestamp: int, acked: RecordMetadata) -> None:
        self.key = key.encode()
        self.value = value
        self.timestamp = timestamp  # ms, the outbox row's commit time (as the record's)
        self.tp = TopicPartition(acked.topic, acked.partition)
        self.offset = acked.offset


class Sink(Protocol):
    async def hand_on(self, records: Sequence[Any]) -> None:
        """Hand on these records (in order per partition); returns once they are handed on."""


class DispatchSink:
    """Subscribers in this process: decoded events straight to the Dispatcher (no bus, no queue)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def hand_on(self, records: Sequence[Any]) -> None:
        loads = orjson.loads
        if tracing.ON:
            with tracing.consuming(records, loads) as stamped:
                await self.dispatcher.dispatch_many(stamped)
            return
        await self.dispatcher.dispatch_many([(loads(r.value), r.timestamp / 1000) for r in records])


class BusSink:
    """Subscribers in other processes: the records' bytes onto the bus, pipelined."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def hand_on(self, records: Sequence[Any]) -> None:
        if tracing.ON:
            with tracing.consuming(records, bytes) as stamped:
                await self.bus.publish_many(
                    [
                        (r.key.decode() if r.key else "", envelope(r.value, r.timestamp, tracing.traceparent_of(item)))
                        for r, item in zip(records, stamped, strict=True)
                    ]
                )
            return
        await self.bus.publish_many(
            [(r.key.decode() if r.key else "", envelope(r.value, r.timestamp)) for r in records]
        )


class FanoutConsumer:
    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        group: str,
        sink: Sink,
        *,
        offset_reset: str = "latest",
        max_records: int = MAX_RECORDS,
        commit_interval: float = COMMIT_INTERVAL_SECONDS,
        session_timeout_ms: int = 6_000,
        heartbeat_interval_ms: int = 2_000,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._topic = topic
        self._group = group
        self.sink = sink
        self._offset_reset = offset_reset
        self._max_records = max_records
        self._commit_interval = commit_interval
        self._liveness = {"session_timeout_ms": session_timeout_ms, "heartbeat_interval_ms": heartbeat_interval_ms}
        self.assigned = asyncio.Event()
        self.lag = 0
        self.handed: dict[TopicPartition, int] = {}  # partition -> offset after the last record handed on
        self.committed: dict[TopicPartition, int] = {}  # partition -> offset committed by this consumer
        self.records = 0  # handed on, over restarts
        self.restarts = 0  # runs that failed and were started again
        self._consumer: AIOKafkaConsumer | None = None
        self._to_commit = asyncio.Event()
        # This process's relay leads every outbox shard: nobody else publishes (deliver_own).
        self.sole: Callable[[], bool] = lambda: False
        self.own: dict[TopicPartition, int] = {}  # paused for deliver_own -> the offset its next record has
        self.own_records = 0  # handed on by deliver_own, over restarts
        self._handing = asyncio.Lock()  # one hand-off at a time: the fetched and the own keep their order
        # Hand-offs of deliver_own's that failed, and runs that ended: own records taken before one and
        # still waiting for the lock are left to the consumer, which fetches again from before them.
        self._setbacks = 0
        # Per partition, the offset after the last record this process's relay had acknowledged there:
        # a partition is not paused while one of those may not have been fetched yet.
        self._acked: dict[TopicPartition, int] = {}

    def assignment(self) -> set[TopicPartition]:
        """The partitions the current run holds (none between runs)."""
        return set(self._consumer.assignment()) if self._consumer is not None else set()

    async def run(self) -> None:
        while True:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap,
                group_id=self._group,
                enable_auto_commit=False,
                auto_offset_reset=self._offset_reset,
                max_partition_fetch_bytes=MAX_PARTITION_FETCH_BYTES,
                fetch_max_bytes=FETCH_MAX_BYTES,
                **self._liveness,
            )
            consumer.subscribe([self._topic], listener=_Rebalance(self, consumer))
            self._consumer = consumer
            self.handed.clear()
            self.committed.clear()
            self.own.clear()
            committer: asyncio.Task | None = None
            try:
                await consumer.start()
                committer = asyncio.create_task(self._commit_loop(consumer), name="kafka-commit")
                await self._consume(consumer, committer)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # Stopped while a library turned the cancellation into an error of its own: stop.
                    raise asyncio.CancelledError from error
                self.restarts += 1
                log.warning("Kafka consumer failed; restarting", exc_info=True)
                await asyncio.sleep(1)
            finally:
                self.assigned.clear()
                self.own.clear()  # deliver_own hands on nothing more of this run
                self._setbacks += 1
                if committer is not None:
                    committer.cancel()
                    with contextlib.suppress(BaseException):
                        await committer
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(FINAL_COMMIT_SECONDS):
                        await self._commit(consumer)
                await _stop(consumer)
                self._consumer = None

    async def _consume(self, consumer: AIOKafkaConsumer, committer: asyncio.Task) -> None:
        loop = asyncio.get_running_loop()
        lag_at = 0.0
        while True:
            if committer.done():
                committer.result()
                raise RuntimeError("the committer stopped")
            batches = await consumer.getmany(timeout_ms=500, max_records=self._max_records)
            if not self.assigned.is_set() and consumer.assignment():
                self.assigned.set()
            if batches:
                if len(batches) == 1:
                    records = next(iter(batches.values()))
                else:
                    records = [record for partition in batches.values() for record in partition]
                async with self._handing:
                    await self.sink.hand_on(records)
                assignment = consumer.assignment()
                for tp, partition in batches.items():
                    if tp in assignment:  # taken away meanwhile: its next owner has them again
                        self.handed[tp] = partition[-1].offset + 1
                self.records += len(records)
                self._to_commit.set()
            await self._settle(consumer)
            now = loop.time()
            if now - lag_at >= 1.0:
                lag_at = now
                self.lag = self._lag(consumer)

    async def _settle(self, consumer: AIOKafkaConsumer) -> None:
        """While this process's relay is the only one, pause each partition handed on to its end:
        deliver_own hands on what comes next there. Else fetch them all again."""
        if not self.sole() or tracing.ON:  # traced records go the consumer's way (their spans)
            self.release()
            return
        for tp in consumer.assignment():
            if tp in self.own:
                continue
            end = consumer.highwater(tp)
            if end is None:
                continue  # no fetch answered for it yet
            done = self.handed.get(tp)
            if done is None:  # nothing handed on in this run: where the consumer is
                done = await consumer.position(tp)
                if tp not in consumer.assignment() or tp in self.own:
                    continue  # taken away, or paused, meanwhile
            if done == end and self._acked.get(tp, end) <= end:
                consumer.pause(tp)
                self.own[tp] = end
                self.handed.setdefault(tp, end)

    def release(self, tp: TopicPartition | None = None) -> None:
        """The consumer fetches again what was paused for deliver_own (tp: that partition only),
        from the first record not handed on."""
        consumer = self._consumer
        for partition in [tp] if tp is not None else list(self.own):
            after = self.own.pop(partition, None)
            if after is not None and consumer is not None and partition in consumer.assignment():
                consumer.seek(partition, after)
                consumer.resume(partition)

    async def deliver_own(self, records: Sequence[OwnRecord]) -> None:
        """Records this process's relay has just had acknowledged, in its publish's order. Each one
        that is exactly the next record of a partition paused for it is handed on here, and its offset
        committed as the consumer's would be; any other ends its partition's pause, and the consumer
        fetches it (and what follows) instead. A hand-off that fails gives every partition back to
        the consumer, from the first record not handed on (at least once)."""
        acked = self._acked
        for record in records:
            if record.offset >= acked.get(record.tp, 0):
                acked[record.tp] = record.offset + 1
        if not self.own:
            return
        sole = self.sole()
        # No more of a partition at once than one fetch would bring (a subscriber's buffer is sized
        # for the fetch's bursts): a bigger batch is left to the fetch.
        sizes: dict[TopicPartition, int] = {}
        for record in records:
            sizes[record.tp] = sizes.get(record.tp, 0) + len(record.value)
        mine: list[OwnRecord] = []
        for record in records:
            after = self.own.get(record.tp)
            if after is None:
                continue
            if sole and record.offset == after and sizes[record.tp] <= MAX_PARTITION_FETCH_BYTES:
                mine.append(record)
                self.own[record.tp] = record.offset + 1
            else:  # another producer's record came first, or too many at once, or no longer the only relay
                self.release(record.tp)
        if not mine:
            return
        setbacks = self._setbacks
        async with self._handing:
            if self._setbacks != setbacks:
                return  # the consumer fetches them again, in their order
            try:
                await self.sink.hand_on(mine)
            except BaseException as error:  # failed, or cancelled (the relay's publish timed out or stopped)
                self._setbacks += 1
                for tp in list(self.own):
                    self.own[tp] = self.handed.get(tp, self.own[tp])
                self.release()
                if not isinstance(error, Exception):
                    raise
                log.warning("own records not handed on; the consumer fetches them", exc_info=True)
                return
        consumer = self._consumer
        assignment = consumer.assignment() if consumer is not None else set()
        for record in mine:
            if record.tp in assignment:
                self.handed[record.tp] = record.offset + 1
        self.records += len(mine)
        self.own_records += len(mine)
        self._to_commit.set()

    def _lag(self, consumer: AIOKafkaConsumer) -> int:
        """Records on the broker not yet handed on, over this process's partitions (as of the last fetch)."""
        lag = 0
        for tp in consumer.assignment():
            end = consumer.highwater(tp)
            done = self.handed.get(tp, self.committed.get(tp))
            if end is not None and done is not None:
                lag += max(0, end - done)
        return lag

    async def _commit_loop(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            await self._to_commit.wait()
            self._to_commit.clear()
            try:
                await self._commit(consumer)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A rebalance under way (the partitions' next owner starts from the last commit
                # and sees those records again), or Kafka away: the next hand-off tries again.
                log.info("Kafka offset commit failed; will retry", exc_info=True)
            await asyncio.sleep(self._commit_interval)

    async def _commit(self, consumer: AIOKafkaConsumer, only: set[TopicPartition] | None = None) -> None:
        """Commit what was handed on and not committed yet (only: of these partitions)."""
        assignment = consumer.assignment()
        offsets = {
            tp: offset
            for tp, offset in self.handed.items()
            if offset > self.committed.get(tp, -1) and tp in assignment and (only is None or tp in only)
        }
        if offsets:
            await consumer.commit(offsets)
            self.committed.update(offsets)


async def _stop(consumer: AIOKafkaConsumer) -> None:
    """consumer.stop(), bounded: it waits for aiokafka's coordination task, which runs the revoke
    listener; every wait of ours in there is bounded, and this bounds the rest, so that a process
    whose Kafka is away or moving its partitions still shuts down. Past STOP_SECONDS the wait is
    cancelled (which ends the coordination task) and the consumer is left to the process's exit."""
    try:
        async with asyncio.timeout(STOP_SECONDS):
            await consumer.stop()
    except TimeoutError:
        log.warning("Kafka consumer did not stop within %s s; left behind", STOP_SECONDS)


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, owner: FanoutConsumer, consumer: AIOKafkaConsumer) -> None:
        self._owner = owner
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        """Commit what was handed on of the partitions going away, before they go.

        Bounded (FINAL_COMMIT_SECONDS): this runs in aiokafka's coordination task, which the
        consumer's stop() waits for, and a commit that a closing consumer runs to a coordinator it
        lost never ends; stop() hung on it, even after Kafka came back."""
        try:
            async with asyncio.timeout(FINAL_COMMIT_SECONDS):
                await self._owner._commit(self._consumer, set(revoked))
        except Exception:
            log.info("could not commit before a rebalance; those records will come again", exc_info=True)
        for tp in revoked:
            self._owner.handed.pop(tp, None)
            self._owner.committed.pop(tp, None)
            self._owner.own.pop(tp, None)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        for tp in assigned:
            self._owner.handed.pop(tp, None)
            self._owner.committed.pop(tp, None)
