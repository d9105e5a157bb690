"""soak: the outside soak of issue 13 (item 5), bounded, at twice the rate one `chatgql serve` sustains.

The shape of the 15-minute soak that found the overload behaviour: users in
groups of 10, each user on a few websockets, every socket subscribed to
messageNew and readUpdated over all of its user's conversations, sockets
closing and new ones opening all the time (churn), and a sender posting
sendMessage, each acknowledged send followed by another member's markRead.
Here it is scaled down and bounded, and run at twice the rate the server
sustains on this machine, found first in the same run (calibration: the
server's CPU per send+markRead pair, deliveries included, asked past saturation;
sustainable = one core / that; below saturation the server batches less and
the figure overstates the cost).

Every second it records: messageNew deliveries received, their lag (send
start -> received, the send's start travels in the message body), the
server's RSS, and the resync errors subscribers got (LIMIT_EXCEEDED with
resync: true, by reason: SUBSCRIBER_TOO_SLOW, DELIVERY_DELAYED, ...; a
subscriber told to resync subscribes again). After the load every client
leaves and RSS is followed back down. Storage is checked at the end: every
acknowledged send stored once, with its seq.

    python -m bench.soak [--seconds 60] [--users 100] [--sockets-per-user 2] [--kafka] [--rate-factor 2]

Writes bench/results/soak.md (and bench/out/soak.json). The end-to-end test
tests/faults/test_soak.py runs the same Soak with every check inside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from .gcsoak import CID0, GROUP_SIZE, READ, SEND, SUB_MESSAGES, SUB_READS, USER0, seed
from .rawhttp import Pool

RESYNC_REASONS = ("SUBSCRIBER_TOO_SLOW", "DELIVERY_DELAYED", "STREAM_INTERRUPTED")


def rss_of(pid: int) -> int:
    """A process's resident memory in bytes."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def cpu_of(pid: int) -> float:
    """A process's user + system CPU seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Second:
    """What one second of the soak saw."""

    t: float  # seconds since the load started
    delivered: int = 0
    lags: list[float] = field(default_factory=list)
    resyncs: int = 0
    acked: int = 0
    rss: int = 0

    @property
    def lag_p50(self) -> float | None:
        return statistics.median(self.lags) if self.lags else None

    @property
    def lag_max(self) -> float | None:
        return max(self.lags) if self.lags else None


class Socket:
    """One subscriber websocket: messageNew and readUpdated over all of its user's conversations."""

    def __init__(self, soak: Soak, user: int) -> None:
        self.soak = soak
        self.user = user
        self.ws = None
        self.task: asyncio.Task | None = None
        self.ops = 0

    async def open(self) -> None:
        import websockets

        self.ws = await websockets.connect(
            self.soak.ws_url,
            subprotocols=["graphql-transport-ws"],
            compression=None,
            ping_interval=None,
            max_size=None,
            open_timeout=60,
            proxy=None,
        )
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {self.soak.token(self.user)}"}}
        await self.ws.send(orjson.dumps(init).decode())
        frame = orjson.loads(await asyncio.wait_for(self.ws.recv(), 60))
        if frame["type"] != "connection_ack":
            raise RuntimeError(f"refused: {frame}")
        await self._subscribe(SUB_MESSAGES)
        await self._subscribe(SUB_READS)
        self.task = asyncio.create_task(self._read())

    async def _subscribe(self, query: str) -> None:
        self.ops += 1
        op = {
            "id": f"{'m' if query is SUB_MESSAGES else 'r'}{self.ops}",
            "type": "subscribe",
            "payload": {"query": query},
        }
        await self.ws.send(orjson.dumps(op).decode())

    async def _read(self) -> None:
        import websockets

        soak = self.soak
        try:
            async for raw in self.ws:
                now = time.monotonic_ns()
                frame = orjson.loads(raw)
                kind = frame.get("type")
                if kind == "next":
                    payload = frame["payload"]
                    data = payload.get("data") or {}
                    if "messageNew" in data:
                        soak.delivered(now, int(data["messageNew"]["message"]["body"]))
                    elif payload.get("errors"):
                        await self._resync(frame["id"], payload["errors"])
                elif kind == "error":
                    await self._resync(frame["id"], frame.get("payload") or [])
                elif kind == "ping":
                    await self.ws.send('{"type":"pong"}')
        except (websockets.ConnectionClosed, OSError):
            pass

    async def _resync(self, op_id: str, errors: list) -> None:
        """The subscription ended with an error: counted by reason; subscribe again (as a client would,
        after catching up with sync, which the soak leaves out)."""
        reason = "?"
        for error in errors:
            extensions = error.get("extensions") or {}
            resync = extensions.get("resync")
            reason = extensions.get("reason", "RESYNC") if resync else extensions.get("code", "ERROR")
        self.soak.resync(reason)
        if self.soak.running:
            await self._subscribe(SUB_MESSAGES if op_id.startswith("m") else SUB_READS)

    def drop(self) -> None:
        """The client goes: half of them without a close frame (a dropped connection)."""
        if self.ws is None:
            return
        if random.random() < 0.5:
            self.ws.transport.abort()
        else:
            asyncio.ensure_future(self.ws.close())
        if self.task is not None:
            self.task.cancel()


class Soak:
    """The soak against one running server (pid: its process, for RSS and CPU)."""

    def __init__(
        self,
        host: str,
        port: int,
        pid: int,
        token,
        *,
        users: int = 100,
        sockets_per_user: int = 2,
        churn_per_second: int = 4,
        max_in_flight: int = 256,
    ) -> None:
        self.host, self.port, self.pid = host, port, pid
        self._issue = token
        self._tokens: dict[int, str] = {}
        self.ws_url = f"ws://{host}:{port}/graphql"
        self.users = users
        self.sockets_per_user = sockets_per_user
        self.churn_per_second = churn_per_second
        self.max_in_flight = max_in_flight
        self.sockets: list[Socket] = []
        self.seconds: list[Second] = []
        self.resyncs: Counter[str] = Counter()
        self.acked: dict[str, tuple[int, int]] = {}  # clientMsgId -> (conversation id, seq)
        self.failures: list[str] = []
        self.skipped = 0  # sends not made: max_in_flight requests were waiting already
        self.running = False
        self._t0 = 0.0
        self._rng = random.Random(13)

    def token(self, user: int) -> str:
        """The user's token: one per user, as a client keeps it (a new one every call would fill the
        server's cache of verified tokens, 50,000 entries, and read as memory the load kept)."""
        found = self._tokens.get(user)
        if found is None:
            found = self._tokens[user] = self._issue(user)
        return found

    # ---- what the sockets report

    def _second(self) -> Second:
        t = time.monotonic() - self._t0
        while len(self.seconds) <= int(t):
            self.seconds.append(Second(float(len(self.seconds))))
        return self.seconds[int(t)]

    def delivered(self, now_ns: int, sent_ns: int) -> None:
        second = self._second()
        second.delivered += 1
        second.lags.append((now_ns - sent_ns) / 1e9)

    def resync(self, reason: str) -> None:
        self.resyncs[reason] += 1
        self._second().resyncs += 1

    # ---- the clients

    async def connect(self) -> None:
        gate = asyncio.Semaphore(32)

        async def one(user: int) -> Socket:
            async with gate:
                socket = Socket(self, user)
                await socket.open()
                return socket

        users = [USER0 + 1 + i % self.users for i in range(self.users * self.sockets_per_user)]
        self.sockets = list(await asyncio.gather(*(one(u) for u in users)))

    async def _churn(self) -> None:
        """Every second churn_per_second sockets go and as many new ones come."""
        while True:
            await asyncio.sleep(1)
            for _ in range(self.churn_per_second):
                old = self.sockets.pop(self._rng.randrange(len(self.sockets)))
                old.drop()
                new = Socket(self, old.user)
                try:
                    await new.open()
                    self.sockets.append(new)
                except Exception as error:  # noqa: BLE001 - counted and reported
                    self.failures.append(f"reconnect: {error!r}")

    async def leave(self) -> None:
        """Every client goes."""
        sockets, self.sockets = self.sockets, []
        for socket in sockets:
            socket.drop()
        await asyncio.sleep(0.5)

    # ---- the load

    async def load(self, rate: float, seconds: float) -> None:
        """send+markRead pairs at rate/s for seconds, sampling every second; clients churning meanwhile."""
        pool = await Pool(self.host, self.port, self.max_in_flight).open()
        groups = self.users // GROUP_SIZE
        in_flight = 0

        async def pair() -> None:
            nonlocal in_flight
            g = self._rng.randint(1, groups)
            members = [USER0 + (g - 1) * GROUP_SIZE + j for j in range(1, GROUP_SIZE + 1)]
            sender, reader = self._rng.sample(members, 2)
            cid, msg_id = CID0 + g, str(uuid.uuid4())
            try:
                body = orjson.dumps(
                    {"query": SEND, "variables": {"c": str(cid), "m": msg_id, "b": str(time.monotonic_ns())}}
                )
                status, payload = await pool.post(body, f"Bearer {self.token(sender)}")
                answer = orjson.loads(payload)
                if status != 200 or answer.get("errors"):
                    raise RuntimeError(f"send: HTTP {status} {payload[:200]!r}")
                seq = answer["data"]["sendMessage"]["message"]["seq"]
                self.acked[msg_id] = (cid, seq)
                self._second().acked += 1
                body = orjson.dumps({"query": READ, "variables": {"c": str(cid), "s": seq}})
                status, payload = await pool.post(body, f"Bearer {self.token(reader)}")
                if status != 200 or b'"errors"' in payload:
                    raise RuntimeError(f"read: HTTP {status} {payload[:200]!r}")
            except Exception as error:  # noqa: BLE001 - counted and reported
                self.failures.append(repr(error))
            finally:
                in_flight -= 1

        async def sample() -> None:
            while True:
                self._second().rss = rss_of(self.pid)
                await asyncio.sleep(0.25)

        self.running = True
        self._t0 = time.monotonic()
        sampler = asyncio.create_task(sample())
        churner = asyncio.create_task(self._churn())
        tasks: set[asyncio.Task] = set()
        try:
            for i in range(int(rate * seconds)):
                delay = self._t0 + i / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if in_flight >= self.max_in_flight:
                    self.skipped += 1
                    continue
                in_flight += 1
                task = asyncio.create_task(pair())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
        finally:
            self.running = False
            for task in (sampler, churner):
                task.cancel()
            pool.close()

    async def calibrate(self, rate: float, seconds: float) -> float:
        """The server's CPU seconds per send+markRead pair (its deliveries included) at `rate`, less
        what it spends idle with the same clients connected (heartbeats, the relay's polls). Asked
        past saturation, one core / this is the rate it sustains; below saturation it overstates the
        cost (the server batches less: group commit, read coalescing, Kafka batches)."""
        cpu = cpu_of(self.pid)
        await asyncio.sleep(seconds / 2)
        idle_per_second = (cpu_of(self.pid) - cpu) / (seconds / 2)
        cpu, started = cpu_of(self.pid), time.monotonic()
        before = len(self.acked)
        await self.load(rate, seconds)
        await asyncio.sleep(1)  # the last deliveries
        pairs = len(self.acked) - before
        busy = cpu_of(self.pid) - cpu - idle_per_second * (time.monotonic() - started)
        return max(busy, 0.0) / max(1, pairs)

    def reset(self) -> None:
        self.seconds = []
        self.resyncs = Counter()
        self.failures = []
        self.skipped = 0

    async def rss_after_leaving(self, baseline: int, within: float, settle: float = 20.0) -> list[tuple[float, int]]:
        """RSS every half second after every client left, until it is within `within` bytes of baseline
        (and then two seconds more) or `settle` seconds passed (within < 0: for `settle` seconds)."""
        samples: list[tuple[float, int]] = []
        start = time.monotonic()
        back_at = None
        while time.monotonic() - start < settle:
            rss = rss_of(self.pid)
            samples.append((time.monotonic() - start, rss))
            if within >= 0 and rss - baseline <= within and back_at is None:
                back_at = time.monotonic()
            if back_at is not None and time.monotonic() - back_at > 2:
                break
            await asyncio.sleep(0.5)
        return samples


async def stored(database_url: str) -> dict[str, list[tuple[int, int]]]:
    """clientMsgId -> [(conversation id, seq)] of every soak message in storage."""
    import asyncpg

    conn = await asyncpg.connect(_dsn(database_url))
    try:
        rows = await conn.fetch(
            "SELECT conversation_id, seq, client_msg_id::text AS m FROM message WHERE conversation_id > $1", CID0
        )
    finally:
        await conn.close()
    out: dict[str, list[tuple[int, int]]] = {}
    for row in rows:
        out.setdefault(row["m"], []).append((row["conversation_id"], row["seq"]))
    return out


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


def storage_problems(acked: dict[str, tuple[int, int]], rows: dict[str, list[tuple[int, int]]]) -> list[str]:
    """Acknowledged sends missing, stored twice, or stored with another seq."""
    problems = []
    for msg_id, (cid, seq) in acked.items():
        found = rows.get(msg_id, [])
        if found != [(cid, seq)]:
            problems.append(f"{msg_id}: acknowledged as {(cid, seq)}, stored as {found}")
    return problems


def summary(soak: Soak, rate: float, sustainable: float) -> dict:
    seconds = soak.seconds
    return {
        "sustainable_pairs_per_second": round(sustainable, 1),
        "rate_pairs_per_second": round(rate, 1),
        "acked": len(soak.acked),
        "skipped_sends": soak.skipped,
        "failures": len(soak.failures),
        "delivered_per_second": [s.delivered for s in seconds],
        "lag_p50_s": [None if s.lag_p50 is None else round(s.lag_p50, 3) for s in seconds],
        "lag_max_s": [None if s.lag_max is None else round(s.lag_max, 3) for s in seconds],
        "rss_mb": [round(s.rss / 2**20, 1) for s in seconds],
        "resyncs": dict(soak.resyncs),
        "resyncs_per_second": [s.resyncs for s in seconds],
    }


# --------------------------------------------------------------------- the bench


def _table(result: dict) -> str:
    rows = ["| s | delivered/s | lag p50 (s) | lag max (s) | RSS (MB) | resyncs |", "|---|---|---|---|---|---|"]
    n = len(result["delivered_per_second"])
    for i in range(n):
        rows.append(
            f"| {i} | {result['delivered_per_second'][i]} | {result['lag_p50_s'][i]} | {result['lag_max_s'][i]} "
            f"| {result['rss_mb'][i]} | {result['resyncs_per_second'][i]} |"
        )
    return "\n".join(rows)


def _diag(pid: int) -> None:
    """With SOAK_DIAG_SERVER set, a sitecustomize of the caller's (on PYTHONPATH) dumps the server's
    object counts on SIGUSR2 (how what held memory after the clients left was found; docs/design/scale/overload.md)."""
    import os
    import signal

    if os.environ.get("SOAK_DIAG_SERVER"):
        os.kill(pid, signal.SIGUSR2)


async def _bench(args: argparse.Namespace, server, database_url: str) -> dict:
    from .queries import token

    soak = Soak(
        "127.0.0.1",
        server.port,
        server.pid,
        token,
        users=args.users,
        sockets_per_user=args.sockets_per_user,
        churn_per_second=args.churn,
    )
    idle = rss_of(server.pid)
    _diag(server.pid)
    await soak.connect()
    connected = rss_of(server.pid)
    cpu_per_pair = await soak.calibrate(args.calibration_rate, args.calibration_seconds)
    _diag(server.pid)
    sustainable = 1.0 / cpu_per_pair
    rate = args.rate_factor * sustainable
    soak.reset()
    await soak.load(rate, args.seconds)
    await asyncio.sleep(2)
    result = summary(soak, rate, sustainable)
    await soak.leave()
    after = await soak.rss_after_leaving(idle, within=max(8 << 20, (connected - idle) // 4))
    _diag(server.pid)
    rows = await stored(database_url)
    result.update(
        cpu_ms_per_pair=round(cpu_per_pair * 1000, 2),
        rss_idle_mb=round(idle / 2**20, 1),
        rss_connected_mb=round(connected / 2**20, 1),
        rss_after_leaving_mb=[(round(t, 1), round(r / 2**20, 1)) for t, r in after],
        storage_problems=storage_problems(soak.acked, rows)[:20],
        first_failures=soak.failures[:5],
    )
    return result


def _write(result: dict, args: argparse.Namespace, log_errors: list[str]) -> Path:
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "soak.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    delivered = result["delivered_per_second"]
    steady = delivered[len(delivered) // 3 :] or [0]
    text = f"""# Soak at {args.rate_factor}x the sustainable rate (`python -m bench.soak`)

{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}; {args.users} users in groups of {GROUP_SIZE}, \
{args.users * args.sockets_per_user} websockets (messageNew + readUpdated each: \
{2 * args.users * args.sockets_per_user} subscriptions), {args.churn} sockets replaced a second, \
{"Kafka" if args.kafka else "in-process bus"}; {args.seconds} s of load.

- calibration: {result["cpu_ms_per_pair"]} ms of server CPU per send+markRead pair (deliveries included) \
at {args.calibration_rate}/s -> sustainable {result["sustainable_pairs_per_second"]} pairs/s on one core
- load: {result["rate_pairs_per_second"]} pairs/s asked; {result["acked"]} sends acknowledged, \
{result["skipped_sends"]} not made (256 requests already waiting), {result["failures"]} failed
- messageNew delivered/s (last two thirds): median {statistics.median(steady):.0f}
- resync signals: {result["resyncs"] or "none"}
- RSS: idle {result["rss_idle_mb"]} MB, all connected {result["rss_connected_mb"]} MB, \
peak {max(result["rss_mb"] or [0])} MB, after every client left: {result["rss_after_leaving_mb"][-1][1]} MB \
({result["rss_after_leaving_mb"][-1][0]} s later)
- storage: {len(result["storage_problems"])} acknowledged sends missing, duplicated or moved
- server log: {len(log_errors)} ERROR/traceback lines

{_table(result)}
"""
    path = Path(__file__).parent / "results" / "soak.md"
    path.write_text(text)
    return path


def main() -> None:
    from .infra import Kafka, Postgres, Server, raise_fd_limit

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--sockets-per-user", type=int, default=5)
    parser.add_argument("--churn", type=int, default=4)
    parser.add_argument("--rate-factor", type=float, default=2.0)
    parser.add_argument("--calibration-rate", type=float, default=600.0)
    parser.add_argument("--calibration-seconds", type=float, default=5.0)
    parser.add_argument("--kafka", action="store_true")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server (repeatable)")
    args = parser.parse_args()
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-soak-"))
    pg = Postgres.start(scratch / "pg")
    kafka = Kafka.start(scratch) if args.kafka else None
    server = None
    try:
        from chatgql import db

        asyncio.run(db.upgrade(pg.url))

        async def seeded() -> None:
            import asyncpg

            conn = await asyncpg.connect(_dsn(pg.url))
            try:
                await seed(conn, args.users)
            finally:
                await conn.close()

        asyncio.run(seeded())
        server = Server(pg.url, scratch, kafka)
        server.env.update(CHATGQL_RATE_SEND_PER_SECOND="0", CHATGQL_RATE_READ_PER_SECOND="0")
        server.env.update(dict(item.split("=", 1) for item in args.env))
        server.spawn()
        server.wait_ready()
        result = asyncio.run(_bench(args, server, pg.url))
        errors = [
            line
            for line in server.log_path.read_text(errors="replace").splitlines()
            if "ERROR" in line or "Traceback" in line
        ]
        path = _write(result, args, errors)
        print(path.read_text())
    finally:
        if server is not None:
            server.stop()
        if kafka is not None:
            kafka.stop()
        pg.stop()
        with contextlib.suppress(Exception):
            shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
