"""An attacker's view: a production-mode chatgql in its own process, and a bystander.

The server runs as `python -m chatgql.server.cli serve` (uvloop, httptools, the lean
websocket protocol: what production runs), not in the test's event loop, so
that a request that burns the server's CPU shows up as lost time for the
server's other clients and not as a pause of the test itself. `Bystander`
is such an other client: while an attack runs it keeps asking a small
authenticated query and /healthz, and records how long each answer took.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from chatgql.edge.auth import issue_token
from chatgql.settings import load_settings

from ..conftest import REPO, create_engine, free_port, scratch_database

SECRET = "a-production-secret-for-adversarial-tests-0123456789"


@dataclass
class ServeProcess:
    """One production-mode `chatgql serve` on 127.0.0.1 (embedded bus, no Kafka)."""

    database_url: str
    env_overrides: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    log: Path | None = None
    log_level: str = "warning"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/graphql"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    @property
    def settings(self) -> Any:
        """The settings the process runs with (to issue its tokens)."""
        env = self.environment()
        return load_settings(**{k[len("CHATGQL_") :].lower(): v for k, v in env.items() if k.startswith("CHATGQL_")})

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGQL_")}
        env.update(
            CHATGQL_ENV="production",
            CHATGQL_JWT_SECRET=SECRET,
            CHATGQL_DATABASE_URL=self.database_url,
            CHATGQL_MIGRATE_ON_START="false",
            CHATGQL_HOST="127.0.0.1",
            CHATGQL_PORT=str(self.port),
            CHATGQL_WORKERS="1",  # the bounds under attack are each process's own
        )
        env.update(self.env_overrides)
        return env

    def token(self, user_id: int) -> str:
        return issue_token(self.settings, str(user_id), ttl_seconds=3600)

    def headers(self, user_id: int | None) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if user_id is not None:
            headers["authorization"] = f"Bearer {self.token(user_id)}"
        return headers

    async def start(self, timeout: float = 60) -> None:
        self.log = Path(tempfile.mkstemp(prefix="chatgql-adversarial-", suffix=".log")[1])
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "chatgql.server.cli", "serve", "--log-level", self.log_level],
                env=self.environment(),
                cwd=str(REPO),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"chatgql serve exited during startup:\n{self.log.read_text()[-4000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.base}/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError(f"chatgql serve did not get ready:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self) -> str:
        return self.log.read_text() if self.log else ""


@contextlib.asynccontextmanager
async def serve_process(database_url: str, log_level: str = "warning", **env: str) -> AsyncIterator[ServeProcess]:
    """A running production-mode server; env: extra CHATGQL_* variables."""
    process = ServeProcess(database_url, env_overrides=env, log_level=log_level)
    await process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="session")
async def migrated_url(database_url: str) -> str:
    """The attackers' servers get a database of their own, as the live-path tests do
    (tests/events/conftest.py): every server's relay drains the outbox of its database, and the
    session's test server (the memory bus, tests/conftest.py) runs one on the suite's database.
    Sharing it, each relay leads half the outbox's shards and publishes their events to its own
    process only: a live event of a conversation in the other's half never reached a subscriber
    of `prod` (test_cost's event after the attack, whenever an earlier test of the same worker
    had started the session's server)."""
    return await scratch_database(database_url, "chatgql_adversarial")


@pytest.fixture(scope="session")
async def engine(migrated_url: str) -> AsyncIterator:
    engine = create_engine(migrated_url, pool_size=5, max_overflow=5)
    yield engine
    await engine.dispose()


@pytest.fixture(scope="package")
async def prod(migrated_url: str) -> AsyncIterator[ServeProcess]:
    """One production-mode server with default settings, for the package's probes."""
    async with serve_process(migrated_url) as process:
        yield process


class RawHttp:
    """A keep-alive HTTP/1.1 connection that posts GraphQL with little client CPU (an
    attacker in the test's own process must not slow the bystander measured beside it)."""

    def __init__(self, server: ServeProcess) -> None:
        self.server = server
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        lines = ["POST /graphql HTTP/1.1", "host: 127.0.0.1", f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        assert self.reader is not None
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()


@dataclass
class Bystander:
    """Another client of the server under attack: asks a small authenticated query
    (and /healthz) in a loop and records each answer's latency in seconds."""

    server: ServeProcess
    user_id: int = 999_999
    interval: float = 0.01
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _task: asyncio.Task | None = None

    QUERY = "{ viewer { totalUnread } }"

    async def _loop(self) -> None:
        headers = self.server.headers(self.user_id)
        async with httpx.AsyncClient(timeout=30) as http:
            while True:
                started = time.perf_counter()
                try:
                    response = await http.post(self.server.url, json={"query": self.QUERY}, headers=headers)
                    health = await http.get(f"{self.server.base}/healthz")
                    ok = response.status_code == 200 and "errors" not in response.json() and health.status_code == 200
                    if not ok:
                        self.failures.append(f"{response.status_code} {response.text[:200]}")
                except httpx.HTTPError as error:
                    self.failures.append(repr(error))
                self.latencies.append(time.perf_counter() - started)
                await asyncio.sleep(self.interval)

    async def __aenter__(self) -> Bystander:
        # The test process's own collector (pytest holds a large heap) must not pause the
        # measurement: what is measured is the server.
        gc.collect()
        gc.freeze()
        self._task = asyncio.create_task(self._loop())
        await asyncio.sleep(0.2)  # a few answers before the attack starts
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.1)  # and after
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        gc.unfreeze()

    @property
    def worst(self) -> float:
        return max(self.latencies, default=float("inf"))

    def assert_served(self, max_latency: float) -> None:
        """Every answer came, clean, within max_latency seconds (and there were some)."""
        assert len(self.latencies) >= 3, f"the bystander got only {len(self.latencies)} answers"
        assert not self.failures, self.failures[:5]
        assert self.worst < max_latency, (
            f"the bystander waited {self.worst * 1000:.0f} ms (limit {max_latency * 1000:.0f} ms); "
            f"latencies: {sorted(self.latencies)[-5:]}"
        )


_BYSTANDER = r"""
import json, sys, threading, time
import httpx
url, base, token = sys.argv[1:4]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
latencies, failures = [], []
headers = {"content-type": "application/json", "authorization": "Bearer " + token}
with httpx.Client(timeout=30) as http:
    print("ready", flush=True)
    while not stop.is_set():
        started = time.perf_counter()
        try:
            answer = http.post(url, json={"query": "{ viewer { totalUnread } }"}, headers=headers)
            health = http.get(base + "/healthz")
            if answer.status_code != 200 or "errors" in answer.json() or health.status_code != 200:
                failures.append(f"{answer.status_code} {answer.text[:200]}")
        except httpx.HTTPError as error:
            failures.append(repr(error))
        latencies.append(time.perf_counter() - started)
        time.sleep(0.01)
print(json.dumps({"latencies": latencies, "failures": failures}), flush=True)
"""


@dataclass
class ProcessBystander:
    """Bystander, in a process of its own: the test process's own work (an attacker reading an
    answer, the test's collector) is not counted as the server's. `async with` it around an attack."""

    server: ServeProcess
    user_id: int = 999_999
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _proc: Any = None

    async def __aenter__(self) -> ProcessBystander:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _BYSTANDER,
            self.server.url,
            self.server.base,
            self.server.token(self.user_id),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert (await asyncio.wait_for(self._proc.stdout.readline(), 30)).strip() == b"ready"
        await asyncio.sleep(0.3)  # a few answers before the attack starts
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.2)  # and after
        self._proc.stdin.close()
        out, _ = await asyncio.wait_for(self._proc.communicate(), 60)
        report = json.loads(out.decode().strip().splitlines()[-1])
        self.latencies, self.failures = report["latencies"], report["failures"]

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("inf")

    def summary(self) -> str:
        return (
            f"{len(self.latencies)} answers, p50 {self.quantile(0.5) * 1000:.0f} ms, "
            f"p99 {self.quantile(0.99) * 1000:.0f} ms, max {max(self.latencies, default=0) * 1000:.0f} ms"
        )

    def assert_served(self, p99: float) -> None:
        """Every answer came, clean, with a 99th percentile under p99 seconds (and there were some)."""
        assert len(self.latencies) >= 3, f"the bystander got only {len(self.latencies)} answers"
        assert not self.failures, self.failures[:5]
        assert self.quantile(0.99) < p99, f"the bystander's p99 was over {p99 * 1000:.0f} ms: {self.summary()}"
