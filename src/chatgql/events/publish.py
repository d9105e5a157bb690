"""Where the relay sends events: Kafka, or straight to the broadcast bus.

Each takes a batch of (key, payload) in order, with each event's commit time
(the outbox row's created_at, epoch seconds) when known, and returns only once
every event of the batch is acknowledged. The commit time travels beside the
event, never in it: as the Kafka record's timestamp, in the bus envelope, or
alongside the event handed to the Dispatcher.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from ..compat import aiokafka as aiokafka_compat
from ..runtime import tracing
from .bus import Bus, envelope
from .consumer import OwnRecord
from .dispatch import Dispatcher


def _json_bytes(payload: dict | str | bytes) -> bytes:
    """An event's JSON: as it came (the outbox's text), or encoded."""
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    return orjson.dumps(payload)


class Publisher(Protocol):
    """batch: (key, payload) with payload the event (a dict), or its JSON text for a publisher
    whose `takes_text` is true; created: each event's commit time; traces: while tracing, each
    event's traceparent (None: not traced), which goes on with it (runtime/tracing.py)."""

    async def publish(
        self,
        batch: Sequence[tuple[str, Any]],
        created: Sequence[float] | None = None,
        traces: Sequence[str | None] | None = None,
    ) -> None: ...


async def ensure_topic(bootstrap_servers: str, topic: str, partitions: int, replication: int) -> None:
    """Create the events topic if it does not exist yet (keyed by conversation id).

    The partition count is fixed here, at creation, for the topic's life: the producer
    puts a key on partition hash(key) % partitions, so adding partitions later moves
    conversations to other partitions, and a consumer may then see a conversation's new
    events before its old ones. An existing topic is left as it is (its count is not
    checked against CHATGQL_KAFKA_TOPIC_PARTITIONS). The relay's shards
    (CHATGQL_RELAY_SHARDS) are independent of it: any shard may publish to any partition.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication)])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()


class KafkaPublisher:
    """Idempotent producer, acks=all: a returned publish is on every in-sync replica.

    After a failed publish the producer is replaced by a fresh one (aiokafka#1017:
    an idempotent producer can stay stuck after a broker blip),
    and so after a publish given up on (the relay's timeout cancels it). The
    replacement happens when the next publish starts, and is tried again
    until one starts: a producer whose start() failed (Kafka unreachable) has
    no sender task, and whatever it is given would wait forever.

    The relay's shards publish through one producer concurrently (their keys never
    overlap, so each key's order is one shard's order); one of them replaces it.

    on_acked: this process's consumer of the topic (consumer.FanoutConsumer.deliver_own), given
    each publish's records once Kafka acknowledged them, to hand on those it need not fetch back.
    """

    takes_text = True  # payloads as JSON text (a dict is encoded)

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self.topic = topic
        self._bootstrap = bootstrap_servers
        self.producer = self._new_producer()
        self._usable = False  # started, and no publish failed on it since
        self._replacing = asyncio.Lock()
        self.on_acked: Callable[[Sequence[OwnRecord]], Awaitable[None]] | None = None

    def _new_producer(self) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=self._bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            request_timeout_ms=15_000,
            key_serializer=str.encode,
            value_serializer=_json_bytes,
        )

    async def start(self) -> None:
        await self.producer.start()
        self._usable = True

    async def stop(self) -> None:
        await _stop(self.producer)

    async def publish(
        self,
        batch: Sequence[tuple[str, dict]],
        created: Sequence[float] | None = None,
        traces: Sequence[str | None] | None = None,
    ) -> None:
        if traces is not None and created is not None:
            with tracing.producing(traces, self.topic) as headers:
                await self._publish(batch, created, headers)
            return
        await self._publish(batch, created)

    async def _publish(
        self, batch: Sequence[tuple[str, dict]], created: Sequence[float] | None, headers: Sequence[Any] = ()
    ) -> None:
        if not self._usable:
            async with self._replacing:
                if not self._usable:  # another shard may have replaced it meanwhile
                    await self._replace_producer()
        producer = self.producer
        try:
            # send() queues in order per partition; then wait for every ack.
            # The record's timestamp is the event's commit time (the consumer's delay bound reads it).
            send = producer.send
            topic = self.topic
            if created is None:
                pending = [await send(topic, value=payload, key=key) for key, payload in batch]
            elif headers:
                pending = [
                    await send(topic, value=payload, key=key, timestamp_ms=int(at * 1000), headers=header)
                    for (key, payload), at, header in zip(batch, created, headers, strict=True)
                ]
            else:
                pending = [
                    await send(topic, value=payload, key=key, timestamp_ms=int(at * 1000))
                    for (key, payload), at in zip(batch, created, strict=True)
                ]
            acked = await asyncio.gather(*pending)
        except BaseException:  # an error, or cancelled (timed out): don't trust this producer again
            if producer is self.producer:
                self._usable = False
            raise
        if self.on_acked is not None and created is not None and not headers:
            await self.on_acked(
                [
                    OwnRecord(key, _json_bytes(payload), int(at * 1000), metadata)
                    for (key, payload), at, metadata in zip(batch, created, acked, strict=True)
                ]
            )

    async def _replace_producer(self) -> None:
        old, self.producer = self.producer, self._new_producer()
        try:
            await _stop(old)
        except Exception:
            pass
        await self.producer.start()  # raises while Kafka is unreachable: the next publish tries again
        self._usable = True


async def _stop(producer: AIOKafkaProducer, flush_seconds: float = 5.0) -> None:
    """Stop a producer without waiting forever for a broker that is gone.

    aiokafka's stop() waits until every pending batch is acknowledged: during
    a Kafka outage it never returns, and shutdown hung. What Kafka has not
    acknowledged is still in the outbox (rows go only after the ack), so after
    flush_seconds it is given up on.
    """
    try:
        async with asyncio.timeout(flush_seconds):
            await producer.flush()
    except TimeoutError:
        # No public "stop now": end the sender first (so nothing is re-queued), then fail what is left.
        await aiokafka_compat.abandon_unacknowledged(
            producer, KafkaError("producer stopped before Kafka acknowledged"), flush_seconds
        )
    await producer.stop()


class BusPublisher:
    """No Kafka, subscribers in other processes: events go to the broadcast bus, pipelined."""

    takes_text = True  # payloads as JSON text (a dict is encoded)

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def publish(
        self,
        batch: Sequence[tuple[str, dict]],
        created: Sequence[float] | None = None,
        traces: Sequence[str | None] | None = None,
    ) -> None:
        dumps = _json_bytes
        if created is None:
            await self.bus.publish_many([(key, dumps(payload)) for key, payload in batch])
        elif traces is not None:
            await self.bus.publish_many(
                [
                    (key, envelope(dumps(payload), int(at * 1000), trace))
                    for (key, payload), at, trace in zip(batch, created, traces, strict=True)
                ]
            )
        else:
            await self.bus.publish_many(
                [
                    (key, envelope(dumps(payload), int(at * 1000)))
                    for (key, payload), at in zip(batch, created, strict=True)
                ]
            )


class DispatchPublisher:
    """No Kafka, subscribers in this process (memory://): events straight to the Dispatcher,
    as they came from the outbox (no JSON, no bus, no queue). Acknowledged once in every
    subscription's buffer, or its subscription ended with the resync error."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    async def publish(
        self,
        batch: Sequence[tuple[str, dict]],
        created: Sequence[float] | None = None,
        traces: Sequence[str | None] | None = None,
    ) -> None:
        if created is None:
            await self.dispatcher.dispatch_many([(payload, None) for _, payload in batch])
        elif traces is not None:
            await self.dispatcher.dispatch_many(
                [
                    tracing.arrived(payload, at, trace)
                    for (_, payload), at, trace in zip(batch, created, traces, strict=True)
                ]
            )
        else:
            await self.dispatcher.dispatch_many(
                [(payload, at) for (_, payload), at in zip(batch, created, strict=True)]
            )
