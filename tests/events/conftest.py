"""A real Kafka for the event tests.

From, in order: CHATGQL_TEST_KAFKA_BOOTSTRAP (a broker you run); testcontainers'
Kafka when a Docker engine answers; else scripts/kafka.sh starts a single-node
KRaft broker on a free 127.0.0.1 port (jars fetched from Maven Central once).
Never skipped: without a broker these tests fail.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ..conftest import (
    REPO,
    RunningServer,
    _docker_available,
    create_engine,
    free_port_pair,
    make_settings,
    scratch_database,
)
from ..support.redis_cluster import RedisCluster, free_cluster_port

KAFKA_SH = REPO / "scripts" / "kafka.sh"


class KafkaBroker:
    """The broker under test; stop()/start() keep its data (for fault tests)."""

    def __init__(self, bootstrap: str, port: int | None = None, data_dir: Path | None = None) -> None:
        self.bootstrap = bootstrap
        self.port = port
        self.data_dir = data_dir

    @property
    def controllable(self) -> bool:
        return self.port is not None

    def _script(self, command: str) -> None:
        assert self.controllable, "this broker is not run by the tests"
        subprocess.run(
            [str(KAFKA_SH), command, "--port", str(self.port), "--dir", str(self.data_dir)],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    async def stop(self) -> None:
        await asyncio.to_thread(self._script, "stop")

    async def start(self) -> None:
        await asyncio.to_thread(self._script, "start")


@pytest.fixture(scope="session")
def kafka() -> KafkaBroker:
    bootstrap = os.environ.get("CHATGQL_TEST_KAFKA_BOOTSTRAP")
    if bootstrap:
        yield KafkaBroker(bootstrap)
        return
    if _docker_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            yield KafkaBroker(container.get_bootstrap_server())
        return
    port = free_port_pair()  # the controller listens on port + 1
    data_dir = Path(tempfile.mkdtemp(prefix="chatgql-test-kafka-"))
    broker = KafkaBroker(f"127.0.0.1:{port}", port, data_dir)
    broker._script("start")
    try:
        yield broker
    finally:
        broker._script("stop")
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
async def migrated_url(database_url: str) -> str:
    """The live-path tests get a database of their own: every relay drains the
    outbox of its database, so a relay of another test server (memory bus)
    must never take these events, nor hold the relay lock they wait for."""
    return await scratch_database(database_url, "chatgql_events")


@pytest.fixture(scope="session")
async def engine(migrated_url: str) -> AsyncIterator:
    engine = create_engine(migrated_url, pool_size=5, max_overflow=5)
    yield engine
    await engine.dispose()


def kafka_settings(database_url: str, kafka: KafkaBroker, topic: str, **overrides):
    """Settings for a chatgql process on the test broker, with its own topic."""
    return make_settings(
        database_url,
        kafka_bootstrap_servers=kafka.bootstrap,
        kafka_topic=topic,
        kafka_group=f"fanout-{topic}",
        kafka_topic_partitions=8,
        # The topic is new: read it from its start, so nothing sent before the
        # group's first position lookup is missed.
        kafka_offset_reset="earliest",
        **overrides,
    )


@pytest.fixture
def topic() -> str:
    """A topic of this test's own, so no test sees another's events."""
    return f"chat.events.test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def kafka_server(migrated_url: str, kafka: KafkaBroker, topic: str) -> AsyncIterator[RunningServer]:
    """chatgql with relay -> Kafka -> consumer (group fanout) -> bus -> subscriptions."""
    async with RunningServer(kafka_settings(migrated_url, kafka, topic)) as server:
        await asyncio.wait_for(server.runtime.consumer.assigned.wait(), 60)
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> RedisCluster:
    """A Redis Cluster of 3 masters of the test session's own (Debian's redis-server 7)."""
    data_dir = Path(tempfile.mkdtemp(prefix="chatgql-test-redis-cluster-"))
    cluster = RedisCluster(free_cluster_port(), data_dir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
