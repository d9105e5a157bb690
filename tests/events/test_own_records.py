"""A relay that is the only one hands its own acknowledged records on, and the consumer does not
fetch them back (events/consumer.py deliver_own); any other producer's record, and a relay no
longer alone, give the partitions back to the consumer without losing or reordering a record."""

from __future__ import annotations

import asyncio
import time

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from chatgql.events.consumer import FanoutConsumer
from chatgql.events.publish import KafkaPublisher, ensure_topic

from ..support.live import wait_until

PARTITIONS = 4


class _Kept:
    """A sink that keeps what it was handed, in order, as (key, n)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int]] = []
        self.fail_next = False  # the next hand-off raises (a bus that is away)

    async def hand_on(self, records) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the bus is away")
        self.records.extend((r.key.decode(), orjson.loads(r.value)["n"]) for r in records)

    def of(self, key: str) -> list[int]:
        return [n for k, n in self.records if k == key]


async def _end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await reader.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return {tp.partition: offset for tp, offset in (await reader.end_offsets(tps)).items()}
    finally:
        await reader.stop()


async def test_own_records_are_handed_on_without_a_fetch_and_foreign_ones_in_their_order(kafka, topic):
    await ensure_topic(kafka.bootstrap, topic, PARTITIONS, 1)
    publisher = KafkaPublisher(kafka.bootstrap, topic)
    foreign = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, enable_idempotence=True, acks="all")
    await publisher.start()
    await foreign.start()
    sink = _Kept()
    consumer = FanoutConsumer(kafka.bootstrap, topic, f"fanout-{topic}", sink, offset_reset="earliest")
    alone = True
    consumer.sole = lambda: alone
    publisher.on_acked = consumer.deliver_own
    running = asyncio.create_task(consumer.run())
    n = 0

    async def publish(*keys: str) -> None:
        nonlocal n
        batch = []
        for key in keys:
            n += 1
            batch.append((key, {"n": n}))
        await publisher.publish(batch, [time.time()] * len(batch))

    try:
        # Before the consumer has reached the end of a partition, its records come by fetch.
        await publish(*(f"k{i}" for i in range(8)))
        await wait_until(lambda: len(sink.records) == 8, 120, "the first records fetched")
        await wait_until(lambda: len(consumer.own) == PARTITIONS, 60, "every partition left to the relay")
        assert consumer.own_records == 0

        # Alone, the relay's records are handed on by its publish: nothing is fetched.
        fetched_before = consumer.records - consumer.own_records
        await publish(*(f"k{i % 8}" for i in range(40)))
        assert len(sink.records) == 48  # handed on before publish() returned
        assert consumer.own_records == 40
        assert consumer.records - consumer.own_records == fetched_before
        # ... and committed as the consumer's own hand-offs are.
        ends = await _end_offsets(kafka.bootstrap, topic)
        await wait_until(
            lambda: {tp.partition: offset for tp, offset in consumer.committed.items()} == ends,
            60,
            "the own records' offsets committed",
        )

        # Another producer's record first in a partition: the relay's next record there is not
        # handed on by the relay; the consumer fetches both, in their order, once each.
        key = "k3"
        n += 1
        await foreign.send_and_wait(topic, orjson.dumps({"n": n}), key=key.encode())
        foreign_n = n
        await publish(key)
        own_n = n
        await wait_until(lambda: own_n in sink.of(key), 60, "the partition fetched again")
        assert sink.of(key)[-2:] == [foreign_n, own_n]
        assert consumer.own_records == 40  # the relay did not hand that one on
        # Once caught up, that partition is the relay's again.
        await wait_until(lambda: len(consumer.own) == PARTITIONS, 60, "the partition left to the relay again")
        await publish(key)
        assert sink.of(key)[-1] == n and consumer.own_records == 41

        # More of one partition at once than one fetch brings (1 MiB): left to the fetch, whose
        # bursts the subscribers' buffers are sized for.
        big = "x" * 40_000
        batch = []
        for _ in range(30):
            n += 1
            batch.append((key, {"n": n, "pad": big}))
        await publisher.publish(batch, [time.time()] * len(batch))
        await wait_until(lambda: sink.of(key)[-1:] == [n], 60, "the big batch fetched")
        assert consumer.own_records == 41
        await wait_until(lambda: len(consumer.own) == PARTITIONS, 60, "the partition left to the relay again")

        # A hand-off of the relay's that fails: the consumer fetches those records instead, from the
        # first one not handed on.
        sink.fail_next = True
        await publish("k1", "k2")
        await wait_until(lambda: n - 1 in sink.of("k1") and n in sink.of("k2"), 60, "the failed ones fetched")
        assert consumer.own_records == 41
        await wait_until(lambda: len(consumer.own) == PARTITIONS, 60, "the partitions left to the relay again")

        # The relay no longer alone: every partition goes back to the consumer, which delivers
        # what others publish anywhere.
        alone = False
        await wait_until(lambda: not consumer.own, 60, "the partitions given back")
        n += 1
        await foreign.send_and_wait(topic, orjson.dumps({"n": n}), key=b"k5")
        await publish("k6")
        await wait_until(lambda: n in sink.of("k6") and n - 1 in sink.of("k5"), 60, "both fetched")
        assert consumer.own_records == 41

        # Every record exactly once, each key's in publish order.
        numbers = [number for _, number in sink.records]
        assert sorted(numbers) == list(range(1, n + 1))
        for k in {k for k, _ in sink.records}:
            assert sink.of(k) == sorted(sink.of(k))
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await foreign.stop()
        await publisher.stop()


async def test_a_paused_consumer_waits_for_its_relay_without_spinning(kafka, topic):
    # Every partition left to the relay: getmany() has nothing to fetch, and must still wait its
    # timeout (a loop that came back at once would hold a core).
    await ensure_topic(kafka.bootstrap, topic, PARTITIONS, 1)
    consumer = FanoutConsumer(kafka.bootstrap, topic, f"fanout-{topic}", _Kept(), offset_reset="earliest")
    consumer.sole = lambda: True
    loops = 0
    settle = consumer._settle

    async def counted(c) -> None:
        nonlocal loops
        loops += 1
        await settle(c)

    consumer._settle = counted
    running = asyncio.create_task(consumer.run())
    try:
        await wait_until(lambda: len(consumer.own) == PARTITIONS, 120, "every partition left to the relay")
        before = loops
        await wait_until(lambda: loops >= before + 3, 60, "three more rounds of the consumer's loop")
        # Three rounds, each a getmany() of its full timeout (500 ms): had they come back at once,
        # thousands would have run in the time the wait took to see three.
        assert loops - before < 50
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
