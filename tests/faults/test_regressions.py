"""Bugs the fault scenarios found, each pinned down by a quick test of its own.

- The Kafka publisher never got going again after Kafka came back (found by
  the Kafka outage scenario): a publish failed while the broker was shutting
  down, the publisher replaced its producer, the replacement could not start
  (Kafka gone), and every later publish waited forever on that never started
  producer; the relay stalled for good and the outbox only grew.
- Nothing published on a redis:// bus was ever received (found by the split
  process scenarios: no live event ever reached a subscriber): the Redis
  backend then in use woke its listener before SUBSCRIBE completed, the listener
  found no channel, stopped, and never listened again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import pytest

from chatgql.events.bus import Bus, feed_dispatcher
from chatgql.events.dispatch import Dispatcher, MembershipCache, StreamInterrupted
from chatgql.events.publish import KafkaPublisher

from ..conftest import free_port
from ..support.infra import LoopbackProxy, create_topic, topic_end
from .scenario import Infra

pytestmark = [pytest.mark.faults, pytest.mark.kafka]


async def test_publishing_resumes_when_kafka_is_back_after_failures_while_it_was_unreachable(infra: Infra):
    kafka = infra.kafka
    topic = f"faults.publisher.{uuid.uuid4().hex[:8]}"
    await create_topic(kafka.bootstrap, topic)
    proxy = LoopbackProxy(kafka.proxy_port, kafka.proxied_port)  # the only way to the broker
    await proxy.start()
    publisher = KafkaPublisher(kafka.proxied_bootstrap, topic)
    try:
        await publisher.start()
        await publisher.publish([("1", {"n": 1})])

        proxy.refuse()  # Kafka unreachable from here on
        with pytest.raises(Exception):  # noqa: B017 - any failure will do. A publish that fails (here: a value that cannot be serialized)
            await publisher.publish([("1", {"n": {"a set"}}), ("1", {"n": 2})])
        for _ in range(2):  # and a few while Kafka is away (failing or given up on, as the relay does)
            with pytest.raises(Exception):  # noqa: B017 - failing or given up on, either way
                async with asyncio.timeout(10):
                    await publisher.publish([("1", {"n": 2})])

        proxy.restore()
        async with asyncio.timeout(60):
            await publisher.publish([("1", {"n": 3})])
        assert await topic_end(kafka.bootstrap, topic) >= 2
    finally:
        await publisher.stop()
        await proxy.close()


async def test_a_redis_bus_delivers_what_is_published_on_it_also_after_a_reconnect(infra: Infra):
    publisher, listener = Bus(infra.redis.url), Bus(infra.redis.url)
    await publisher.connect()
    await listener.connect()
    try:
        for round_ in range(2):
            async with listener.subscribe() as subscriber:
                await publisher.publish(f'{{"round": {round_}}}')
                event = await asyncio.wait_for(subscriber.get(), 10)
                assert event.message == f'{{"round": {round_}}}'
            await listener.reconnect()
    finally:
        await listener.disconnect()
        await publisher.disconnect()


async def test_a_subscription_taken_while_the_bus_feed_is_down_is_told_to_resync(infra: Infra):
    """A subscriber told STREAM_INTERRUPTED subscribes again at once, as a
    client does; if the feed is still down then, what is published before it
    is back never reaches that subscription, and nothing may leave it
    believing it saw everything."""
    proxy = LoopbackProxy(free_port(), infra.redis.port)  # the feed's only way to Redis
    await proxy.start()
    feed_bus, publisher = Bus(f"redis://127.0.0.1:{proxy.port}"), Bus(infra.redis.url)
    await feed_bus.connect()
    await publisher.connect()

    async def members(conversation_id: int, subscribed: list[str]) -> tuple[int, list[str]]:
        return 1, ["1"]  # (member_count, member ids)

    dispatcher = Dispatcher(MembershipCache(members), buffer=100)
    ready = asyncio.Event()
    feed = asyncio.create_task(feed_dispatcher(feed_bus, dispatcher, ready, heartbeat_seconds=0.25))

    def message(seq: int) -> str:
        return json.dumps({"type": "message.new", "conversationId": 1, "seq": seq})

    async def next_event(subscription) -> dict:
        async for event in subscription:
            return event
        raise AssertionError("the subscription ended without an error")

    try:
        await asyncio.wait_for(ready.wait(), 10)
        async with dispatcher.subscribe("1", None, "message.new") as early:
            await publisher.publish(message(1))
            assert (await asyncio.wait_for(next_event(early), 10))["seq"] == 1
            proxy.refuse()  # the feed loses Redis
            with pytest.raises(StreamInterrupted):
                await asyncio.wait_for(next_event(early), 30)
        async with dispatcher.subscribe("1", None, "message.new") as late:  # subscribes again at once
            await publisher.publish(message(2))  # nobody listens for the feed: lost for the live path
            await asyncio.sleep(0.5)
            proxy.restore()
            deadline = asyncio.get_running_loop().time() + 30
            while True:  # until the feed is back and passes events on again
                await publisher.publish(message(3))
                try:
                    event = await asyncio.wait_for(next_event(late), 0.5)
                except TimeoutError:
                    assert asyncio.get_running_loop().time() < deadline, "the feed never came back"
                    continue
                except StreamInterrupted:
                    break  # told: it resyncs and will find seq 2
                raise AssertionError(f"got {event} after missing seq 2, and was never told")
    finally:
        feed.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feed
        await feed_bus.disconnect()
        await publisher.disconnect()
        await proxy.close()


async def test_a_task_publishing_on_a_redis_bus_ends_when_cancelled(infra: Infra):
    """redis-py now and then swallows a cancellation that lands inside a
    command; the bus must not: the feed's heartbeat task, the consumer loop
    and whoever waits for them to end (shutdown, a feed reconnect) rely on it."""
    bus = Bus(infra.redis.url)
    await bus.connect()
    hung = 0
    try:
        for _ in range(150):

            async def publish_forever() -> None:
                while True:
                    await bus.publish('{"type": "bus.heartbeat", "from": "test"}')

            task = asyncio.create_task(publish_forever())
            await asyncio.sleep(0.01)
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=5)
            if not done:
                hung += 1
                while not task.done():  # end it anyway, and go on counting
                    task.cancel()
                    await asyncio.wait({task}, timeout=0.1)
    finally:
        await bus.disconnect()
    assert hung == 0, f"{hung} of 150 cancelled publishing tasks went on publishing"
