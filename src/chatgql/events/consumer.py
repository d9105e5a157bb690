"""The Kafka consumer (group `fanout`): chat.events -> this process's broadcast bus.

Offsets are committed only after every event of a batch was handed to the bus.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer

from .bus import Bus

log = logging.getLogger(__name__)


class FanoutConsumer:
    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        group: str,
        bus: Bus,
        *,
        offset_reset: str = "latest",
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
    ) -> None:
        self._bootstrap = bootstrap_servers
        self._topic = topic
        self._group = group
        self._bus = bus
        self._offset_reset = offset_reset
        self._liveness = {"session_timeout_ms": session_timeout_ms, "heartbeat_interval_ms": heartbeat_interval_ms}
        self.assigned = asyncio.Event()
        self.lag = 0

    async def run(self) -> None:
        while True:
            consumer = AIOKafkaConsumer(
                self._topic,
                bootstrap_servers=self._bootstrap,
                group_id=self._group,
                enable_auto_commit=False,
                auto_offset_reset=self._offset_reset,
                **self._liveness,
            )
            try:
                await consumer.start()
                await self._consume(consumer)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("Kafka consumer failed; restarting", exc_info=True)
                await asyncio.sleep(1)
            finally:
                self.assigned.clear()
                await consumer.stop()

    async def _consume(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=500, max_records=1000)
            if consumer.assignment():
                self.assigned.set()
            for records in batches.values():
                for record in records:
                    await self._bus.publish(record.value.decode(), record.key.decode() if record.key else None)
            if batches:
                await consumer.commit()
            self.lag = await self._lag(consumer)

    @staticmethod
    async def _lag(consumer: AIOKafkaConsumer) -> int:
        """Records on the broker not yet handed on, over this process's partitions."""
        lag = 0
        for tp in consumer.assignment():
            end = consumer.highwater(tp)
            if end is not None:
                lag += max(0, end - await consumer.position(tp))
        return lag
