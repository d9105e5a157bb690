"""Where the relay sends events: Kafka, or straight to the broadcast bus.

Both take a batch of (key, payload) in order and return only once every
event of the batch is acknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

import orjson
from aiokafka import AIOKafkaProducer
from broadcaster import Broadcast

BUS_CHANNEL = "chatgql.events"


class Publisher(Protocol):
    async def publish(self, batch: Sequence[tuple[str, dict]]) -> None: ...


class KafkaPublisher:
    """Idempotent producer, acks=all: a returned publish is on every in-sync replica."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self.topic = topic
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            enable_idempotence=True,
            acks="all",
            linger_ms=2,
            request_timeout_ms=15_000,
            key_serializer=str.encode,
            value_serializer=orjson.dumps,
        )

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()

    async def publish(self, batch: Sequence[tuple[str, dict]]) -> None:
        # send() queues in order per partition; then wait for every ack.
        pending = [await self.producer.send(self.topic, value=payload, key=key) for key, payload in batch]
        await asyncio.gather(*pending)


class BusPublisher:
    """No Kafka: events go straight to this process's broadcast bus."""

    def __init__(self, broadcast: Broadcast) -> None:
        self.broadcast = broadcast

    async def publish(self, batch: Sequence[tuple[str, dict]]) -> None:
        for _, payload in batch:
            await self.broadcast.publish(BUS_CHANNEL, orjson.dumps(payload).decode())
