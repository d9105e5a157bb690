"""The Redis Cluster bus (redis+cluster://): two API processes on one database and
one Kafka topic, a 3-master cluster between them (scripts/redis-cluster.sh).

- every subscriber, on either process, gets every message of its conversations,
  in order; a process whose subscriptions name conversations receives only the
  events of their buckets (counted by its feed, against what both published);
- a stalled master (SIGSTOP: connections open, nothing said) is caught by the
  heartbeat, a restarted master by its broken connections: the subscriptions
  are told to resync, and with messages(last:) and a new subscription every
  subscriber ends with every message, gap-free;
- rate limits are shared: one user sending through both processes is limited at
  the configured rate, not twice it; with Redis gone, each process counts alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter

import pytest
from redis.asyncio.cluster import ClusterNode, RedisCluster

from chatgql.edge.ratelimit import RedisStore, SharedRateLimiter
from chatgql.errors import LimitExceeded
from chatgql.events.backends import RedisClusterBackend, cluster_nodes
from chatgql.events.bus import CHANNEL

from ..conftest import RunningServer, free_port, make_settings
from ..support.live import (
    ChatApi,
    SubscriptionError,
    collect_messages,
    outbox_empty,
    outbox_rows,
    subscribe_messages,
    wait_active_subscriptions,
    wait_leader,
    wait_until,
    ws_connect,
)
from .conftest import kafka_settings

HEARTBEAT_SECONDS = 0.25  # a stall is noticed after 8 of these


def bus_settings(migrated_url, kafka, topic, cluster, **overrides):
    return kafka_settings(
        migrated_url,
        kafka,
        topic,
        broadcast_url=cluster.url,
        bus_heartbeat_seconds=HEARTBEAT_SECONDS,
        **overrides,
    )


async def node_ports(cluster_url: str, channels: list[str]) -> dict[str, int]:
    """channel -> port of the master owning its slot."""
    client = RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in cluster_nodes(cluster_url)])
    await client.initialize()
    try:
        return {channel: client.get_node_from_key(channel).port for channel in channels}
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def two_servers(migrated_url, kafka, topic, cluster):
    """A (relay and consumer) and B (consumer), one consumer group, the cluster bus."""
    a = RunningServer(bus_settings(migrated_url, kafka, topic, cluster))
    b = RunningServer(bus_settings(migrated_url, kafka, topic, cluster, run_relay=False))
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(a)
        await asyncio.wait_for(a.runtime.consumer.assigned.wait(), 60)
        await stack.enter_async_context(b)
        await asyncio.wait_for(b.runtime.consumer.assigned.wait(), 60)
        await wait_leader(a)
        yield a, b


async def conversations_on_every_node(api: ChatApi, bus, cluster_url: str, per_node: int) -> list[str]:
    """Groups of users 1, 2, 3 until each master owns the buckets of at least per_node of them."""
    chosen: list[str] = []
    by_port: Counter[int] = Counter()
    while min(by_port.get(p, 0) for p in cluster_nodes_ports(cluster_url)) < per_node:
        cid = await api.create_group(1, [2, 3])
        port = (await node_ports(cluster_url, [bus.channel_for(cid)]))[bus.channel_for(cid)]
        if by_port[port] < per_node:
            by_port[port] += 1
            chosen.append(cid)
        assert len(chosen) + sum(by_port.values()) < 200
    return chosen


def cluster_nodes_ports(cluster_url: str) -> list[int]:
    return [port for _, port in cluster_nodes(cluster_url)]


async def quiet(engine, *servers) -> None:
    """Outbox drained and every consumer caught up, then a moment for the bus hop."""

    async def drained() -> bool:
        return await outbox_empty(engine) and all(s.runtime.consumer.lag == 0 for s in servers)

    await wait_until(drained, 30, "the outbox to drain and the consumers to catch up")
    await asyncio.sleep(0.5)


async def test_each_process_gets_its_buckets_and_every_subscriber_every_message_in_order(
    migrated_url, engine, kafka, topic, http, redis_cluster
):
    async with two_servers(migrated_url, kafka, topic, redis_cluster) as (a, b):
        api_a, api_b = ChatApi.of(a, http), ChatApi.of(b, http)
        conversations = await conversations_on_every_node(api_a, a.runtime.bus, redis_cluster.url, per_node=2)
        watched_on_b = conversations[:2]  # B's subscriptions name these two only
        b_channels = {b.runtime.bus.channel_for(cid) for cid in watched_on_b}

        async with (
            await ws_connect(a, 2) as ws_a,
            await ws_connect(b, 3) as ws_b,
            await ws_connect(b, 2) as ws_b2,
        ):
            everything_on_a = await subscribe_messages(ws_a)  # all of user 2's: every bucket
            on_b = [await subscribe_messages(ws_b, cid) for cid in watched_on_b]
            # a second subscriber of the same conversation on B: the bucket is subscribed once
            twice_on_b = await subscribe_messages(ws_b2, watched_on_b[0])
            await wait_active_subscriptions(a, 1)
            await wait_active_subscriptions(b, 3)
            assert b.runtime.bus.channels == b_channels
            assert len(a.runtime.bus.channels) == a.runtime.bus.buckets

            await quiet(engine, a, b)
            published_before = a.runtime.bus.events_published + b.runtime.bus.events_published
            received_before = Counter(b.runtime.bus.events_received)

            per_conversation = 15

            async def send_all(cid: str) -> None:
                for i in range(per_conversation):
                    await (api_a if i % 2 else api_b).send(1, cid, f"m{i}")

            await asyncio.gather(*(send_all(cid) for cid in conversations))

            expected = {cid: per_conversation for cid in conversations}
            duplicates: list[tuple[str, int]] = []
            got = await collect_messages(everything_on_a, expected, timeout=30, duplicates=duplicates)
            assert got == {cid: list(range(1, per_conversation + 1)) for cid in conversations}
            for op, cid in [*zip(on_b, watched_on_b, strict=True), (twice_on_b, watched_on_b[0])]:
                got = await collect_messages(op, {cid: per_conversation}, timeout=30, duplicates=duplicates)
                assert got == {cid: list(range(1, per_conversation + 1))}
            assert duplicates == []

            await quiet(engine, a, b)
            published = a.runtime.bus.events_published + b.runtime.bus.events_published - published_before
            received = b.runtime.bus.events_received - received_before
            # B's feed saw exactly what was published on its two buckets, and nothing else
            assert set(received) <= b_channels, received
            assert {ch: received[ch] for ch in b_channels} == {ch: published[ch] for ch in b_channels}
            assert sum(received.values()) >= 2 * per_conversation
            assert sum(received.values()) < sum(published.values())
            assert all(ch.startswith(CHANNEL + ".{") for ch in published)

        # the subscriptions are gone: B listens to nothing any more
        await wait_until(lambda: not b.runtime.bus.channels, 15, "B to unsubscribe its buckets (after 5 s)")


class Follower:
    """A subscriber that recovers as a client should: on a resync error it subscribes
    again, then pages forward through what it missed of its conversations; `seen` ends gap-free."""

    def __init__(self, server, api: ChatApi, user: int, conversation: str | None, conversations: list[str]) -> None:
        self.server = server
        self.api = api
        self.user = user
        self.conversation = conversation
        self.conversations = conversations
        self.seen: dict[str, set[int]] = {cid: set() for cid in conversations}
        self.resyncs = 0
        self.out_of_order: list[tuple[str, int, int]] = []

    def _registered(self) -> bool:
        # the dispatcher's indexes: user id -> subscriptions, per conversation or for all of them
        dispatcher = self.server.runtime.deps.dispatcher
        if self.conversation is None:
            return bool(dispatcher._by_user.get(self.user))
        return bool(dispatcher._by_conversation.get(int(self.conversation), {}).get(self.user))

    async def _history(self) -> None:
        # what it missed, paged forward from the end of what it holds without a gap (as a client's
        # "catch up": the sender may outrun any one page while a node is down)
        for cid in self.conversations:
            after = 0
            while after + 1 in self.seen[cid]:
                after += 1
            while True:
                data = await self.api.data(
                    "query($c: ID!, $a: String) { messages(conversationId: $c, first: 200, after: $a) "
                    "{ nodes { seq } pageInfo { hasNextPage endCursor } } }",
                    {"c": cid, "a": str(after) if after else None},
                    user=self.user,
                )
                page = data["messages"]
                self.seen[cid].update(node["seq"] for node in page["nodes"])
                if not page["pageInfo"]["hasNextPage"] or not page["nodes"]:
                    break
                after = page["nodes"][-1]["seq"]

    async def run(self) -> None:
        async with await ws_connect(self.server, self.user) as ws:
            while True:
                op = await subscribe_messages(ws, self.conversation)
                # as a client's "subscribe, then read what it missed": once the server holds it
                # (a subscription refused meanwhile is never registered: its error is read below)
                deadline = asyncio.get_running_loop().time() + 5
                while not self._registered() and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.02)
                await self._history()
                last: dict[str, int] = {}
                try:
                    while True:
                        event = (await op.next(timeout=3600))["messageNew"]
                        cid, seq = event["conversationId"], event["seq"]
                        if seq in self.seen[cid]:
                            continue  # already had it (history, or a copy after a consumer restart)
                        if seq <= last.get(cid, 0):
                            self.out_of_order.append((cid, last[cid], seq))
                        last[cid] = seq
                        self.seen[cid].add(seq)
                except SubscriptionError as error:
                    assert error.extensions.get("resync") is True, error.errors
                    self.resyncs += 1
                    await asyncio.sleep(0.2)  # as a client backs off


# The waits of the test below, each failing with what it waited for: the whole test's bound is
# above their sum, so that it is always one of them (and its report) that ends a failing run.
SETUP_SECONDS = 60 + 60 + 15 + 10 + 10  # two_servers (assignments, leader), the subscriptions
STALL_SECONDS = 15
RESTART_SECONDS = 15 + 60
EVERYTHING_SECONDS = 60
OUTER_SECONDS = SETUP_SECONDS + STALL_SECONDS + RESTART_SECONDS + EVERYTHING_SECONDS + 30


@pytest.mark.timeout(OUTER_SECONDS + 60)
async def test_a_stalled_or_restarted_master_ends_subscriptions_with_resync_and_nothing_is_lost(
    migrated_url, engine, kafka, topic, http, redis_cluster, caplog
):
    loop = asyncio.get_running_loop()
    started = loop.time()
    timeline: list[tuple[float, str]] = []

    def mark(what: str) -> None:
        timeline.append((round(loop.time() - started, 1), what))

    async with asyncio.timeout(OUTER_SECONDS), two_servers(migrated_url, kafka, topic, redis_cluster) as (a, b):
        mark("servers up")
        api_a, api_b = ChatApi.of(a, http), ChatApi.of(b, http)
        conversations = await conversations_on_every_node(api_a, a.runtime.bus, redis_cluster.url, per_node=1)
        followers = [Follower(a, api_a, 2, None, conversations)]
        followers += [Follower(b, api_b, 3, cid, [cid]) for cid in conversations]
        tasks = [asyncio.create_task(f.run()) for f in followers]

        def check_followers() -> None:
            for task in tasks:
                if task.done():
                    task.result()  # a follower that failed fails the test now

        def resynced(counts: list[int]) -> bool:
            check_followers()
            return all(f.resyncs > n for f, n in zip(followers, counts, strict=True))

        def missing(f: Follower) -> dict[str, list[int]]:
            return {c: sorted(set(range(1, sent.get(c, 0) + 1)) - f.seen[c]) for c in f.conversations}

        def everyone_has_everything() -> bool:
            check_followers()
            return not any(seqs for f in followers for seqs in missing(f).values())

        async def state() -> str:
            """What a failing run needs to be understood: each follower, the outbox, each consumer."""
            lines = [f"timeline {timeline}", f"sent {sent}"]
            for f in followers:
                lines.append(
                    f"follower user {f.user} on {'A' if f.server is a else 'B'} of {f.conversation or 'all'}: "
                    f"resyncs {f.resyncs}, registered {f._registered()}, missing {missing(f)}"
                )
            with contextlib.suppress(Exception):
                lines.append(f"outbox {await outbox_rows(engine)}")
            for name, s in (("A", a), ("B", b)):
                c = s.runtime.consumer
                lines.append(
                    f"{name}: consumer lag {c.lag}, restarts {c.restarts}, records {c.records}, "
                    f"assigned {sorted(tp.partition for tp in c.assignment())}, "
                    f"handed {sorted((tp.partition, o) for tp, o in c.handed.items())}, "
                    f"committed {sorted((tp.partition, o) for tp, o in c.committed.items())}; "
                    f"bus channels {len(s.runtime.bus.channels)}, subscriptions {s.runtime.deps.dispatcher.active}"
                )
            return "\n".join(lines)

        sent: dict[str, int] = {}
        stop_sending = asyncio.Event()

        async def send(cid: str) -> None:
            i = 0
            while not stop_sending.is_set():
                try:
                    sent[cid] = await (api_a if i % 2 else api_b).send(1, cid, f"m{i}")
                except Exception:  # noqa: BLE001 - a send refused or cut off is retried by a client; not counted
                    pass
                i += 1
                await asyncio.sleep(0.05)

        senders: list[asyncio.Task] = []
        try:
            try:
                await wait_active_subscriptions(a, 1)
                await wait_active_subscriptions(b, len(conversations))
                senders = [asyncio.create_task(send(cid)) for cid in conversations]
                await asyncio.sleep(1)

                victim = redis_cluster.ports[1]
                # 1. a stall: the node says nothing, its connections stay open; only the heartbeat can tell
                caplog.clear()
                mark("pause")
                redis_cluster.pause_node(victim)
                try:
                    await wait_until(
                        lambda: resynced([0] * len(followers)), STALL_SECONDS, "every subscriber told to resync (stall)"
                    )
                    mark("resynced (stall)")
                finally:
                    redis_cluster.resume_node(victim)
                    mark("resume")
                assert any(r.exc_info and _a_stall(r.exc_info[1]) for r in caplog.records), (
                    "the heartbeat did not report the stall"
                )
                await asyncio.sleep(1)

                # 2. a restart: its connections break
                before = [f.resyncs for f in followers]
                mark("stop")
                await redis_cluster.stop_node(victim)
                try:
                    # Told while the node is down, or (when the feed was still reconnecting after the stall
                    # above, which ends nobody twice) as soon as it is back: either way, every one of them.
                    with contextlib.suppress(AssertionError):
                        await wait_until(lambda: resynced(before), 15, "resync while the node is down")
                        mark("resynced (down)")
                finally:
                    await redis_cluster.start_node(victim)
                    mark("started")
                await wait_until(
                    lambda: resynced(before),
                    RESTART_SECONDS - 15,
                    "every subscriber listening on the restarted node told to resync",
                )
                mark("resynced (restart)")
                await asyncio.sleep(2)
            finally:
                stop_sending.set()
                await asyncio.gather(*senders, return_exceptions=True)
                mark("senders stopped")

            await wait_until(everyone_has_everything, EVERYTHING_SECONDS, "every follower to have every message sent")
            mark("everything")
        except (AssertionError, TimeoutError) as error:
            raise AssertionError(f"{error!r}\n{await state()}") from error
        except asyncio.CancelledError:  # the whole test's bound: past every wait above, yet say where it was
            print(f"cancelled (the test's bound of {OUTER_SECONDS} s)\n{await state()}")
            raise
        finally:
            for task in tasks:
                task.cancel()
            # bounded: a follower that outlives its cancellation (as one did in Operation.next's wait_for,
            # on Python 3.11) is a failure of its own, not a wait for the whole test's bound
            _, alive = await asyncio.wait(tasks, timeout=10)
            assert not alive, f"{len(alive)} follower(s) still running 10 s after they were cancelled"
        for f in followers:
            assert f.out_of_order == []
            for cid in f.conversations:
                assert f.seen[cid] == set(range(1, max(f.seen[cid]) + 1)), f"gap in {cid} for user {f.user}"
        assert all(n >= 5 for n in sent.values()), sent
        print(f"timeline {timeline}")


async def test_rate_limits_are_shared_by_the_processes_and_counted_alone_without_redis(
    migrated_url, http, redis_cluster, caplog
):
    limits = {
        "rate_send_per_second": 0.05,
        "rate_send_burst": 6,
        "bus_heartbeat_seconds": HEARTBEAT_SECONDS,
        # Redis answering within the default 250 ms is the machine's business: beside another test
        # worker it once did not, and each process counted alone (8 sent, not 6). The fallback has
        # its own part below.
        "shared_rate_limit_timeout_seconds": 30,
    }
    a = RunningServer(make_settings(migrated_url, broadcast_url=redis_cluster.url, **limits))
    b = RunningServer(make_settings(migrated_url, broadcast_url=redis_cluster.url, run_relay=False, **limits))
    async with a, b:
        api_a, api_b = ChatApi.of(a, http), ChatApi.of(b, http)
        cid = await api_a.create_group(1, [2])

        async def attempt(i: int) -> str:
            api = api_a if i % 2 else api_b
            response = await api.execute(
                'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "x") '
                "{ message { seq } } }",
                {"c": cid, "m": str(uuid.uuid4())},
                user=1,
            )
            if response.get("errors"):
                return response["errors"][0]["extensions"]["reason"]
            return "sent"

        # 20 at once through both: the burst of 6 is the user's, not each process's
        outcomes = Counter(await asyncio.gather(*(attempt(i) for i in range(20))))
        assert outcomes == {"sent": 6, "RATE_LIMITED": 14}, outcomes

    # Redis gone: each limiter counts in its process, and says so once
    port = free_port()
    store = RedisStore(f"redis://127.0.0.1:{port}", timeout=0.25)
    limiter = SharedRateLimiter("sendMessage", 0.05, 2, store)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="chatgql.edge.ratelimit"):
        await limiter.check("7")
        await limiter.check("7")
        with pytest.raises(LimitExceeded) as limited:
            await limiter.check("7")
        assert limited.value.extensions["reason"] == "RATE_LIMITED"
    await store.close()
    assert store.fallbacks == 3
    assert len([r for r in caplog.records if "did not answer" in r.getMessage()]) == 1


async def test_the_cluster_backend_delivers_what_is_published_on_each_channel_it_subscribed(redis_cluster):
    """The BusBackend contract alone, without the Bus: buckets spread over the masters, each
    subscribed, each published on once, each message received once on its own channel."""
    backend = RedisClusterBackend(redis_cluster.url)
    await backend.connect()
    try:
        channels = [f"{CHANNEL}.{{{b}}}" for b in range(6)]
        for ch in channels:
            await backend.subscribe(ch)
        assert len(backend.listening_groups()) > 1  # more than one master listened to
        for ch in channels:
            await backend.publish(ch, ch)
        got = [await asyncio.wait_for(backend.next_published(), 5) for _ in channels]
        assert sorted((m.channel, m.message) for m in got) == sorted((ch, ch) for ch in channels)
        assert backend.next_published_nowait() is None
        assert backend.received == len(channels)
    finally:
        await backend.disconnect()


def _a_stall(error: BaseException) -> bool:
    """The heartbeat's verdict on a stalled node: beats sent that never came back, or a beat the
    node never took (its publish timed out): which one comes first depends on where the slot lives."""
    return "not even a heartbeat" in str(error) or "a heartbeat could not be sent" in str(error)
