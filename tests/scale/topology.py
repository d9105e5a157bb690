"""The scaled deployment on one machine, as real processes on 127.0.0.1.

3 API processes (`chatgql serve --no-relay --no-consumer`), 2 relay processes
sharing 4 outbox shards (`chatgql relay`), 2 consumers in one group
(`chatgql consume`), a Kafka topic of 6 partitions, a 3-master Redis Cluster as
the bus (`redis+cluster://`, which also carries the shared rate limits), and a
fresh PostgreSQL database. Built from the fault suite's pieces
(tests/support/infra.py) and the cluster of tests/support/redis_cluster.py
(scripts/redis-cluster.sh); what is new here is the handles the proof's faults
and measurements need: who leads which outbox slot, who owns which partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg

from chatgql.store.outbox import RELAY_LOCK

from ..support.infra import ChatProcess, FaultKafka, FaultPostgres, chat_env, create_topic, stable_port, tail
from ..support.redis_cluster import RedisCluster, free_cluster_port

SLOTS = 64  # store/outbox.py: a conversation's slot is hashtextextended(key, 0) & 63


class Topology:
    """Everything of the proof, started by `async with`, stopped at its end."""

    def __init__(
        self,
        out: Path,
        *,
        apis: int = 3,
        relays: int = 2,
        consumers: int = 2,
        shards: int = 4,
        partitions: int = 6,
    ) -> None:
        self.out = out
        self.shards = shards
        self.partitions = partitions
        self.api_count, self.relay_count, self.consumer_count = apis, relays, consumers
        self.scratch = Path(tempfile.mkdtemp(prefix="chatgql-proof-"))
        self.topic = f"proof.events.{uuid.uuid4().hex[:8]}"
        self.group = f"fanout-{self.topic}"
        self.pg: FaultPostgres | None = None
        self.kafka: FaultKafka | None = None
        self.redis: RedisCluster | None = None
        self.apis: list[ChatProcess] = []
        self.relays: list[ChatProcess] = []
        self.consumers: list[ChatProcess] = []
        self.env: dict[str, str] = {}

    @property
    def processes(self) -> list[ChatProcess]:
        return [*self.apis, *self.relays, *self.consumers]

    def graphql_url(self, api: ChatProcess) -> str:
        return f"http://127.0.0.1:{api.port}/graphql"

    def ws_url(self, api: ChatProcess) -> str:
        return f"ws://127.0.0.1:{api.port}/graphql"

    async def __aenter__(self) -> Topology:
        self.out.mkdir(parents=True, exist_ok=True)
        for old in self.out.glob("*.log"):
            old.unlink()
        try:
            await self._start()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _start(self) -> None:
        kafka = self.kafka = FaultKafka(self.scratch / "kafka")
        redis = self.redis = RedisCluster(free_cluster_port(), self.scratch / "redis")

        def start_pg() -> None:
            self.pg = FaultPostgres(self.scratch / "pg")

        await asyncio.gather(
            asyncio.to_thread(start_pg), asyncio.to_thread(kafka.start), asyncio.to_thread(redis.start)
        )
        assert self.pg is not None
        self.database_url = await self.pg.create_database("proof")
        await create_topic(kafka.bootstrap, self.topic, self.partitions)

        env = chat_env(self.database_url, kafka.bootstrap, self.topic, redis.url)
        # The production rate limits (shared through the cluster), except group creation: the
        # proof creates its 50 conversations as one user.
        for name in ("CHATGQL_RATE_SEND_PER_SECOND", "CHATGQL_RATE_READ_PER_SECOND"):
            env.pop(name)
        env |= {
            "CHATGQL_RELAY_SHARDS": str(self.shards),
            "CHATGQL_KAFKA_TOPIC_PARTITIONS": str(self.partitions),
            "CHATGQL_KAFKA_GROUP": self.group,
            "CHATGQL_SHARED_RATE_LIMITS": "true",
            # above a consumer failover (about 8 s): its partitions' subscribers stay live through it
            "CHATGQL_MAX_DELIVERY_DELAY_SECONDS": "15",
        }
        self.env = env
        for i in range(self.api_count):
            port = stable_port()  # an API process restarts on its port
            args = ["serve", "--port", str(port), "--log-level", "warning", "--no-relay", "--no-consumer"]
            self.apis.append(ChatProcess(f"api{i + 1}", args, env, self.out, port))
        self.relays = [ChatProcess(f"relay{i + 1}", ["relay"], env, self.out) for i in range(self.relay_count)]
        self.consumers = [
            ChatProcess(f"consumer{i + 1}", ["consume"], env, self.out) for i in range(self.consumer_count)
        ]
        for process in self.processes:
            process.start()
        await asyncio.gather(*(api.wait_ready() for api in self.apis))
        self.db = await asyncpg.connect(self.database_url)
        self.group_view = KafkaGroup(kafka.bootstrap, self.topic, self.group, self.partitions)
        await self.group_view.start()
        # Every shard led, shared out; every partition owned, shared out.
        await self.wait(
            lambda: self.relays_share_the_shards(),
            90,
            "the relays to share the outbox's shards",
            state=self.describe_slot_leaders,
        )
        await self.wait(lambda: self.consumers_share_the_partitions(), 90, "the consumers to share the partitions")

    async def __aexit__(self, *exc: object) -> None:
        for process in self.processes:
            await asyncio.to_thread(process.stop)
        with contextlib.suppress(Exception):
            await self.group_view.stop()
        with contextlib.suppress(Exception):
            await self.db.close()
        if self.redis is not None and self.redis.url:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.redis.stop)
        if self.kafka is not None:
            await asyncio.to_thread(self.kafka.close)
        if self.pg is not None:
            await asyncio.to_thread(self.pg.close)
        shutil.rmtree(self.scratch, ignore_errors=True)

    async def wait(self, predicate, timeout: float, what: str, interval: float = 0.05, state=None) -> float:
        """Poll predicate() until true; the seconds it took. Raises on timeout, with the logs' tails,
        the last error of the predicate and what state() (async, optional) says then."""
        started = time.monotonic()
        error: Exception | None = None
        while True:
            try:
                if await predicate():
                    return time.monotonic() - started
            except Exception as caught:
                error = caught
            if time.monotonic() - started > timeout:
                logs = "\n".join(f"--- {p.name}\n{tail(p.log, 15)}" for p in self.processes)
                seen = ""
                if state is not None:
                    try:
                        seen = f"\nstate: {await state()}"
                    except Exception as failed:
                        seen = f"\nstate: unknown ({failed!r})"
                raise AssertionError(f"waited {timeout}s for {what}; last error: {error!r}{seen}\n{logs}")
            await asyncio.sleep(interval)

    # --- relays -------------------------------------------------------------------------

    async def _slot_locks(self) -> list:
        """(client_port, application_name, slots) of every session holding outbox slot locks."""
        return await self.db.fetch(
            """
            SELECT a.client_port, a.application_name, array_agg(l.objid::int ORDER BY l.objid) AS slots
              FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $1::int::oid
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
             GROUP BY 1, 2
            """,
            RELAY_LOCK,
        )

    def _database_ports(self, relay: ChatProcess) -> set[int]:
        assert self.pg is not None
        return relay.local_ports(self.pg.port)

    async def slot_leaders(self) -> dict[ChatProcess, set[int]]:
        """relay process -> the outbox slots whose advisory locks it holds (found by its
        connection's port, as tests/faults/scenario.py's relay_leader does)."""
        rows = await self._slot_locks()
        out: dict[ChatProcess, set[int]] = {}
        for relay in self.relays:
            if relay.alive:
                ports = self._database_ports(relay)
                slots = {s for row in rows if row["client_port"] in ports for s in row["slots"]}
                if slots:
                    out[relay] = slots
        return out

    async def describe_slot_leaders(self) -> str:
        """Who holds which slot locks, as PostgreSQL and the processes' sockets say."""
        held = [f"{r['application_name']} (port {r['client_port']}): {r['slots']}" for r in await self._slot_locks()]
        ports = {r.name: sorted(self._database_ports(r)) for r in self.relays if r.alive}
        return f"locks {held}; relays' database ports {ports}"

    async def relays_share_the_shards(self) -> bool:
        leaders = await self.slot_leaders()
        alive = [r for r in self.relays if r.alive]
        held = [s for slots in leaders.values() for s in slots]
        return sorted(held) == list(range(SLOTS)) and len(leaders) == min(len(alive), self.shards)

    async def slot_of(self, conversation_ids: list[str]) -> dict[str, int]:
        rows = await self.db.fetch(
            "SELECT c, (hashtextextended(c, 0) & 63)::int AS slot FROM unnest($1::text[]) AS c", conversation_ids
        )
        return {row["c"]: row["slot"] for row in rows}

    async def outbox_rows(self) -> int:
        return await self.db.fetchval("SELECT count(*) FROM outbox")

    async def redis_cluster_ok(self) -> bool:
        """cluster_state:ok on every node (redis-cli, as scripts/redis-cluster.sh)."""
        assert self.redis is not None
        for port in self.redis.ports:
            proc = await asyncio.create_subprocess_exec(
                shutil.which("redis-cli") or "/usr/bin/redis-cli",
                "-p",
                str(port),
                "cluster",
                "info",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
            out, _ = await proc.communicate()
            if b"cluster_state:ok" not in out:
                return False
        return True

    # --- consumers ----------------------------------------------------------------------

    async def consumers_share_the_partitions(self) -> bool:
        owners = await self.group_view.owners()
        alive = sum(1 for c in self.consumers if c.alive)
        return len(owners) == alive and sorted(p for ps in owners for p in ps) == list(range(self.partitions))


class KafkaGroup:
    """The consumer group as Kafka sees it: members' assignments, committed offsets, lag."""

    def __init__(self, bootstrap: str, topic: str, group: str, partitions: int) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient

        self.topic, self.group = topic, group
        self.tps = [TopicPartition(topic, p) for p in range(partitions)]
        self.admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        self.reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)

    async def start(self) -> None:
        await self.admin.start()
        await self.reader.start()

    async def stop(self) -> None:
        await self.reader.stop()
        await self.admin.close()

    async def owners(self) -> list[list[int]]:
        """The partitions of each member of a Stable group ([] while it rebalances)."""
        from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

        (response,) = await self.admin.describe_consumer_groups([self.group])
        error_code, _group, state, _ptype, _protocol, members = response.groups[0][:6]
        if error_code or state != "Stable":
            return []
        owners = []
        for member in members:
            assignment = ConsumerProtocolMemberAssignment.decode(member[-1])
            owners.append(sorted(p for topic, ps in assignment.assignment if topic == self.topic for p in ps))
        return owners

    async def ends(self) -> dict[int, int]:
        return {tp.partition: end for tp, end in (await self.reader.end_offsets(self.tps)).items()}

    async def committed(self) -> dict[int, int]:
        offsets = await self.admin.list_consumer_group_offsets(self.group, partitions=self.tps)
        return {tp.partition: max(meta.offset, 0) for tp, meta in offsets.items() if meta is not None}

    async def lag(self) -> int:
        """Records in the topic that the group has not committed yet."""
        ends, committed = await self.ends(), await self.committed()
        return sum(max(0, end - committed.get(p, 0)) for p, end in ends.items())
