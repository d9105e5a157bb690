"""Two API processes behind one Kafka topic and consumer group, joined by a redis
broadcast bus: each event is consumed once, by whichever process owns its
partition, and broadcast through redis to the subscribers of both."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest
from aiokafka.partitioner import DefaultPartitioner

from ..conftest import RunningServer, free_port
from ..support.live import (
    ChatApi,
    collect_messages,
    subscribe_messages,
    wait_active_subscriptions,
    wait_leader,
    ws_connect,
)
from .conftest import kafka_settings

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
PARTITIONS = 8  # kafka_settings' kafka_topic_partitions


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A redis-server of this test's own on a free 127.0.0.1 port, no persistence."""
    scratch = tempfile.mkdtemp(prefix="chatgql-test-redis-")
    proc = None
    try:
        for _ in range(3):  # the free port may be taken before redis binds it
            port = free_port()
            proc = subprocess.Popen(
                [
                    REDIS_SERVER,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    scratch,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
            for _ in range(100):
                if proc.poll() is not None or _redis_answers(port):
                    break
                time.sleep(0.05)
            if proc.poll() is None and _redis_answers(port):
                break
            proc.kill()
            proc.wait(5)
            proc = None
        assert proc is not None, f"redis-server ({REDIS_SERVER}) did not start"
        yield f"redis://127.0.0.1:{port}"
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(scratch, ignore_errors=True)


def partition_of(conversation_id: str) -> int:
    partitions = list(range(PARTITIONS))
    return DefaultPartitioner()(conversation_id.encode(), partitions, partitions)


async def test_a_subscriber_on_one_process_gets_messages_sent_through_the_other(
    migrated_url, kafka, topic, http, redis_url
):
    # Same topic and consumer group (fanout-<topic>) for both; only A relays.
    a = RunningServer(kafka_settings(migrated_url, kafka, topic, broadcast_url=redis_url))
    b = RunningServer(kafka_settings(migrated_url, kafka, topic, broadcast_url=redis_url, run_relay=False))
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(a)
        await asyncio.wait_for(a.runtime.consumer.assigned.wait(), 60)
        await stack.enter_async_context(b)
        # B gets partitions only once the group has rebalanced over both members.
        await asyncio.wait_for(b.runtime.consumer.assigned.wait(), 60)
        await wait_leader(a)
        api_a, api_b = ChatApi.of(a, http), ChatApi.of(b, http)

        # Conversations in every partition, so both consumers hand events to redis.
        conversations: list[str] = []
        covered: set[int] = set()
        while len(covered) < PARTITIONS:
            cid = await api_a.create_group(1, [2])
            if partition_of(cid) not in covered:
                covered.add(partition_of(cid))
                conversations.append(cid)
            assert len(conversations) < 100

        async with await ws_connect(a, 2) as ws_a, await ws_connect(b, 2) as ws_b:
            on_a = await subscribe_messages(ws_a)
            on_b = await subscribe_messages(ws_b)
            await wait_active_subscriptions(a, 1)
            await wait_active_subscriptions(b, 1)

            for cid in conversations:
                await api_a.send(1, cid, "through A")
            expected = {cid: 1 for cid in conversations}
            duplicates: list[tuple[str, int]] = []
            for op in (on_b, on_a):
                got = await collect_messages(op, expected, timeout=30, duplicates=duplicates)
                assert got == {cid: [1] for cid in conversations}

            for cid in conversations:
                await api_b.send(1, cid, "through B")
            expected = {cid: 2 for cid in conversations}
            for op in (on_a, on_b):
                got = await collect_messages(
                    op, expected, timeout=30, first={cid: 2 for cid in conversations}, duplicates=duplicates
                )
                assert got == {cid: [2] for cid in conversations}

            # Each event was consumed once: no subscriber got a second copy.
            assert duplicates == []
            for op in (on_a, on_b):
                with pytest.raises(TimeoutError):
                    await op.next(timeout=1.5)
