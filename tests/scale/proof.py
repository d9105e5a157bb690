"""The one-machine proof of the scaled topology (issue 13, item 7).

    scripts/proof                    # or: python -m tests.scale.proof
    python -m pytest -q tests/scale  # the same run, as a test (CI)

tests/scale/topology.py starts 3 API processes, 2 relays (4 shards), 2
consumers, Kafka (6 partitions) and a 3-master Redis Cluster. 50 group
conversations: 48 small ones (3 senders and a watcher each), a hot one (12
senders, about a quarter of their sends) and a big group (284 members). 24
senders send over HTTP spread over the 3 API processes (a failed call is
retried with the same clientMsgId, on the next process: an unacknowledged send
may be stored, an acknowledged one must be stored once) and mark read; 31
websocket subscribers of messageNew are spread over the API processes. While
the load runs, four faults in turn, each measured:

1. SIGKILL of a relay leading shards: time until the other leads every slot
   (takeover), and until a message of a dead shard sent after the kill is live;
2. SIGKILL of a consumer: time until the survivor owns every partition
   (rebalance), until it committed past every offset there was at the kill
   (lag drained), and until a message on every partition is live;
3. SIGKILL of an API process (restarted a second later): its subscribers
   reconnect, its senders retry on the others;
4. restart of one Redis master: subscriptions end with the resync error and
   subscribe again; the consumer re-publishes from its last commit.

Then the fault suite's checks (tests/faults/scenario.py): every acknowledged
message stored once and as acknowledged, gap-free seqs, every subscriber holds
every message of its conversations in seq order after dedupe (live, or fetched
with sync after a drop or a resync), no watermark moved back, the outbox is
empty and the consumer group's lag is 0. The counts and the times go to
stdout and tests/scale/out/proof.md. No timing is asserted: the times are
measured and reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from aiokafka.partitioner import DefaultPartitioner

from ..conftest import REPO, create_engine
from ..faults.scenario import Result, check_stored, check_subscriber, check_watermarks, read_stored
from ..support.load import CREATE_GROUP, Api, Load, Retryable, Subscriber, WatermarkMonitor, catch_up, token_settings
from .report import Report, SubscriberCounts
from .topology import Topology

OUT = REPO / "tests" / "scale" / "out"
OWNER = 500  # creates every conversation, member of all of them, subscribes, never sends
SENDERS = list(range(1, 25))
HOT_SENDERS = SENDERS[:12]
WATCHERS = list(range(501, 510))  # members of the hot, the big and 5-6 small conversations
SILENT = list(range(1001, 1251))  # members of the big group only
SMALL = 48
HOT_WEIGHT = 3  # a hot sender picks the hot conversation 3 times in 10
PACE = 0.15  # seconds between a sender's calls (+-50%)
SUBSCRIBERS = [OWNER, *WATCHERS, *SENDERS[:6], *SILENT[:15]]  # spread over the API processes in turn
BETWEEN_FAULTS = 5.0


@dataclass
class Plan:
    members: dict[str, set[int]] = field(default_factory=dict)  # conversation id -> its members
    kind: dict[str, str] = field(default_factory=dict)  # -> "small", "hot" or "big"

    def of(self, user: int) -> list[str]:
        return [cid for cid, members in self.members.items() if user in members]

    def named(self, kind: str) -> str:
        return next(cid for cid, k in self.kind.items() if k == kind)


class SpreadApi(Api):
    """GraphQL over HTTP through several API processes, like a load balancer: a user's
    calls go to one of them, and after a failure (retried by the caller) to the next."""

    def __init__(self, urls: list[str], http: httpx.AsyncClient) -> None:
        super().__init__(urls[0], http, token_settings())
        self.routes = [Api(url, http, self._settings) for url in urls]
        for route in self.routes:
            route._tokens = self._tokens
        self._home: dict[int, int] = {}

    async def call(self, user: int, query: str, variables: dict) -> dict:
        i = self._home.get(user, user % len(self.routes))
        try:
            return await self.routes[i].call(user, query, variables)
        except Retryable:
            self._home[user] = (i + 1) % len(self.routes)
            raise


class ProofLoad(Load):
    """The fault suite's senders, each sending to and marking read in its own conversations."""

    def __init__(self, api: Api, plan: Plan) -> None:
        super().__init__(api, SENDERS, list(plan.members), pace=PACE)
        hot = plan.named("hot")
        self._choices = {u: [*plan.of(u), *([hot] * (HOT_WEIGHT - 1) if u in HOT_SENDERS else [])] for u in SENDERS}

    def conversations_of(self, user: int) -> list[str]:
        return self._choices[user]


async def create_conversations(api: Api) -> Plan:
    plan = Plan()

    async def group(kind: str, members: set[int]) -> None:
        data = await api.call(OWNER, CREATE_GROUP, {"t": f"proof {kind}", "m": [str(u) for u in sorted(members)]})
        cid = data["createGroup"]["id"]
        plan.members[cid] = {OWNER, *members}
        plan.kind[cid] = kind

    for i in range(SMALL):
        await group("small", {SENDERS[(i + k) % len(SENDERS)] for k in range(3)} | {WATCHERS[i % len(WATCHERS)]})
    await group("hot", {*HOT_SENDERS, *WATCHERS})
    await group("big", {*SENDERS, *WATCHERS, *SILENT})
    return plan


class Seen:
    """What a subscriber was pushed, by (conversationId, seq), kept up to date incrementally."""

    def __init__(self, subscriber: Subscriber) -> None:
        self.subscriber = subscriber
        self.keys: set[tuple[str, int]] = set()
        self._read = 0

    def has(self, keys: set[tuple[str, int]]) -> bool:
        events = self.subscriber.events
        for event in events[self._read :]:
            self.keys.add((event["conversationId"], event["seq"]))
        self._read = len(events)
        return keys <= self.keys


class Proof:
    def __init__(self, top: Topology) -> None:
        self.top = top
        self.report = Report()
        self._t0 = time.monotonic()

    def mark(self, what: str) -> None:
        subscribers = [s for _, _, s in getattr(self, "subscribers", [])]
        resyncs = sum(sum(s.resyncs.values()) for s in subscribers)
        drops = sum(s.disconnects for s in subscribers)
        so_far = f" [so far: {resyncs} resyncs, {drops} drops]" if subscribers else ""
        self.report.events.append(f"{time.monotonic() - self._t0:5.1f}s {what}{so_far}")
        print(self.report.events[-1], flush=True)

    async def run(self) -> Report:
        top = self.top
        self.engine = create_engine(top.database_url, pool_size=2, max_overflow=2)
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(8.0, connect=3.0), limits=httpx.Limits(max_connections=200))
        try:
            await self._run()
        finally:
            await self.http.aclose()
            await self.engine.dispose()
        return self.report

    async def _run(self) -> None:
        top = self.top
        api = self.api = SpreadApi([top.graphql_url(a) for a in top.apis], self.http)
        plan = self.plan = await create_conversations(api)
        self.mark(f"{len(plan.members)} conversations created")
        self.slots = await top.slot_of(list(plan.members))
        partitioner = DefaultPartitioner()
        everything = list(range(top.partitions))
        self.partition = {cid: partitioner(cid.encode(), everything, everything) for cid in plan.members}

        load = self.load = ProofLoad(api, plan)
        self.subscribers: list[tuple[int, int, Subscriber]] = []  # (user, API process index, subscriber)
        for n, user in enumerate(SUBSCRIBERS):
            index = n % len(top.apis)
            subscriber = Subscriber(top.ws_url(top.apis[index]), api.authorization(user))
            self.subscribers.append((user, index, subscriber))
            subscriber.start()
        self.owner = Seen(self.subscribers[0][2])
        monitor = WatermarkMonitor(self.engine)
        monitor.start()
        try:
            await self._warm_up()
            self.mark("every subscriber live on every conversation; load starts")
            stop = asyncio.Event()
            load_task = asyncio.create_task(load.run(stop, time.monotonic() + 600), name="load")
            try:
                for fault in (self.kill_a_relay, self.kill_a_consumer, self.kill_an_api_process, self.restart_a_master):
                    await asyncio.sleep(BETWEEN_FAULTS)
                    await fault()
                await asyncio.sleep(BETWEEN_FAULTS)
            except BaseException:
                load_task.cancel()
                raise
            finally:
                stop.set()
            self.mark("load stops")
            try:
                await asyncio.wait_for(load_task, 150)
            except TimeoutError:
                raise AssertionError("sends still unacknowledged 150 s after the load stopped") from None
            await self._settle()
            await monitor.sample()
        finally:
            for _, _, subscriber in self.subscribers:
                await subscriber.stop()
            await monitor.stop()
        await self._check(monitor)

    async def _warm_up(self) -> None:
        """One message per conversation, until every subscriber got those of its conversations live."""
        deadline = time.monotonic() + 120
        await asyncio.wait_for(asyncio.gather(*(s.subscribed.wait() for _, _, s in self.subscribers)), 60)
        while True:
            keys = set()
            for cid, members in self.plan.members.items():
                sender = min(members & set(SENDERS))
                ack = await self.load.send_one(sender, cid, time.monotonic() + 60)
                if ack is not None:
                    keys.add((cid, ack.seq))
            seen = [(Seen(s), {k for k in keys if user in self.plan.members[k[0]]}) for user, _, s in self.subscribers]
            with contextlib.suppress(AssertionError):
                await self.top.wait(lambda seen=seen: _true(all(s.has(k) for s, k in seen)), 5, "the warm-up")
                return
            if time.monotonic() > deadline:
                raise AssertionError("the live path did not work on every API process before the faults")

    async def _probe(self, cid: str) -> float:
        """Send a message to cid; seconds until it is live at the owner's subscriber (from the call)."""
        started = time.monotonic()
        sender = min(self.plan.members[cid] & set(SENDERS))
        ack = await self.load.send_one(sender, cid, time.monotonic() + 60)
        assert ack is not None, f"probe to {cid} not acknowledged"
        await self.top.wait(lambda: _true(self.owner.has({(cid, ack.seq)})), 60, f"probe {cid}/{ack.seq} live")
        return time.monotonic() - started

    # --- the faults ---------------------------------------------------------------------

    async def kill_a_relay(self) -> None:
        top = self.top
        leaders = await top.slot_leaders()
        victim = max(leaders, key=lambda r: len(leaders[r]))
        dead = leaders[victim]
        survivor = next(r for r in top.relays if r is not victim)
        probe = next(cid for cid in self.plan.members if self.slots[cid] in dead)
        killed_at = time.monotonic()
        victim.kill()
        self.mark(f"SIGKILL {victim.name} (leading {len(dead)} of 64 slots)")
        probe_task = asyncio.create_task(self._probe(probe))

        async def took_over() -> bool:
            return (await top.slot_leaders()).get(survivor, set()) >= set(range(64))

        takeover = await top.wait(took_over, 60, f"{survivor.name} to lead every slot", interval=0.02)
        await probe_task
        flowing = time.monotonic() - killed_at
        self.report.timing("relay", "SIGKILL to the standby leading every dead shard (all 64 slots)", takeover)
        self.report.timing("relay", "SIGKILL to a message of a dead shard, sent after the kill, live", flowing)
        self.mark(
            f"{survivor.name} leads every slot after {takeover:.2f} s; a dead shard's message live {flowing:.2f} s"
        )
        await asyncio.sleep(1)
        victim.start()
        back = await top.wait(top.relays_share_the_shards, 60, "the restarted relay to get its share back")
        self.mark(f"{victim.name} restarted, shares 2 + 2 again after {back:.1f} s")

    async def kill_a_consumer(self) -> None:
        top = self.top
        group = top.group_view
        victim = top.consumers[0]
        probes = [next(c for c in self.plan.members if self.partition[c] == p) for p in range(top.partitions)]
        ends = await group.ends()
        killed_at = time.monotonic()
        victim.kill()
        self.mark(f"SIGKILL {victim.name}")
        probe_tasks = [asyncio.create_task(self._probe(cid)) for cid in probes]

        async def one_owner() -> bool:
            return await group.owners() == [list(range(top.partitions))]

        rebalance = await top.wait(one_owner, 90, "the surviving consumer to own every partition", interval=0.1)

        async def caught_up() -> bool:
            committed = await group.committed()
            return all(committed.get(p, 0) >= end for p, end in ends.items())

        drained = await top.wait(caught_up, 60, "the group to commit past the offsets of the kill", interval=0.1)
        drained += rebalance
        await asyncio.gather(*probe_tasks)
        flowing = time.monotonic() - killed_at
        self.report.timing("consumer", "SIGKILL to the survivor owning every partition (rebalance)", rebalance)
        self.report.timing("consumer", "SIGKILL to every offset of the kill moment committed (lag drained)", drained)
        self.report.timing("consumer", "SIGKILL to a message on every partition, sent after the kill, live", flowing)
        self.mark(
            f"rebalanced after {rebalance:.1f} s, lag drained {drained:.1f} s, all partitions live {flowing:.1f} s"
        )
        victim.start()
        back = await top.wait(top.consumers_share_the_partitions, 90, "the restarted consumer to get partitions")
        self.mark(f"{victim.name} restarted, 3 + 3 partitions again after {back:.1f} s")

    async def kill_an_api_process(self) -> None:
        top = self.top
        index = 1
        victim = top.apis[index]
        mine = [s for _, i, s in self.subscribers if i == index]
        connects = [s.connects for s in mine]
        killed_at = time.monotonic()
        victim.kill()
        self.mark(f"SIGKILL {victim.name} ({len(mine)} subscribers on it)")
        await asyncio.sleep(1)
        victim.start()
        await victim.wait_ready()
        ready = time.monotonic() - killed_at

        async def reconnected() -> bool:
            return all(s.connects > c and s.subscribed.is_set() for s, c in zip(mine, connects, strict=True))

        await top.wait(reconnected, 60, f"the subscribers of {victim.name} to reconnect")
        back = time.monotonic() - killed_at
        self.report.timing("api", "SIGKILL, restart 1 s later, to /readyz answering 200", ready)
        self.report.timing("api", "SIGKILL to every subscriber of it connected and subscribed again", back)
        self.mark(f"{victim.name} ready {ready:.1f} s after the kill, its subscribers back after {back:.1f} s")

    async def restart_a_master(self) -> None:
        top = self.top
        assert top.redis is not None
        port = top.redis.ports[0]
        hot = self.plan.named("hot")
        stopped_at = time.monotonic()
        await top.redis.stop_node(port)
        self.mark(f"Redis master :{port} stopped")
        await asyncio.sleep(1)
        await top.redis.start_node(port)
        await top.wait(lambda: top.redis_cluster_ok(), 60, "the cluster to be ok again")
        ok = time.monotonic() - stopped_at
        self.mark(f"Redis master :{port} started, cluster ok {ok:.1f} s after the stop")
        hot_subscribers = [Seen(s) for user, _, s in self.subscribers if user in self.plan.members[hot]]
        while True:  # a hot message live at every subscriber of it (they resubscribe after the resync)
            started = time.monotonic()
            sender = HOT_SENDERS[0]
            ack = await self.load.send_one(sender, hot, time.monotonic() + 60)
            assert ack is not None
            with contextlib.suppress(AssertionError):
                key = {(hot, ack.seq)}
                await top.wait(lambda k=key: _true(all(s.has(k) for s in hot_subscribers)), 3, "the hot probe")
                break
            if started - stopped_at > 60:
                raise AssertionError("no hot message reached every subscriber within 60 s of the Redis restart")
        flowing = time.monotonic() - stopped_at
        self.report.timing("redis", "stop of a master, start 1 s later, to cluster_state:ok on every node", ok)
        self.report.timing(
            "redis", "stop to a hot message, sent after the restart, live at all its subscribers", flowing
        )
        self.mark(f"a hot message live at all {len(hot_subscribers)} of its subscribers {flowing:.1f} s after the stop")

    # --- the end ------------------------------------------------------------------------

    async def _settle(self) -> None:
        top = self.top
        drained = await top.wait(lambda: _eq(top.outbox_rows(), 0), 120, "the outbox to drain", interval=0.2)
        lag = await top.wait(
            lambda: _eq(top.group_view.lag(), 0), 120, "the consumer group's lag to be 0", interval=0.2
        )
        self.mark(f"outbox empty after {drained:.1f} s, consumer lag 0 after {lag:.1f} s more")
        stored = {(str(c), s) for c, s in await top.db.fetch("SELECT conversation_id, seq FROM message")}
        for user, _, subscriber in self.subscribers:
            mine = {k for k in stored if user in self.plan.members[k[0]]}
            seen = Seen(subscriber)

            async def settled(s: Subscriber = subscriber, seen: Seen = seen, mine: set = mine) -> bool:
                if s.interrupted:  # whatever it missed is sync's job: wait until the stream is quiet
                    return time.monotonic() - s.last_event_at > 3
                return seen.has(mine)

            await top.wait(settled, 120, f"subscriber {user}'s live stream to settle", interval=0.2)
        self.mark("every subscriber settled")
        self.report.outbox_end = await top.outbox_rows()
        self.report.lag_end = await top.group_view.lag()

    async def _check(self, monitor: WatermarkMonitor) -> None:
        report, load = self.report, self.load
        stored, last_seqs, watermarks = await read_stored(self.engine)
        total = Result("proof")
        check_stored(total, load, stored, last_seqs)
        check_watermarks(total, load, monitor, watermarks)
        if report.outbox_end != 0:
            total.failures.append(f"the outbox still holds {report.outbox_end} events")
        if report.lag_end != 0:
            total.failures.append(f"the consumer group's lag is {report.lag_end}")
        if monitor.samples == 0:
            total.failures.append("the watermark monitor never got a sample")
        report.total = total
        report.reads = len(load.reads)
        report.errors = dict(load.stats.errors.most_common(8))
        for _, _, subscriber in self.subscribers:
            report.resync_reasons.update(subscriber.resyncs)
        deadline = time.monotonic() + 120
        for user, index, subscriber in self.subscribers:
            conversations = self.plan.of(user)
            mine = [m for m in stored if user in self.plan.members[m["conversationId"]]]
            held: dict[str, list[int]] = defaultdict(list)
            for cid, seq in subscriber.unique():
                held[cid].append(seq)
            fetched = await catch_up(self.api, user, held, conversations, deadline, load.stats)
            result = Result(f"user {user}")
            check_subscriber(result, subscriber, mine, fetched)
            report.subscribers.append(
                SubscriberCounts.of(user, index + 1, len(conversations), mine, result, subscriber, fetched)
            )


async def _true(value: bool) -> bool:
    return value


async def _eq(awaitable, expected) -> bool:
    return await awaitable == expected


async def run_proof(out: Path = OUT) -> Report:
    """Start the topology, run the proof, write out/proof.md; the report (failures in it)."""
    started = time.monotonic()
    async with Topology(out) as top:
        print(f"topology up in {time.monotonic() - started:.1f} s (logs in {out})", flush=True)
        report = await Proof(top).run()
    report.seconds = time.monotonic() - started
    path = report.write(out / "proof.md")
    print(report.markdown(), flush=True)
    print(f"(also in {path})", flush=True)
    return report


def main() -> None:
    report = asyncio.run(run_proof())
    sys.exit(1 if report.failures else 0)


if __name__ == "__main__":
    main()
