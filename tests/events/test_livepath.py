"""The live path's hand-off and its delay bound (docs/design/scale/livepath.md).

- one process (memory://) hands events straight to its Dispatcher: the bus carries none;
- the Kafka consumer commits, in the background, exactly what it handed on: never past it,
  and a consumer stopped mid-batch leaves the group's next consumer starting there;
- an event older than CHATGQL_MAX_DELIVERY_DELAY_SECONDS is never delivered late: the
  subscriptions it was for end with DELIVERY_DELAYED (resync), and resync with messages(after:);
- a stale backlog is shed without reads or tasks per event, and buffers stay bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import uuid
from collections import defaultdict

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from chatgql.db import Database
from chatgql.events.bus import Bus, feed_dispatcher
from chatgql.events.consumer import DispatchSink, FanoutConsumer
from chatgql.events.dispatch import DeliveryDelayed, Dispatcher, MembershipCache, SubscriberOverflow
from chatgql.events.publish import BusPublisher, DispatchPublisher, KafkaPublisher, ensure_topic
from chatgql.events.relay import OutboxRelay
from chatgql.store import outbox

from ..conftest import RunningServer, make_settings
from ..support.live import ChatApi, subscribe_messages, wait_active_subscriptions, wait_leader, wait_until, ws_connect
from .conftest import kafka_settings

PARTITIONS = 8


async def test_one_process_hands_events_to_its_dispatcher_without_the_bus(migrated_url, kafka, topic, http):
    """memory:// with and without Kafka: the relay (no Kafka) or the consumer hands decoded events
    straight to the Dispatcher; nothing goes through the bus."""
    for settings in (make_settings(migrated_url), kafka_settings(migrated_url, kafka, topic)):
        async with RunningServer(settings) as server:
            runtime = server.runtime
            if runtime.consumer is not None:
                await asyncio.wait_for(runtime.consumer.assigned.wait(), 60)
                assert isinstance(runtime.consumer.sink, DispatchSink)
            await wait_leader(server)
            api = ChatApi.of(server, http)
            cid = await api.create_group(1, [2])
            async with await ws_connect(server, 2) as ws:
                op = await subscribe_messages(ws, cid)
                await wait_active_subscriptions(server, 1)
                dispatched = runtime.deps.dispatcher.dispatched
                for i in range(5):
                    await api.send(1, cid, f"m{i}")
                got = await op.collect(5)
            assert [e["messageNew"]["seq"] for e in got] == [1, 2, 3, 4, 5]
            assert runtime.deps.dispatcher.dispatched >= dispatched + 5
            assert sum(runtime.bus.events_published.values()) == 0
            assert sum(runtime.bus.events_received.values()) == 0


async def test_a_relay_read_deletes_the_rows_relayed_before_it_in_the_same_statement(migrated_url):
    """One round trip per relay cycle: the next read deletes the batch just published, never
    returns it again, and hands Kafka and the bus the payload's JSON text as stored."""
    database = await Database(migrated_url, max_size=2).open()
    try:
        async with database.connection() as conn:
            await outbox.append(conn, [(str(i % 7), {"n": i, "type": "t"}) for i in range(40)])
            for slots in (list(range(outbox.SLOTS)), outbox.shard_slots(0, 4)):
                first = await outbox.oldest(conn, slots, 5, text=True)
                assert orjson.loads(first[0].payload)["type"] == "t" and isinstance(first[0].created, float)
                second = await outbox.oldest(conn, slots, 5, delete=[row.id for row in first])
                assert second and not {row.id for row in first} & {row.id for row in second}
                assert min(row.id for row in second) > max(row.id for row in first)  # the next ones, in id order
                gone = await conn.fetchval(
                    "SELECT count(*) FROM outbox WHERE id = ANY($1::bigint[])", [row.id for row in first]
                )
                assert gone == 0
            await conn.execute("DELETE FROM outbox")
    finally:
        await database.close()


MESSAGES = "query($c: ID!) { messages(conversationId: $c, first: 50) { nodes { seq body } } }"


async def test_a_stalled_relay_ends_the_subscriptions_with_delivery_delayed_and_they_resync(migrated_url, http):
    """The relay stalls longer than the bound: the events it then relays are not delivered late;
    the subscriptions they were for (and only those) end with DELIVERY_DELAYED, and the client
    resyncs with messages(after:) and subscribes again, live at once."""
    settings = make_settings(migrated_url, run_relay=False, max_delivery_delay_seconds=1.0)
    async with RunningServer(settings) as server:
        api = ChatApi.of(server, http)
        busy = await api.create_group(1, [2])
        quiet = await api.create_group(1, [3])
        dispatcher = server.runtime.deps.dispatcher
        relay = OutboxRelay(server.runtime.deps.database, DispatchPublisher(dispatcher), shards=4)
        relaying = asyncio.create_task(relay.run())  # drains the groups' member events
        await wait_until(lambda: relay.is_leader, 15, "the relay to lead")
        relaying.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relaying
        async with await ws_connect(server, 2) as two, await ws_connect(server, 3) as three:
            one_conversation = await subscribe_messages(two, busy)
            everything = await subscribe_messages(two)
            other = await subscribe_messages(three, quiet)
            await wait_active_subscriptions(server, 3)
            for i in range(3):
                await api.send(1, busy, f"while stalled {i}")  # acknowledged; no relay runs
            await asyncio.sleep(1.3)  # older than the bound by the time a relay comes
            relaying = asyncio.create_task(relay.run())
            try:
                for op in (one_conversation, everything):
                    error = await op.error(timeout=20)
                    assert error.code == "LIMIT_EXCEEDED", error.errors
                    assert error.extensions["reason"] == "DELIVERY_DELAYED", error.errors
                    assert error.extensions["resync"] is True, error.errors
                    assert error.skipped == []  # nothing late was delivered before it
                assert dispatcher.delayed >= 2
                # The quiet conversation's subscriber was not behind anything: still live.
                await api.send(1, quiet, "fresh")
                assert (await other.next())["messageNew"]["seq"] == 1
                # Resync: everything acknowledged is there, then live again.
                nodes = (await api.data(MESSAGES, {"c": busy}, user=2))["messages"]["nodes"]
                assert [n["seq"] for n in nodes] == [1, 2, 3]
                again = await subscribe_messages(two, busy)
                await wait_active_subscriptions(server, 2)
                await api.send(1, busy, "live")
                assert (await again.next())["messageNew"]["seq"] == 4
            finally:
                relaying.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relaying


def _dispatcher(max_delay: float, buffer: int = 100) -> tuple[Dispatcher, list[int]]:
    loads: list[int] = []

    async def members(conversation_id: int, subscribed: list[str]) -> tuple[int, list[str]]:
        loads.append(conversation_id)
        return 50, [str(u) for u in range(1, 51)]

    return Dispatcher(MembershipCache(members), buffer=buffer, max_delay=max_delay), loads


def _event(cid: int, seq: int) -> dict:
    return {"type": "message.new", "conversationId": cid, "seq": seq, "senderId": "1", "body": "x"}


async def _next(subscription) -> dict:
    return await asyncio.wait_for(subscription.__anext__(), 5)


async def test_the_commit_time_travels_through_the_bus_beside_the_event_not_in_it():
    """BusPublisher (and the consumer's BusSink) wrap the event in the envelope; the feed opens it:
    the subscriber gets the event's JSON unchanged, and a stale one is shed by the bound."""
    bus = Bus("memory://")
    await bus.connect()
    dispatcher, _ = _dispatcher(max_delay=1.0)
    ready = asyncio.Event()
    feed = asyncio.create_task(feed_dispatcher(bus, dispatcher, ready, heartbeat_seconds=0.2))
    try:
        await asyncio.wait_for(ready.wait(), 10)
        publisher = BusPublisher(bus)
        async with dispatcher.subscribe("2", 1, "message.new") as sub:
            await publisher.publish([("1", _event(1, 1))], [time.time()])
            assert await _next(sub) == _event(1, 1)
            await bus.publish(orjson.dumps(_event(1, 2)).decode(), "1")  # no envelope: no commit time
            assert await _next(sub) == _event(1, 2)
            await publisher.publish([("1", _event(1, 3))], [time.time() - 10])
            with pytest.raises(DeliveryDelayed):
                await _next(sub)
        assert dispatcher.shed == 1
    finally:
        feed.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feed
        await bus.disconnect()


async def test_a_reader_that_takes_an_event_too_late_ends_with_delivery_delayed():
    """A slow socket: the event sat in the subscription's buffer past the bound."""
    dispatcher, _ = _dispatcher(max_delay=0.3)
    async with dispatcher.subscribe("2", 1, "message.new") as sub:
        await dispatcher.dispatch(_event(1, 1), time.time())
        assert (await _next(sub))["seq"] == 1  # in time
        await dispatcher.dispatch(_event(1, 2), time.time())
        await asyncio.sleep(0.4)
        try:
            await _next(sub)
        except DeliveryDelayed as error:
            assert error.extensions["reason"] == "DELIVERY_DELAYED" and error.extensions["resync"] is True
        else:
            raise AssertionError("a late event was delivered")
    # Without a commit time (unknown) or without a bound, nothing is ever too late.
    unbounded, _ = _dispatcher(max_delay=0)
    async with unbounded.subscribe("2", 1, "message.new") as sub:
        await unbounded.dispatch(_event(1, 1), time.time() - 3600)
        await dispatcher.dispatch(_event(1, 2))
        assert (await _next(sub))["seq"] == 1


async def test_a_stale_flood_is_shed_without_reads_or_tasks_and_every_buffer_stays_bounded():
    dispatcher, loads = _dispatcher(max_delay=1.0, buffer=100)
    async with contextlib.AsyncExitStack() as stack:
        readers = [
            await stack.enter_async_context(dispatcher.subscribe(str(uid), 1, "message.new")) for uid in range(2, 22)
        ]
        everyone = await stack.enter_async_context(dispatcher.subscribe("30", None, "message.new"))
        bystander = await stack.enter_async_context(dispatcher.subscribe("2", 7, "message.new"))
        outsider = await stack.enter_async_context(dispatcher.subscribe("99", None, "message.new"))  # not a member
        await dispatcher.dispatch(_event(1, 0), time.time())  # fresh: delivered, and the members are known
        assert loads == [1]
        tasks = len(asyncio.all_tasks())
        stale = time.time() - 10
        await dispatcher.dispatch_many([(_event(1, seq), stale) for seq in range(1, 20_001)])
        assert loads == [1]  # shedding reads nothing
        assert len(asyncio.all_tasks()) == tasks  # and starts nothing per event
        assert dispatcher.shed == 20_000
        for sub in [*readers, everyone]:  # the all-conversations subscriber of a member too
            assert sub._pending is None  # what was buffered (seq 0) is dropped with it
            try:
                await _next(sub)
            except DeliveryDelayed:
                pass
            else:
                raise AssertionError("a subscription survived a shed event")
        assert bystander._failure is None  # another conversation's subscriber is left alone
        assert outsider._failure is None  # and a non-member's all-conversations one

    # Membership not known here: every all-conversations subscriber may be a member, all end.
    dispatcher, loads = _dispatcher(max_delay=1.0)
    async with dispatcher.subscribe("99", None, "message.new") as maybe:
        await dispatcher.dispatch(_event(1, 1), time.time() - 10)
        assert loads == [] and dispatcher.delayed == 1
        with pytest.raises(DeliveryDelayed):
            await _next(maybe)

    # Fresh events flooding a reader that never reads: its buffer holds at most `buffer`.
    dispatcher, loads = _dispatcher(max_delay=1.0, buffer=100)
    async with dispatcher.subscribe("2", 1, "message.new") as idle, dispatcher.subscribe("3", 1, "message.new") as fast:
        got = []
        for start in range(0, 5_000, 100):  # a batch at most the buffer: the fast reader keeps up
            await dispatcher.dispatch_many([(_event(1, s), time.time()) for s in range(start + 1, start + 101)])
            assert idle._pending is None or len(idle._pending) <= 100
            while fast._pending:
                got.append((await _next(fast))["seq"])
        assert got == list(range(1, 5_001))
        assert loads == [1]  # one membership read, then the cache
        try:
            await _next(idle)
        except SubscriberOverflow:
            pass
        else:
            raise AssertionError("the idle reader was never cut off")
    gc.collect()


async def _committed(bootstrap: str, group: str) -> dict:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}


class _Recorder:
    """A sink that records what it was handed; from hand-off `block_at` on it never returns."""

    def __init__(self, block_at: int | None = None) -> None:
        self.handed: dict = {}  # tp -> offset after the last record handed on
        self.first: dict = {}  # tp -> first offset seen
        self.keys: set[str] = set()
        self.calls = 0
        self.block_at = block_at
        self.blocked = asyncio.Event()

    async def hand_on(self, records) -> None:
        self.calls += 1
        if self.calls == self.block_at:
            self.blocked.set()
            await asyncio.Event().wait()  # stuck mid-batch, until the consumer is killed
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            self.first.setdefault(tp, record.offset)
            self.handed[tp] = record.offset + 1
            self.keys.add(f"{record.key.decode()}:{record.value.decode()}")


async def test_the_consumer_commits_in_the_background_only_what_it_handed_on_and_a_restart_resumes_there(kafka):
    group = f"livepath-{uuid.uuid4().hex[:8]}"
    topic = f"livepath.{uuid.uuid4().hex[:8]}"
    await ensure_topic(kafka.bootstrap, topic, PARTITIONS, 1)
    publisher = KafkaPublisher(kafka.bootstrap, topic)
    await publisher.start()
    total = 400
    try:
        batch = [(str(n % 40), {"n": n}) for n in range(total)]
        await publisher.publish(batch, [time.time()] * total)
    finally:
        await publisher.stop()
    expected = {f"{key}:" + f'{{"n":{payload["n"]}}}' for key, payload in batch}

    first = _Recorder(block_at=3)
    consumer = FanoutConsumer(kafka.bootstrap, topic, group, first, offset_reset="earliest", max_records=60)
    running = asyncio.create_task(consumer.run())
    try:
        await asyncio.wait_for(first.blocked.wait(), 60)
        # While the loop is stuck in a hand-off, the committer commits what was handed before it.
        await wait_until(
            lambda: _committed_equals(kafka.bootstrap, group, first.handed),
            20,
            "the handed-on offsets committed",
            interval=0.3,
        )
    finally:
        running.cancel()  # killed mid-batch
        with contextlib.suppress(asyncio.CancelledError):
            await running
    committed = await _committed(kafka.bootstrap, group)
    assert committed == first.handed  # never past what was handed on; the stuck batch is not counted
    assert len(first.keys) < total

    second = _Recorder()
    consumer = FanoutConsumer(kafka.bootstrap, topic, group, second, offset_reset="earliest")
    running = asyncio.create_task(consumer.run())
    try:
        await wait_until(lambda: len(first.keys | second.keys) == total, 60, "every record handed on")
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert first.keys | second.keys == expected  # nothing lost over the kill
    for tp, offset in second.first.items():
        assert offset == committed.get(tp, 0), (tp, offset, committed)  # resumed at the commit, none skipped
    by_partition: dict = defaultdict(int)
    for tp, end in (await _committed(kafka.bootstrap, group)).items():
        by_partition[tp] = end
    assert by_partition == {**first.handed, **second.handed}


async def _committed_equals(bootstrap: str, group: str, handed: dict) -> bool:
    return bool(handed) and await _committed(bootstrap, group) == handed
