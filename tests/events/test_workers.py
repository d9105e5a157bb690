"""`chatgql serve --workers 2`: two API processes share the port; every subscriber,
whichever worker holds its websocket, gets every message of its conversations, once
and in order, whichever worker took the send. Run as a real process (uvicorn's
supervisor and its workers), with and without Kafka, on the two buses workers share: a
Redis, or (the default, nothing to install) the supervisor's hub (chatgql/server/supervisor.py).
With the hub, a user's rate limit holds across the workers; either way the supervisor runs
the one relay, and its workers die with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import psutil
import pytest
from sqlalchemy import text

from chatgql.settings import load_settings
from chatgql.store.outbox import RELAY_APPLICATION

from ..conftest import create_engine, drop_database, free_port, scratch_database
from ..support.infra import JWT_SECRET, ChatProcess, FaultRedis, chat_env, tail
from ..support.live import ChatApi, WsClient, bearer, collect_messages, subscribe_messages

SENDS = 40


@contextlib.asynccontextmanager
async def workers_server(
    migrated_url: str,
    tmp_path: Path,
    kafka_bootstrap: str | None,
    topic: str,
    bus: str = "redis",
    env_extra: dict[str, str] | None = None,
) -> AsyncIterator[SimpleNamespace]:
    name = f"workers_{uuid.uuid4().hex[:8]}"
    url = await scratch_database(migrated_url, name)
    redis = FaultRedis(tmp_path / "redis.log") if bus == "redis" else None
    port = free_port()
    env = chat_env(url, kafka_bootstrap or "", topic, redis.url if redis is not None else "memory://")
    env["CHATGQL_WORKERS"] = "2"
    env.update(env_extra or {})
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
        if redis is not None:
            redis.close()
        await drop_database(migrated_url, name)


def sockets_by_worker(process: ChatProcess, port: int) -> dict[int, set[int]]:
    """worker pid -> the client-side ports of the established connections it holds."""
    held: dict[int, set[int]] = {}
    for pid in process.workers():
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


@contextlib.contextmanager
def only_one_accepting(process: ChatProcess, worker: int) -> Iterator[None]:
    """Every other worker stopped (SIGSTOP): new connections go to this one, which alone accepts."""
    stopped = [pid for pid in process.workers() if pid != worker]
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.kafka
@pytest.mark.parametrize("bus", ["redis", "hub"])
@pytest.mark.parametrize("with_kafka", [True, False], ids=["kafka", "bus-only"])
async def test_two_workers_deliver_every_message_to_every_subscriber_whichever_worker_holds_it(
    migrated_url, kafka, topic, tmp_path, with_kafka, bus
):
    bootstrap = kafka.bootstrap if with_kafka else None
    async with workers_server(migrated_url, tmp_path, bootstrap, topic, bus) as server:
        assert len(server.process.workers()) >= 2, tail(server.process.log)
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

        # the supervisor's relay drained everything, and it is the only one (each relay's control
        # connection names it; relays count each other by it), holding every outbox slot
        async with server.engine.connect() as conn:
            for _ in range(100):
                if (await conn.execute(text("SELECT count(*) FROM outbox"))).scalar_one() == 0:
                    break
                await asyncio.sleep(0.1)
            assert (await conn.execute(text("SELECT count(*) FROM outbox"))).scalar_one() == 0
            relays = (
                await conn.execute(
                    text(
                        "SELECT application_name FROM pg_stat_activity"
                        " WHERE datname = current_database() AND application_name LIKE :relay"
                    ),
                    {"relay": RELAY_APPLICATION + " %"},
                )
            ).scalars()
            assert len(list(relays)) == 1


@pytest.mark.kafka
async def test_a_users_rate_limit_holds_across_the_workers_of_the_hub(migrated_url, kafka, topic, tmp_path):
    """Five sends a user's burst, nearly no refill: with the hub keeping the buckets, the five
    go however the sends spread over the workers (half on each here); counted per worker,
    each would allow five."""
    limits = {"CHATGQL_RATE_SEND_PER_SECOND": "0.001", "CHATGQL_RATE_SEND_BURST": "5"}
    async with workers_server(migrated_url, tmp_path, None, topic, "hub", limits) as server:
        first, second = server.process.workers()[:2]
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as http:
            api = ChatApi(http, server.url, server.settings)
            cid = await api.create_group(1, [2])
            outcomes = []
            for worker in (first, second):
                with only_one_accepting(server.process, worker):
                    for _ in range(5):
                        body = await api.execute(
                            "mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m,"
                            ' body: "x") { message { seq } } }',
                            {"c": cid, "m": str(uuid.uuid4())},
                            user=2,
                        )
                        outcomes.append(body["errors"][0]["extensions"]["reason"] if "errors" in body else "sent")
        assert outcomes == ["sent"] * 5 + ["RATE_LIMITED"] * 5, outcomes


@pytest.mark.kafka
async def test_the_workers_die_with_a_sigkilled_supervisor(migrated_url, kafka, topic, tmp_path):
    """A SIGKILL of `chatgql serve` (an OOM kill, a kill of the service) leaves no worker holding
    the port: a new `chatgql serve` on it starts at once."""
    async with workers_server(migrated_url, tmp_path, None, topic, "hub") as server:
        workers = [psutil.Process(pid) for pid in server.process.workers()]
        assert len(workers) >= 2
        server.process.kill()
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, f"workers outlived their supervisor: {alive}"
        server.process.start()
        await server.process.wait_ready()
        async with httpx.AsyncClient(timeout=30) as http:
            cid = await ChatApi(http, server.url, server.settings).create_group(1, [2])
            assert await ChatApi(http, server.url, server.settings).send(1, cid) == 1


def test_workers_default_to_one_per_core_but_one_on_any_bus():
    assert load_settings().workers == max(1, len(os.sched_getaffinity(0)) - 1)
    assert load_settings(workers=2, broadcast_url="memory://").workers == 2
    assert load_settings(workers=2, broadcast_url="redis://127.0.0.1:6379").workers == 2
