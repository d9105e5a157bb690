"""`chatgql serve --workers 2`: two API processes share the port; every subscriber,
whichever worker holds its websocket, gets every message of its conversations, once
and in order, whichever worker took the send. Run as a real process (uvicorn's
supervisor and its workers), with the redis bus they share, with and without Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import psutil
import pytest
from sqlalchemy import text

from chatgql.settings import load_settings

from ..conftest import create_engine, drop_database, free_port, scratch_database
from ..support.infra import JWT_SECRET, ChatProcess, FaultRedis, chat_env, tail
from ..support.live import ChatApi, WsClient, bearer, collect_messages, subscribe_messages

SENDS = 40


@contextlib.asynccontextmanager
async def workers_server(
    migrated_url: str, tmp_path: Path, kafka_bootstrap: str | None, topic: str
) -> AsyncIterator[SimpleNamespace]:
    name = f"workers_{uuid.uuid4().hex[:8]}"
    url = await scratch_database(migrated_url, name)
    redis = FaultRedis(tmp_path / "redis.log")
    port = free_port()
    env = chat_env(url, kafka_bootstrap or "", topic, redis.url)
    env["CHATGQL_WORKERS"] = "2"
    if kafka_bootstrap is None:
        env.pop("CHATGQL_KAFKA_BOOTSTRAP_SERVERS")
    serve = ChatProcess(
        "serve",
        ["serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        env,
        tmp_path,
        port=port,
    )
    engine = create_engine(url, pool_size=2, max_overflow=0)
    try:
        serve.start()
        await serve.wait_ready()
        settings = load_settings(database_url=url, jwt_secret=JWT_SECRET, kafka_bootstrap_servers=None)
        yield SimpleNamespace(
            process=serve,
            port=port,
            engine=engine,
            settings=settings,
            url=f"http://127.0.0.1:{port}/graphql",
            ws_url=f"ws://127.0.0.1:{port}/graphql",
        )
    finally:
        serve.stop()
        await engine.dispose()
        redis.close()
        await drop_database(migrated_url, name)


def worker_pids(process: ChatProcess) -> list[int]:
    """uvicorn's workers: the supervisor's children that hold connections on its port."""
    return [child.pid for child in psutil.Process(process.proc.pid).children()]


def sockets_by_worker(process: ChatProcess, port: int) -> dict[int, set[int]]:
    """worker pid -> the client-side ports of the established connections it holds."""
    held: dict[int, set[int]] = {}
    for pid in worker_pids(process):
        try:
            connections = psutil.Process(pid).net_connections("tcp")
        except psutil.Error:
            continue
        held[pid] = {
            c.raddr.port
            for c in connections
            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port and c.raddr
        }
    return held


@pytest.mark.kafka
@pytest.mark.parametrize("with_kafka", [True, False], ids=["kafka", "bus-only"])
async def test_two_workers_deliver_every_message_to_every_subscriber_whichever_worker_holds_it(
    migrated_url, kafka, topic, tmp_path, with_kafka
):
    async with workers_server(migrated_url, tmp_path, kafka.bootstrap if with_kafka else None, topic) as server:
        assert len(worker_pids(server.process)) >= 2, tail(server.process.log)
        # new connections each request: sends are spread over both workers too
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as http:
            api = ChatApi(http, server.url, server.settings)
            cid = await api.create_group(1, [2])

            # the subscriber (user 1, several devices), with websockets on both workers
            clients, ops = [], []
            try:

                async def open_some(n: int) -> None:
                    for _ in range(n):
                        client = await WsClient.connect(server.ws_url, bearer(server.settings, 1))
                        clients.append(client)
                        ops.append(await subscribe_messages(client, cid))

                await open_some(3)
                held = sockets_by_worker(server.process, server.port)
                if sum(1 for ports in held.values() if ports) < 2:
                    # The kernel hands a shared socket's connections to whichever worker accepts first,
                    # often the same one: stop that one while more connect, so the other takes them.
                    busy = next(pid for pid, ports in held.items() if ports)
                    os.kill(busy, signal.SIGSTOP)
                    try:
                        await open_some(3)
                    finally:
                        os.kill(busy, signal.SIGCONT)
                held = sockets_by_worker(server.process, server.port)
                assert sum(1 for ports in held.values() if ports) >= 2, f"all {len(clients)} on one worker: {held}"
                await asyncio.sleep(0.5)  # every subscription registered with its worker's dispatcher

                seqs = [await api.send(2, cid, f"m{i}") for i in range(SENDS)]
                assert seqs == list(range(1, SENDS + 1))
                for op in ops:
                    got = await collect_messages(op, {cid: SENDS}, timeout=30)
                    assert got[cid] == list(range(1, SENDS + 1))
            finally:
                await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)

        # the workers' relays drained everything (they share the shards out)
        async with server.engine.connect() as conn:
            for _ in range(100):
                if (await conn.execute(text("SELECT count(*) FROM outbox"))).scalar_one() == 0:
                    break
                await asyncio.sleep(0.1)
            assert (await conn.execute(text("SELECT count(*) FROM outbox"))).scalar_one() == 0


def test_more_than_one_worker_without_a_shared_bus_is_refused():
    with pytest.raises(ValueError, match="CHATGQL_BROADCAST_URL=redis"):
        load_settings(workers=2, broadcast_url="memory://")
    assert load_settings(workers=2, broadcast_url="redis://127.0.0.1:6379").workers == 2
