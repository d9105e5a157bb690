"""One fault scenario: chatgql processes on a fresh database and topic, load
with client retries, a fault injected mid-load, then the checks.

The checks, from the database and from the subscriber's record:
- every acknowledged (conversationId, clientMsgId) is stored exactly once, with
  the acknowledged seq, sender and body; every message sent was acknowledged;
- seqs are 1..lastSeq with no gap in every conversation;
- the subscriber, after deduping by (conversationId, seq) and catching up with
  sync, holds exactly the stored messages, in seq order; what it was pushed
  live came in seq order; while it stayed connected the live path alone
  delivered everything (at-least-once);
- no watermark or lastSeq moved backward (sampled during the run, every
  markRead answer per device in order, and the final watermarks);
- the outbox drains to empty.

Beside the sends, the senders edit and delete their messages and react to anyone's (one call in
eight), and the subscriber's user changes its own read state (markRead, markUnread, markDelivered,
updateMembership), each retried until answered; the checks (check_changes, check_own_state):
- every acknowledged change is stored, once: its change seq holds it (kind, seq, who), each edit is
  one edit-history entry (a retried edit of the same body adds none), each reaction added or taken
  back one change, reaction counts equal their (message, user, emoji) rows;
- change seqs are 1..lastChangeSeq with no gap in every conversation;
- a client that went offline early converges to the server's messages (bodies, edits, tombstones,
  reactions) by sync with the two cursors it held (afterSeq, afterChangeSeq);
- the own read state ends as last acknowledged (markUnread's rewind in effect, mute/archive/pin as
  last set), no markUnread answered above fromSeq - 1, and the delivered watermark never moves back
  (sampled, and per answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import httpx
from sqlalchemy import text

from chatgql.db.embedded import read_postmaster
from chatgql.store.conversations import OWN_READ
from chatgql.store.outbox import RELAY_LOCK

from ..conftest import create_engine, free_port
from ..support.infra import (
    OUT,
    ChatProcess,
    FaultKafka,
    FaultPostgres,
    FaultRedis,
    LoopbackProxy,
    chat_env,
    create_topic,
    stable_port,
    topic_end,
)
from ..support.load import (
    Api,
    ChangeAck,
    Load,
    OfflineClient,
    OwnState,
    ReadStorm,
    Subscriber,
    WatermarkMonitor,
    catch_up,
    create_groups,
    read_history,
    token_settings,
)

OWNER = 100  # the subscriber: a member of every conversation who never sends
USERS = list(range(1, 9))  # eight senders, one client task each
CONVERSATIONS = 4
STORM_USERS = list(range(201, 231))  # read_storm: 30 more members, 3 devices each, marking read
STORM_DEVICES = 3
CHANGE_EVERY = 4  # one sender call in 4 edits, deletes or reacts (one in 8 marks read): some are cut by the fault
OFFLINE_AT = 1.0  # seconds into the load: the offline client reads its conversations and goes away


@dataclass
class Result:
    scenario: str
    sent: int = 0
    acked: int = 0
    retried: int = 0
    duplicate_acks: int = 0
    stored: int = 0
    delivered: int = 0
    duplicates: int = 0
    via_sync: int = 0
    outbox_end: int = -1
    lost: int = 0
    stored_twice: int = 0
    gaps: int = 0
    reorders: int = 0
    watermark_back: int = 0
    reads: int = 0
    drops: int = 0
    changes_sent: int = 0
    changes_acked: int = 0
    changes_retried: int = 0
    change_seqs: int = 0
    change_gaps: int = 0
    changes_lost: int = 0
    changes_twice: int = 0
    own_calls: int = 0
    own_wrong: int = 0
    diverged: int = -1
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    notes: str = ""


COLUMNS = [
    ("scenario", "scenario"),
    ("sent", "sent"),
    ("acked", "acknowledged"),
    ("retried", "retried"),
    ("duplicate_acks", "dup acks"),
    ("stored", "stored"),
    ("delivered", "delivered live"),
    ("duplicates", "dups before dedupe"),
    ("via_sync", "via sync"),
    ("outbox_end", "outbox at end"),
    ("lost", "lost"),
    ("stored_twice", "stored twice"),
    ("gaps", "seq gaps"),
    ("reorders", "reorders"),
    ("watermark_back", "watermark back"),
    ("reads", "markRead answered"),
    ("drops", "sub drops/resyncs"),
    ("changes_sent", "changes sent"),
    ("changes_acked", "changes acked"),
    ("changes_retried", "changes retried"),
    ("change_seqs", "change seqs"),
    ("change_gaps", "change-seq gaps"),
    ("changes_lost", "changes lost"),
    ("changes_twice", "applied twice"),
    ("own_calls", "own-state answered"),
    ("own_wrong", "own-state wrong"),
    ("diverged", "offline client diverged"),
    ("seconds", "s"),
]

RESULTS: list[Result] = []


def table(results: list[Result]) -> str:
    head = "| " + " | ".join(label for _, label in COLUMNS) + " | ok |"
    rule = "|" + "|".join("---" for _ in range(len(COLUMNS) + 1)) + "|"
    rows = []
    for r in results:
        cells = []
        for attr, _ in COLUMNS:
            value = getattr(r, attr)
            cells.append(f"{value:.0f}" if isinstance(value, float) else str(value))
        rows.append("| " + " | ".join(cells) + f" | {'yes' if not r.failures else 'NO'} |")
    return "\n".join([head, rule, *rows])


def write_results() -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "results.md"
    lines = ["# chatgql fault suite", "", table(RESULTS), ""]
    for r in RESULTS:
        if r.notes:
            lines.append(f"- {r.scenario}: {r.notes}")
        for failure in r.failures:
            lines.append(f"- {r.scenario} FAILED: {failure}")
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Infra:
    pg: FaultPostgres
    kafka: FaultKafka
    redis: FaultRedis


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float, interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if await predicate():
                return True
        except Exception:
            pass
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)


class Scenario:
    """The processes of one scenario and the handles a fault needs.

    topology "single": one `chatgql serve` (API, relay and consumer), memory:// bus.
    topology "split": `serve --no-relay --no-consumer`, `relays` x `chatgql relay`
    and one `chatgql consume`, on a redis:// bus.
    kafka_via_proxy / db_via_proxy: the API process reaches Kafka / PostgreSQL
    through a LoopbackProxy (self.proxy / self.db_proxy) that a fault can cut;
    relays_via_proxy: the relay processes reach Kafka through it;
    consumer_bus_via_proxy: the consumer process reaches Redis through it.
    users / conversations / pace: the senders (one client task each), how many group
    conversations they send to, and the pause between a sender's calls (seconds, +-50%).
    embedded: the API runs the default way, with an embedded PostgreSQL of its own in a
    fresh data directory (single topology; self.pgdata), instead of the suite's PostgreSQL.
    database_outage: the fault makes the database unavailable for a while: every failed call
    must have been answered UNAVAILABLE with retryAfter (or not reached the server), none
    INTERNAL_SERVER_ERROR.
    """

    def __init__(
        self,
        name: str,
        infra: Infra,
        *,
        topology: str = "single",
        relays: int = 1,
        kafka_via_proxy: bool = False,
        db_via_proxy: bool = False,
        relays_via_proxy: bool = False,
        consumer_bus_via_proxy: bool = False,
        users: list[int] | None = None,
        conversations: int = CONVERSATIONS,
        pace: float = 0.05,
        read_storm: bool = False,
        api_env: dict[str, str] | None = None,
        embedded: bool = False,
        database_outage: bool = False,
    ) -> None:
        self.name = name
        self.users = users or USERS
        self.conversation_count = conversations
        self.pace = pace
        self.read_storm = read_storm  # STORM_USERS x STORM_DEVICES clients mark read all along
        self.api_env = api_env or {}  # more settings of the API process
        self.infra = infra
        self.topology = topology
        self.relay_count = relays
        self.kafka_via_proxy = kafka_via_proxy
        self.db_via_proxy = db_via_proxy
        self.relays_via_proxy = relays_via_proxy
        self.consumer_bus_via_proxy = consumer_bus_via_proxy
        self.embedded = embedded
        self.database_outage = database_outage
        self.subscriber: Subscriber | None = None
        self.log_dir = OUT / name
        self.pgdata = self.log_dir / "data" / "pgdata"  # embedded
        self.topic = f"faults.{name}.{uuid.uuid4().hex[:8]}"
        self.database = f"faults_{name}"
        self.api: ChatProcess | None = None
        self.relays: list[ChatProcess] = []
        self.consumer: ChatProcess | None = None
        self.proxy: LoopbackProxy | None = None
        self.db_proxy: LoopbackProxy | None = None
        self.result = Result(name)
        self.events: list[str] = []  # what the fault did, when
        self._t0 = time.monotonic()

    def mark(self, what: str) -> None:
        self.events.append(f"{time.monotonic() - self._t0:.1f}s {what}")

    @property
    def processes(self) -> list[ChatProcess]:
        return [p for p in (self.api, *self.relays, self.consumer) if p is not None]

    async def __aenter__(self) -> Scenario:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for old in self.log_dir.glob("*.log"):
            old.unlink()
        infra = self.infra
        if self.embedded:
            assert self.topology == "single", "an embedded PostgreSQL serves one process"
            shutil.rmtree(self.pgdata.parent, ignore_errors=True)
            self.url = ""  # the API's own server: known once it runs
        else:
            self.url = await infra.pg.create_database(self.database)
            self.engine = create_engine(self.url, pool_size=2, max_overflow=2)
        await create_topic(infra.kafka.bootstrap, self.topic)

        bus = "memory://" if self.topology == "single" else infra.redis.url
        env = chat_env(self.url, infra.kafka.bootstrap, self.topic, bus)
        api_env = dict(env) | self.api_env
        if self.topology == "single":
            del api_env["CHATGQL_WORKERS"]  # the default: one worker per core but one (several: the hub between them)
        if self.embedded:
            del api_env["CHATGQL_DATABASE_URL"]
            api_env |= {"CHATGQL_DATA_DIR": str(self.pgdata.parent), "CHATGQL_MIGRATE_ON_START": "true"}
        relay_env = dict(env)
        consumer_env = dict(env)
        if self.consumer_bus_via_proxy:
            self.proxy = LoopbackProxy(free_port(), infra.redis.port)
            consumer_env["CHATGQL_BROADCAST_URL"] = f"redis://127.0.0.1:{self.proxy.port}"
        elif self.relays_via_proxy:
            self.proxy = LoopbackProxy(infra.kafka.proxy_port, infra.kafka.proxied_port)
            relay_env["CHATGQL_KAFKA_BOOTSTRAP_SERVERS"] = infra.kafka.proxied_bootstrap
        elif self.kafka_via_proxy:
            self.proxy = LoopbackProxy(infra.kafka.proxy_port, infra.kafka.proxied_port)
            api_env["CHATGQL_KAFKA_BOOTSTRAP_SERVERS"] = infra.kafka.proxied_bootstrap
        if self.db_via_proxy:  # beside any of the above: its own proxy
            self.db_proxy = LoopbackProxy(free_port(), infra.pg.port)
            api_env["CHATGQL_DATABASE_URL"] = infra.pg.url(self.database, self.db_proxy.port)
        for proxy in (self.proxy, self.db_proxy):
            if proxy is not None:
                await proxy.start()

        port = stable_port()  # the API restarts on it
        if self.topology == "single":
            self.api = ChatProcess(
                "api", ["serve", "--port", str(port), "--log-level", "warning"], api_env, self.log_dir, port
            )
        else:
            self.api = ChatProcess(
                "api",
                ["serve", "--port", str(port), "--log-level", "warning", "--no-relay", "--no-consumer"],
                api_env,
                self.log_dir,
                port,
            )
            self.relays = [
                ChatProcess(f"relay{i + 1}", ["relay"], relay_env, self.log_dir) for i in range(self.relay_count)
            ]
            self.consumer = ChatProcess("consumer", ["consume"], consumer_env, self.log_dir)
        for process in self.processes:
            process.start()
        await self.api.wait_ready()
        if self.topology == "single":  # the default `chatgql serve`: one worker per core but one
            workers = self.api.workers()
            expected = max(1, len(os.sched_getaffinity(0)) - 1)
            assert len(workers) == (expected if expected > 1 else 0), workers  # one: no worker processes
            self.mark(f"api: {len(workers)} workers")
        if self.embedded:
            self.url = embedded_url(self.pgdata)
            self.engine = create_engine(self.url, pool_size=2, max_overflow=2)
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(8.0, connect=3.0), limits=httpx.Limits(max_connections=100))
        self.client = Api(f"http://127.0.0.1:{port}/graphql", self.http, token_settings())
        self.ws_url = f"ws://127.0.0.1:{port}/graphql"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for process in self.processes:
            await asyncio.to_thread(process.stop)
        for proxy in (self.proxy, self.db_proxy):
            if proxy is not None:
                await proxy.close()
        with contextlib.suppress(Exception):
            await self.http.aclose()
        await self.engine.dispose()

    # --- fault helpers ------------------------------------------------------------------

    async def kill(self, process: ChatProcess) -> None:
        process.kill()
        self.mark(f"SIGKILL {process.name}")

    async def restart(self, process: ChatProcess) -> None:
        process.start()
        self.mark(f"started {process.name}")
        if process is self.api:
            await process.wait_ready()
            self.mark("api ready")

    async def kill_embedded_postmaster(self, timeout: float = 90) -> None:
        """SIGKILL the API's embedded postmaster (as the OOM killer does), then wait until
        the API, never restarted, serves again on a PostgreSQL it started itself."""
        assert self.embedded and self.api is not None
        postmaster = read_postmaster(self.pgdata)
        assert postmaster is not None and postmaster.pid is not None
        os.kill(postmaster.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        self.mark(f"SIGKILL the embedded postmaster (pid {postmaster.pid})")

        async def serving_again() -> bool:
            again = read_postmaster(self.pgdata)
            if again is None or again.pid == postmaster.pid or again.status != "ready":
                return False
            response = await self.http.get(self.client.url.removesuffix("/graphql") + "/readyz")
            return response.status_code == 200

        if not await wait_for(serving_again, timeout, interval=0.05):
            raise AssertionError(f"{self.name}: the API did not serve again in {timeout}s (logs in {self.log_dir})")
        self.mark(f"api ready again on a new postmaster, {time.monotonic() - killed_at:.1f}s after the kill")
        await self.engine.dispose()  # the suite's own connections died with the server
        if not self.api.alive or self.api.starts != 1:
            raise AssertionError(f"{self.name}: the API process was restarted or died (logs in {self.log_dir})")

    async def relay_leader(self, timeout: float = 60) -> ChatProcess:
        """A relay process leading outbox shards: holding slot advisory locks (RELAY_LOCK, slot),
        found by its connection's port. With several relays each may lead some shards."""
        deadline = time.monotonic() + timeout
        while True:
            async with self.engine.connect() as conn:
                ports = set(
                    (
                        await conn.execute(
                            text(
                                """
                    SELECT a.client_port FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                     WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :key AND l.objsubid = 2
                       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """
                            ),
                            {"key": RELAY_LOCK},
                        )
                    ).scalars()
                )
            for relay in self.relays:
                if relay.alive and relay.local_ports(self.infra.pg.port) & ports:
                    return relay
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no relay holds the outbox lock (logs in {self.log_dir})")
            await asyncio.sleep(0.2)

    async def kill_mid_stream(self, process: ChatProcess, frozen_for: float = 4) -> None:
        """Freeze the process while the load piles work up for it, let it go, and
        SIGKILL it a moment later: in the middle of working through the backlog."""
        process.freeze()
        self.mark(f"SIGSTOP {process.name}")
        await asyncio.sleep(frozen_for)
        process.thaw()
        await asyncio.sleep(random.uniform(0.05, 0.4))
        await self.kill(process)

    async def kill_relay_awaiting_acks(self, timeout: float = 30) -> ChatProcess:
        """SIGKILL the leading relay after Kafka stored a batch it sent and before
        the acknowledgement reached it: its outbox rows are published, not deleted."""
        assert self.relays_via_proxy and self.proxy is not None
        leader = await self.relay_leader()
        kafka = self.infra.kafka
        proxy = self.proxy
        before = await topic_end(kafka.bootstrap, self.topic)
        proxy.cut(replies_only=True)
        # From here on, whatever the relays send arrives and is stored, and the answer is held.
        self.mark(f"Kafka's replies to the relays held ({before} records in the topic)")
        deadline = time.monotonic() + timeout
        while (now := await topic_end(kafka.bootstrap, self.topic)) == before or not proxy.holding:
            if time.monotonic() > deadline:
                proxy.restore()
                raise AssertionError(f"{self.name}: the relay published nothing in {timeout}s")
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)  # under load the leader sends batch after batch: one is waiting now
        await self.kill(leader)
        proxy.restore()
        self.mark(f"replies flow again ({now - before}+ records were published unacknowledged)")
        return leader

    async def kill_consumer_awaiting_bus(self, timeout: float = 30) -> None:
        """SIGKILL the consumer after it handed an event of a batch to the bus and
        before it committed the batch's offsets: the proxy between it and Redis
        passes its PUBLISH on and holds Redis's reply (an integer, the number of
        receivers), so it waits right there."""
        assert self.consumer_bus_via_proxy and self.proxy is not None and self.consumer is not None
        proxy = self.proxy
        proxy.cut(replies_only=True)
        self.mark("Redis's replies to the consumer held")
        deadline = time.monotonic() + timeout
        while not any(chunk.startswith(b":") for chunk in proxy.holding):
            if time.monotonic() > deadline:
                proxy.restore()
                raise AssertionError(f"{self.name}: the consumer handed nothing to the bus in {timeout}s")
            await asyncio.sleep(0.02)
        await self.kill(self.consumer)
        proxy.restore()
        self.mark("Redis's replies flow again")

    async def outbox_rows(self) -> int:
        async with self.engine.connect() as conn:
            return (await conn.execute(text("SELECT count(*) FROM outbox"))).scalar_one()

    # --- the run ------------------------------------------------------------------------

    async def run(
        self,
        fault: Callable[[Scenario], Awaitable[None]],
        *,
        load_seconds: float = 15,
        after_fault: float = 5,
        retry_for: float = 150,
    ) -> Result:
        result = self.result
        client = self.client
        members = self.users + (STORM_USERS if self.read_storm else [])
        conversations = await create_groups(client, OWNER, members, self.conversation_count)
        load = Load(client, self.users, conversations, pace=self.pace, change_every=CHANGE_EVERY)
        own = OwnState(client, OWNER, conversations, load)
        offline = OfflineClient(client, OWNER, conversations)
        storm = ReadStorm(client, STORM_USERS, STORM_DEVICES, conversations, load) if self.read_storm else None
        subscriber = self.subscriber = Subscriber(self.ws_url, client.authorization(OWNER))
        monitor = WatermarkMonitor(self.engine)
        subscriber.start()
        monitor.start()
        try:
            await self._warm_up(load, subscriber, conversations)
            self._t0 = time.monotonic()

            # The load runs for load_seconds, and at least `after_fault` seconds after
            # the fault is over (so sends are tested on the recovered system too).
            stop = asyncio.Event()
            give_up_at = time.monotonic() + 600
            clients = [
                load.run(stop, give_up_at),
                own.run(stop, give_up_at),
                _later(OFFLINE_AT, offline.go_offline(give_up_at)),
            ]
            if storm is not None:
                clients.append(storm.run(stop, give_up_at))
            load_task = asyncio.create_task(_all(*clients), name="load")
            try:
                await asyncio.gather(fault(self), asyncio.sleep(load_seconds - after_fault))
                self.mark("fault over")
                await asyncio.sleep(after_fault)
            except BaseException:
                load_task.cancel()
                raise
            finally:
                stop.set()
            try:
                await asyncio.wait_for(asyncio.shield(load_task), retry_for)
            except TimeoutError:
                load_task.cancel()
                raise AssertionError(
                    f"{self.name}: sends still unacknowledged {retry_for}s after the load stopped "
                    f"(logs in {self.log_dir})"
                ) from None
            self.mark("load done")
            await self._note_batches()

            # Everything acknowledged must reach Kafka: the outbox drains.
            await wait_for(lambda: self._outbox_empty(), 180)
            result.outbox_end = await self.outbox_rows()
            self.mark(f"outbox at {result.outbox_end}")
            stored_keys = await self._stored_keys()
            if not subscriber.interrupted:
                # Connected all along: the live path alone must bring everything (at-least-once).
                async def live_complete() -> bool:
                    return stored_keys <= subscriber.unique().keys() or subscriber.interrupted

                await wait_for(live_complete, 120)
            else:

                async def quiet() -> bool:
                    return time.monotonic() - subscriber.last_event_at > 3

                await wait_for(quiet, 60)
            self.mark("live path settled")
            await asyncio.sleep(0.5)
            await monitor.sample()
        finally:
            await subscriber.stop()
            await monitor.stop()

        stored = await self._stored()
        live = subscriber.unique()
        held: dict[str, list[int]] = defaultdict(list)
        for cid, seq in live:
            held[cid].append(seq)
        fetched = await catch_up(client, OWNER, held, conversations, time.monotonic() + 120, load.stats)
        changes = await read_changes(self.engine)
        deadline = time.monotonic() + 120
        came_back = await offline.come_back(deadline)
        server = {cid: await read_history(client, OWNER, cid, deadline, load.stats) for cid in conversations}

        # A changed message's body is checked by check_changes; the message checks take the body it was sent with.
        changed = {k for k, v in changes.messages.items() if v["edited"] or v["deleted"]}
        sent_bodies = {a.client_msg_id: a.body for a in load.acks}
        for record in (stored, subscriber.events, fetched):
            as_sent(record, changed, sent_bodies)
        check(result, load, subscriber, monitor, stored, self._last_seqs, self._watermarks, fetched)
        check_changes(result, load, changes)
        check_convergence(result, offline, came_back, server)
        check_own_state(result, own, changes)
        if self.database_outage:
            check_outage_answers(result, load)
        result.reads = len(load.reads)
        if storm is not None:
            check_storm(result, storm, self._watermarks)
            result.reads += len(storm.reads)
        result.notes = "; ".join(self.events)
        if storm is not None:
            result.notes += (
                f"; read storm: {storm.stats.read_calls} markRead calls from {len(STORM_USERS) * STORM_DEVICES} "
                f"clients, {len(storm.reads)} answered, {sum(storm.stats.errors.values())} attempts retried"
            )
        result.notes += (
            f"; changes: {result.changes_acked} acknowledged of {result.changes_sent} sent "
            f"({result.changes_retried} retried), the offline client applied "
            f"{offline.changes_applied} after change cursors {offline.went_offline_at}; "
            f"own read state: {len(own.acks)} calls answered"
        )
        result.notes += (
            f"; {len(load.reads)} markRead answers, {monitor.samples} watermark samples "
            f"({monitor.failed_samples} failed while the fault lasted)"
        )
        errors = ", ".join(f"{k} x{v}" for k, v in load.stats.errors.most_common(6))
        if errors:
            result.notes += f"; client saw: {errors}"
        if subscriber.resyncs:
            result.notes += f"; resyncs: {dict(subscriber.resyncs)}"
        return result

    async def _note_batches(self) -> None:
        """How the API process (since its last start) grouped sends into transactions."""
        try:
            page = (await self.http.get(self.client.url.removesuffix("/graphql") + "/metrics")).text
        except httpx.HTTPError:
            return
        found = {}
        for line in page.splitlines():
            name, _, value = line.partition(" ")
            if name in ("chatgql_send_batch_size_count", "chatgql_send_batch_size_sum"):
                found[name] = float(value)
        if found.get("chatgql_send_batch_size_count"):
            self.mark(
                f"api since its start: {found['chatgql_send_batch_size_sum']:.0f} sends in "
                f"{found['chatgql_send_batch_size_count']:.0f} transactions"
            )

    async def _outbox_empty(self) -> bool:
        return await self.outbox_rows() == 0

    async def _warm_up(self, load: Load, subscriber: Subscriber, conversations: list[str]) -> None:
        """Until one message per conversation comes back live: relay, Kafka, consumer,
        bus and subscription all work before the fault. These messages count too."""
        deadline = time.monotonic() + 120
        await asyncio.wait_for(subscriber.subscribed.wait(), 60)
        while True:
            acks = [await load.send_one(self.users[0], cid, time.monotonic() + 60) for cid in conversations]
            keys = {(a.conversation_id, a.seq) for a in acks if a is not None}
            round_end = time.monotonic() + 10
            while time.monotonic() < round_end:
                if keys <= subscriber.unique().keys():
                    return
                await asyncio.sleep(0.1)
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.name}: the live path did not work before the fault (logs in {self.log_dir})"
                )

    async def _stored_keys(self) -> set[tuple[str, int]]:
        return {(m["conversationId"], m["seq"]) for m in await self._stored()}

    async def _stored(self) -> list[dict]:
        stored, self._last_seqs, self._watermarks = await read_stored(self.engine)
        return stored


def check(
    result: Result,
    load: Load,
    subscriber: Subscriber,
    monitor: WatermarkMonitor,
    stored: list[dict],
    last_seqs: dict[int, int],
    watermarks: dict[tuple[int, int], int],
    fetched: list[dict],
) -> None:
    """Fill in result's counts from what the clients recorded and what the
    database holds (stored messages in (conversation, seq) order, last_seq per
    conversation, watermark per (conversation, user)); every broken promise
    goes into result.failures."""
    check_stored(result, load, stored, last_seqs)
    check_subscriber(result, subscriber, stored, fetched)
    check_watermarks(result, load, monitor, watermarks)
    if result.outbox_end != 0:
        result.failures.append(f"the outbox still holds {result.outbox_end} events")
    if monitor.samples == 0:
        result.failures.append("the watermark monitor never got a sample")


def check_outage_answers(result: Result, load: Load) -> None:
    """While the database was unavailable, the server said so: UNAVAILABLE with retryAfter,
    never INTERNAL_SERVER_ERROR (nor anything but a timeout or a lost connection)."""
    errors = load.stats.errors
    if not errors["UNAVAILABLE"]:
        result.failures.append(f"no call was answered UNAVAILABLE during the outage: {dict(errors)}")
    other = {
        kind: n
        for kind, n in errors.items()
        if kind != "UNAVAILABLE" and not kind.startswith(("timeout", "connection"))
    }
    if other:
        result.failures.append(f"during the outage calls were answered {other}, not UNAVAILABLE with retryAfter")


def check_stored(result: Result, load: Load, stored: list[dict], last_seqs: dict[int, int]) -> None:
    """Storage: every acknowledged message stored once, as acknowledged, nothing
    stored that nobody sent, seqs 1..lastSeq with no gap."""
    fail = result.failures.append
    stats = load.stats
    acks = load.acks
    result.sent = stats.sent
    result.acked = len({a.client_msg_id for a in acks})
    result.retried = stats.retried
    result.duplicate_acks = sum(1 for a in acks if a.duplicate)
    result.stored = len(stored)
    if stats.refusals:
        fail(f"{len(stats.refusals)} valid requests refused, e.g. {stats.refusals[:3]}")
    if stats.unacked:
        fail(f"{len(stats.unacked)} messages never acknowledged despite retries, e.g. {stats.unacked[:3]}")

    # Every acknowledged (conversationId, clientMsgId) stored exactly once, as acknowledged.
    by_cmid: dict[str, list[dict]] = defaultdict(list)
    for m in stored:
        by_cmid[m["clientMsgId"]].append(m)
    twice = {c: ms for c, ms in by_cmid.items() if len(ms) > 1}
    result.stored_twice = len(twice)
    if twice:
        fail(f"{len(twice)} clientMsgIds stored more than once, e.g. {list(twice.items())[:2]}")
    lost = [a for a in acks if a.client_msg_id not in by_cmid]
    result.lost = len(lost)
    if lost:
        fail(f"{len(lost)} acknowledged messages not stored, e.g. {lost[:3]}")
    wrong = [
        (a, by_cmid[a.client_msg_id][0])
        for a in acks
        if a.client_msg_id in by_cmid
        and by_cmid[a.client_msg_id][0]
        != {
            "conversationId": a.conversation_id,
            "seq": a.seq,
            "senderId": str(a.sender),
            "clientMsgId": a.client_msg_id,
            "body": a.body,
        }
    ]
    if wrong:
        fail(f"{len(wrong)} acknowledgements disagree with what is stored, e.g. {wrong[:2]}")
    acked_cmids = {a.client_msg_id for a in acks}
    unacked = set(stats.unacked)
    phantom = [m for m in stored if m["clientMsgId"] not in acked_cmids | unacked]
    if phantom:
        fail(f"{len(phantom)} stored messages nobody sent, e.g. {phantom[:2]}")

    # Gap-free seqs, lastSeq = count.
    per_conversation: dict[str, list[int]] = defaultdict(list)
    for m in stored:
        per_conversation[m["conversationId"]].append(m["seq"])
    for cid, last_seq in last_seqs.items():
        seqs = per_conversation.get(str(cid), [])
        if seqs != list(range(1, last_seq + 1)):
            result.gaps += 1
            missing = sorted(set(range(1, last_seq + 1)) - set(seqs))[:10]
            fail(f"conversation {cid}: lastSeq {last_seq}, {len(seqs)} messages, missing {missing}")


def check_subscriber(result: Result, subscriber: Subscriber, stored: list[dict], fetched: list[dict]) -> None:
    """The subscriber: live (deduped) + what sync fetched = the stored messages of its
    conversations (`stored`, in (conversation, seq) order), live events in seq order, and
    everything live when it never dropped nor resynced."""
    fail = result.failures.append
    live = subscriber.unique()
    result.delivered = len(live)
    result.duplicates = len(subscriber.events) - len(live)
    result.drops = subscriber.disconnects + sum(subscriber.resyncs.values())
    different = [
        (e, live[(e["conversationId"], e["seq"])])
        for e in subscriber.events
        if e != live[(e["conversationId"], e["seq"])]
    ]
    if different:
        fail(f"{len(different)} pushed events disagree with another push of the same seq: {different[:2]}")
    order: dict[str, list[int]] = defaultdict(list)
    for cid, seq in live:  # dict order = first arrival
        order[cid].append(seq)
    for cid, seqs in order.items():
        back = sum(1 for a, b in pairwise(seqs) if b < a)
        result.reorders += back
        if back:
            fail(f"conversation {cid}: live events out of seq order ({back} times): {seqs[:40]}")
    held = dict(live)
    recovered = 0
    for e in fetched:
        key = (e["conversationId"], e["seq"])
        if key not in held:
            held[key] = e
            recovered += 1
        elif held[key] != e:
            fail(f"sync and the live path disagree on {key}: {e} vs {held[key]}")
    result.via_sync = recovered
    merged = [held[k] for k in sorted(held, key=lambda k: (int(k[0]), k[1]))]
    if merged != stored:
        extra = [m for m in merged if m not in stored][:3]
        missing = [m for m in stored if m not in merged][:3]
        fail(
            f"the subscriber holds {len(merged)} messages, the database {len(stored)}: extra {extra}, missing {missing}"
        )
    if not subscriber.interrupted:
        missed = len({(m["conversationId"], m["seq"]) for m in stored} - live.keys())
        if missed:
            fail(f"the subscriber stayed connected yet {missed} messages never came live")


def check_watermarks(
    result: Result, load: Load, monitor: WatermarkMonitor, watermarks: dict[tuple[int, int], int]
) -> None:
    """Watermarks: never backward (sampled, and per answer), and at least every
    acknowledged read / send at the end."""
    fail = result.failures.append
    acks = load.acks
    result.watermark_back = len(monitor.regressions)
    if monitor.regressions:
        fail(f"sampled values went backward: {monitor.regressions[:5]}")
    answered: dict[tuple[int, str], int] = {}
    for r in load.reads:
        key = (r.user, r.conversation_id)
        if r.last_read_seq < answered.get(key, 0):
            result.watermark_back += 1
            fail(
                f"markRead answered {r.last_read_seq} to user {r.user} in {r.conversation_id} "
                f"after answering {answered[key]}"
            )
        answered[key] = max(answered.get(key, 0), r.last_read_seq)
    floor = dict(answered)
    for a in acks:
        key = (a.sender, a.conversation_id)
        floor[key] = max(floor.get(key, 0), a.seq)
    for (user, cid), at_least in floor.items():
        final = watermarks.get((int(cid), user))
        if final is None or final < at_least:
            result.watermark_back += 1
            fail(f"watermark of user {user} in {cid} is {final}, below the acknowledged {at_least}")


async def _all(*coroutines: Awaitable[None]) -> None:
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


async def _later(delay: float, coroutine: Awaitable[None]) -> None:
    await asyncio.sleep(delay)
    await coroutine


def check_storm(result: Result, storm: ReadStorm, watermarks: dict[tuple[int, int], int]) -> None:
    """The read storm's answers: every answered watermark is durable (the database ends at or
    above it), none is below its clamped ask, and per (conversation, user) no answer is below
    one received before its call went out (a watermark seen never moves back)."""
    fail = result.failures.append
    if storm.stats.refusals:
        fail(f"{len(storm.stats.refusals)} valid markRead calls refused, e.g. {storm.stats.refusals[:3]}")
    per_key: dict[tuple[int, int], list] = defaultdict(list)
    for r in storm.reads:
        per_key[(int(r.conversation_id), r.user)].append(r)
        if r.last_read_seq < min(r.asked, r.seen):
            fail(f"markRead({r.conversation_id}, {r.asked}) by {r.user} answered {r.last_read_seq}, below {r.seen}")
    for key, reads in per_key.items():
        final = watermarks.get(key)
        top = max(r.last_read_seq for r in reads)
        if final is None or final < top:
            result.watermark_back += 1
            fail(f"watermark of user {key[1]} in {key[0]} is {final}, below the answered {top}")
        by_received = sorted(reads, key=lambda r: r.received_at)
        floor, i = 0, 0
        for r in sorted(reads, key=lambda r: r.sent_at):
            while i < len(by_received) and by_received[i].received_at < r.sent_at:
                floor = max(floor, by_received[i].last_read_seq)
                i += 1
            if r.last_read_seq < floor:
                result.watermark_back += 1
                fail(f"user {key[1]} in {key[0]}: answered {r.last_read_seq} after an answer of {floor}")
    if not storm.reads:
        fail("the read storm got no answer")


async def run_scenario(
    name: str, infra: Infra, fault: Callable[[Scenario], Awaitable[None]], *, load_seconds: float = 15, **options
) -> Result:
    started = time.monotonic()
    result = Result(name)
    try:
        async with Scenario(name, infra, **options) as scenario:
            result = scenario.result
            await scenario.run(fault, load_seconds=load_seconds)
    except BaseException as error:
        result.failures.append(f"the scenario did not complete: {error!r}"[:2000])
        raise
    finally:
        result.seconds = time.monotonic() - started
        RESULTS[:] = [r for r in RESULTS if r.scenario != name] + [result]
        write_results()
    print(f"\n{table([result])}\n{result.notes}")
    return result


def embedded_url(pgdata: Path) -> str:
    """The URL of the embedded PostgreSQL running on pgdata (its socket directory is in postmaster.pid)."""
    socket_dir = (pgdata / "postmaster.pid").read_text().splitlines()[4].strip()
    return f"postgresql://postgres@/postgres?host={socket_dir}"


async def read_stored(engine) -> tuple[list[dict], dict[int, int], dict[tuple[int, int], int]]:
    """Every stored message (as a subscriber sees it), each conversation's lastSeq, each member's watermark."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT conversation_id, seq, sender_id, client_msg_id, body FROM message "
                    "ORDER BY conversation_id, seq"
                )
            )
        ).all()
        last_seqs = dict((await conn.execute(text("SELECT id, last_seq FROM conversation"))).all())
        watermarks = {
            (cid, int(uid)): seq  # the scenario's users are numbers; stored ids are their text
            for cid, uid, seq in (
                await conn.execute(text("SELECT conversation_id, user_id, last_read_seq FROM conversation_member"))
            ).all()
        }
    stored = [
        {
            "conversationId": str(r.conversation_id),
            "seq": r.seq,
            "senderId": str(r.sender_id),
            "clientMsgId": str(r.client_msg_id),
            "body": r.body,
        }
        for r in rows
    ]
    return stored, last_seqs, watermarks


# --- changes to messages and the own read state -------------------------------------------------

KINDS = {"edit": "EDITED", "delete": "DELETED", "react": "REACTION", "unreact": "REACTION"}


@dataclass
class ChangeState:
    """What the database holds of the changes (migrations 0010, 0010b, 0011): keys are decimal
    conversation ids as the API gives them."""

    last_change_seqs: dict[str, int] = field(default_factory=dict)
    log: dict[tuple[str, int], tuple[int, str, int]] = field(default_factory=dict)  # change seq -> seq, kind, user
    messages: dict[tuple[str, int], dict] = field(default_factory=dict)  # body, edited, deleted, deleted_by
    edits: dict[tuple[str, int], list[str]] = field(default_factory=dict)  # previous bodies, by change seq
    reactions: set[tuple[str, int, int, str]] = field(default_factory=set)
    counts: dict[tuple[str, int, str], int] = field(default_factory=dict)
    own: dict[tuple[str, int], dict] = field(default_factory=dict)  # member rows: own_read, delivered, settings


async def read_changes(engine) -> ChangeState:
    state = ChangeState()
    async with engine.connect() as conn:

        async def rows(sql: str) -> list:
            return list((await conn.execute(text(sql))).all())

        state.last_change_seqs = {str(c): n for c, n in await rows("SELECT id, last_change_seq FROM conversation")}
        for cid, change_seq, seq, kind, user in await rows(
            "SELECT conversation_id, change_seq, seq, kind, user_id FROM message_change"
        ):
            state.log[(str(cid), change_seq)] = (seq, kind, _user(user))
        for cid, seq, body, edited, deleted, deleted_by in await rows(
            "SELECT conversation_id, seq, body, edited_at IS NOT NULL, deleted_at IS NOT NULL, deleted_by FROM message"
        ):
            state.messages[(str(cid), seq)] = {
                "body": body,
                "edited": edited,
                "deleted": deleted,
                "deleted_by": _user(deleted_by),
            }
        for cid, seq, body in await rows(
            "SELECT conversation_id, seq, body FROM message_edit ORDER BY conversation_id, seq, change_seq"
        ):
            state.edits.setdefault((str(cid), seq), []).append(body)
        state.reactions = {
            (str(c), s, _user(u), e)
            for c, s, u, e in await rows("SELECT conversation_id, seq, user_id, emoji FROM message_reaction")
        }
        state.counts = {
            (str(c), s, e): n
            for c, s, e, n in await rows("SELECT conversation_id, seq, emoji, count FROM message_reaction_count")
        }
        for cid, user, own_read, delivered, muted, archived, pinned in await rows(
            f"SELECT m.conversation_id, m.user_id, {OWN_READ}, GREATEST(m.delivered_seq, m.last_read_seq), m.muted,"
            " m.archived_seq IS NOT NULL, m.pinned_at IS NOT NULL FROM conversation_member m"
        ):
            state.own[(str(cid), _user(user))] = {
                "lastReadSeq": own_read,
                "deliveredSeq": delivered,
                "muted": muted,
                "archived": archived,
                "pinned": pinned,
            }
    return state


def _user(stored: str | None) -> int | None:
    """A stored user id (text since 0014_text_user_ids) as the scenario names its users: numbers."""
    return None if stored is None else int(stored)


def as_sent(messages: list[dict], changed: set[tuple[str, int]], sent_bodies: dict[str, str]) -> None:
    """Give the changed messages of a record (stored, pushed or synced) the body they were sent with."""
    for m in messages:
        if (m["conversationId"], m["seq"]) in changed and m["clientMsgId"] in sent_bodies:
            m["body"] = sent_bodies[m["clientMsgId"]]


def check_changes(result: Result, load: Load, state: ChangeState) -> None:
    """Every acknowledged change stored once, nothing stored twice, change seqs gap-free."""
    fail = result.failures.append
    stats = load.stats
    result.changes_sent = stats.changes_sent
    result.changes_acked = len(load.changes)
    result.changes_retried = sum(1 for c in load.changes if c.attempts > 1)
    result.change_seqs = sum(state.last_change_seqs.values())
    if stats.unacked_changes:
        fail(f"{len(stats.unacked_changes)} changes never acknowledged despite retries: {stats.unacked_changes[:3]}")
    if not load.changes:
        fail("no change was acknowledged")

    # Gap-free change seqs: 1..lastChangeSeq per conversation.
    per_conversation: dict[str, list[int]] = defaultdict(list)
    for cid, change_seq in sorted(state.log):
        per_conversation[cid].append(change_seq)
    for cid, last in state.last_change_seqs.items():
        seqs = per_conversation.get(cid, [])
        if seqs != list(range(1, last + 1)):
            result.change_gaps += 1
            fail(f"conversation {cid}: lastChangeSeq {last}, change seqs {seqs[:20]}... ({len(seqs)})")

    lost: list[str] = []
    twice: list[str] = []
    # Each acknowledged change seq holds what was acknowledged, and no two acknowledgements share one.
    answered: dict[tuple[str, int], ChangeAck] = {}
    for c in load.changes:
        if c.change_seq is None:
            if c.effective and c.attempts == 1:
                lost.append(f"{c} changed nothing on its only attempt")
            continue
        if not c.effective:
            twice.append(f"{c}: the same state again took a change seq")
        key = (c.conversation_id, c.change_seq)
        if key in answered:
            twice.append(f"{c} and {answered[key]} answered the same change seq")
        answered[key] = c
        if state.log.get(key) != (c.seq, KINDS[c.kind], c.user):
            lost.append(f"{c}: change seq {key} holds {state.log.get(key)}")

    # Per message: the changes logged = the effective acknowledged ones (a retry applied nothing twice).
    logged: dict[tuple, int] = defaultdict(int)
    for (cid, _), (seq, kind, user) in state.log.items():
        logged[(cid, seq, kind, user if kind == "REACTION" else None)] += 1
    expected: dict[tuple, int] = defaultdict(int)
    edits: dict[tuple[str, int], list[str]] = defaultdict(list)
    deleted: dict[tuple[str, int], int] = {}
    reacted: set[tuple[str, int, int, str]] = set()
    for c in load.changes:
        key = (c.conversation_id, c.seq)
        if c.effective:
            expected[(*key, KINDS[c.kind], c.user if c.kind in ("react", "unreact") else None)] += 1
        if c.kind == "edit":
            edits[key].append(c.value)
        elif c.kind == "delete":
            deleted[key] = c.user
        elif c.kind == "react":
            reacted.add((*key, c.user, c.value))
        elif c.kind == "unreact":
            reacted.discard((*key, c.user, c.value))
    for k in set(logged) | set(expected):
        if logged[k] > expected[k]:
            twice.append(f"{k}: {logged[k]} changes logged, {expected[k]} acknowledged")
        elif logged[k] < expected[k]:
            lost.append(f"{k}: {logged[k]} changes logged, {expected[k]} acknowledged")

    sent_bodies = {(a.conversation_id, a.seq): a.body for a in load.acks}
    for key, message in state.messages.items():
        if key in deleted:
            if not message["deleted"] or message["body"] != "" or message["deleted_by"] != deleted[key]:
                lost.append(f"{key}: deleted by {deleted[key]}, stored {message}")
            if state.edits.get(key) or any(r[:2] == key for r in state.reactions):
                lost.append(f"{key}: deleted, yet its edit history or reactions remain")
            continue
        if message["deleted"]:
            twice.append(f"{key}: deleted, by no acknowledged delete: {message}")
        if key not in edits:
            if message["edited"] or state.edits.get(key):
                twice.append(f"{key}: edited by no acknowledged edit: {message}, history {state.edits.get(key)}")
            continue
        bodies = [sent_bodies.get(key), *edits[key]]
        if message["body"] != bodies[-1] or not message["edited"]:
            lost.append(f"{key}: last edit acknowledged {bodies[-1]!r}, stored {message}")
        history = state.edits.get(key, [])
        if history != bodies[:-1]:
            (twice if len(history) > len(bodies) - 1 else lost).append(
                f"{key}: edit history {history}, acknowledged edits over {bodies}"
            )
    if state.reactions != reacted:
        lost.append(
            f"reactions stored and not acknowledged {sorted(state.reactions - reacted)[:3]}, "
            f"acknowledged and not stored {sorted(reacted - state.reactions)[:3]}"
        )
    per_emoji: dict[tuple[str, int, str], int] = defaultdict(int)
    for cid, seq, _, emoji in state.reactions:
        per_emoji[(cid, seq, emoji)] += 1
    if state.counts != dict(per_emoji):
        wrong = {k: (state.counts.get(k), per_emoji.get(k)) for k in set(state.counts) | set(per_emoji)}
        twice.append(
            f"reaction counts differ from their rows: {[(k, v) for k, v in wrong.items() if v[0] != v[1]][:3]}"
        )
    result.changes_lost = len(lost)
    result.changes_twice = len(twice)
    for what, found in (("lost or wrong", lost), ("applied twice", twice)):
        if found:
            fail(f"{len(found)} changes {what}, e.g. {found[:3]}")


def check_convergence(
    result: Result, offline: OfflineClient, came_back: dict[str, dict[int, dict]], server: dict[str, dict[int, dict]]
) -> None:
    """The offline client, back through sync with its two cursors, holds every message as the server does."""
    result.diverged = 0
    for cid, messages in server.items():
        held = came_back.get(cid, {})
        different = [(seq, held.get(seq), m) for seq, m in messages.items() if held.get(seq) != m]
        extra = sorted(set(held) - set(messages))
        result.diverged += len(different) + len(extra)
        if different or extra:
            result.failures.append(
                f"conversation {cid}: the offline client back from change cursor {offline.went_offline_at.get(cid)} "
                f"holds {len(different)} messages otherwise than the server, e.g. {different[:2]}; extra seqs {extra[:5]}"
            )
    if offline.stats.refusals:
        result.failures.append(f"the offline client was refused: {offline.stats.refusals[:3]}")


def check_own_state(result: Result, own: OwnState, state: ChangeState) -> None:
    """The own read state ends as last acknowledged; markUnread answered its rewind; delivered never back."""
    fail = result.failures.append
    wrong: list[str] = []
    result.own_calls = len(own.acks)
    if own.stats.refusals or own.stats.unacked:
        fail(f"own read state calls refused {own.stats.refusals[:3]} or never answered {own.stats.unacked[:3]}")
    if not any(a.op == "markUnread" for a in own.acks) or not any(a.op == "markDelivered" for a in own.acks):
        fail(f"too few own read state calls answered: {[a.op for a in own.acks]}")
    last: dict[str, dict] = defaultdict(dict)
    for a in own.acks:
        final = last[a.conversation_id]
        if a.op == "markDelivered":
            if a.answer["deliveredSeq"] < final.get("deliveredSeq", 0):
                wrong.append(f"markDelivered({a.asked}) answered {a.answer} after {final['deliveredSeq']}")
            final["deliveredSeq"] = max(final.get("deliveredSeq", 0), a.answer["deliveredSeq"])
            continue
        final["lastReadSeq"] = a.answer["lastReadSeq"]
        if a.op == "markUnread" and a.answer["lastReadSeq"] > a.asked["s"] - 1:
            wrong.append(f"markUnread(fromSeq {a.asked['s']}) answered lastReadSeq {a.answer['lastReadSeq']}")
        if a.op == "updateMembership":
            for name in ("muted", "archived", "pinned"):
                if name in a.asked:
                    final[name] = a.asked[name]
                    if name != "archived" and a.answer[name] != a.asked[name]:
                        wrong.append(f"updateMembership({a.asked}) answered {a.answer}")
    for cid, final in last.items():
        stored = state.own.get((cid, own.user), {})
        for name, value in final.items():
            at = stored.get(name)
            if at is None or (at < value if name == "deliveredSeq" else at != value):
                wrong.append(f"conversation {cid}: {name} acknowledged {value}, stored {at}")
    result.own_wrong = len(wrong)
    if wrong:
        fail(f"{len(wrong)} own read state answers not in effect, e.g. {wrong[:3]}")
