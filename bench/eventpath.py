"""CPU per event of the live path (relay + consumer + dispatch + one subscriber's delivery),
this tree against a baseline, interleaved in one run; and delivery capacity.

`python -m bench.eventpath [--baseline REV] [--rate 300] [--seconds 4] [--rounds 2] [--configs kafka,nokafka,redis]`

Two `chatgql serve` processes run at once, each with a database of its own in one
embedded PostgreSQL (and a Kafka topic of its own on one broker): the baseline (src/
of REV, default the branch point with main, exported with `git archive`) and this
tree. The events are written straight into each server's outbox (message.new
events of one group, at a fixed rate, a few rows per insert as group commit
does), so the server does nothing but the event path: the relay reads the outbox,
publishes (Kafka, or straight to the bus/dispatcher without Kafka), deletes; the
consumer hands on; the Dispatcher offers each event to the one subscriber; the
websocket handler writes it. A subscriber process holds the websocket(s).

- per event: the server process's CPU (user + system, psutil) over a load segment
  divided by the events its subscriber received, gross and net of the CPU the same
  server spends idle for as long (heartbeats, relay polls, consumer fetch waits).
  The load alternates A B B A ... in short segments, so both servers share the
  machine's minutes. PostgreSQL's and Kafka's CPU per event are given for
  reference (PostgreSQL's includes the load generator's inserts), and Redis's for the redis config.
- configs: kafka (Kafka + memory bus), nokafka (memory bus alone), redis (Kafka + redis:// bus).
- capacity: 200 subscribers of one group on one server, events at a rate that asks
  for about 8,000 deliveries/s: deliveries/s achieved and server CPU per delivery.

Bounded: about 60 s of load in all with the defaults. Writes bench/results/eventpath.md.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import psutil

from chatgql import db

from .infra import REPO, Kafka, Postgres, Redis, Server, die_with_parent, log, machine_info, process_cpu, use_uvloop
from .perf import export_src
from .queries import token

RESULTS = REPO / "bench" / "results" / "eventpath.md"
SUB = "subscription($c: ID) { messageNew(conversationId: $c) { conversationId seq message { seq senderId body } } }"
BODY = "x" * 120


def _pg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def _create_database(admin_url: str, name: str) -> str:
    conn = await asyncpg.connect(_pg_dsn(admin_url))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    base, _, query = admin_url.partition("?")
    url = base.rsplit("/", 1)[0] + "/" + name + ("?" + query if query else "")
    await db.upgrade(url)
    return url


# --------------------------------------------------------------------- subscribers


def _subscriber(url: str, users: list[int], cid: str, ready, stop, counts) -> None:
    """Hold one subscribed websocket per user; count the `next` frames (not parsed: cheap)."""
    die_with_parent()
    use_uvloop()
    from .ws import open_many

    async def main() -> None:
        sockets, errors = await open_many(url, [token(u) for u in users], SUB, {"c": cid})
        if errors:
            raise RuntimeError(f"subscribers could not connect: {errors[:3]}")

        async def read(ws) -> None:
            async for raw in ws:
                if '"next"' in raw:
                    if '"errors"' in raw:
                        counts[1] += 1
                        return
                    counts[0] += 1
                elif '"ping"' in raw:
                    await ws.send('{"type":"pong"}')

        tasks = [asyncio.create_task(read(ws)) for ws in sockets]
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        for ws in sockets:
            await ws.close()

    asyncio.run(main())


@dataclass
class Target:
    name: str
    server: Server
    url: str  # its database
    cid: str = ""
    seq: int = 0
    subscriber: mp.Process | None = None
    stop: object = None
    counts: object = None

    def cpu(self) -> float:
        assert self.server.proc is not None
        return process_cpu(self.server.proc.pid)

    def rss_mb(self) -> float:
        assert self.server.proc is not None
        return psutil.Process(self.server.proc.pid).memory_info().rss / 2**20


async def _group(target: Target, members: list[int]) -> str:
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(
            target.server.base + "/graphql",
            json={
                "query": "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }",
                "variables": {"t": "bench", "m": [str(m) for m in members]},
            },
            headers={"authorization": f"Bearer {token(1)}"},
        )
        r.raise_for_status()
        return r.json()["data"]["createGroup"]["id"]


def _start_subscribers(target: Target, users: list[int]) -> None:
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    counts = ctx.Array("l", [0, 0], lock=False)
    proc = ctx.Process(target=_subscriber, args=(target.server.ws_url, users, target.cid, ready, stop, counts))
    proc.start()
    if not ready.wait(60):
        raise RuntimeError("subscribers did not connect")
    target.subscriber, target.stop, target.counts = proc, stop, counts


def _stop_subscribers(target: Target) -> None:
    if target.subscriber is not None:
        target.stop.set()  # type: ignore[attr-defined]
        target.subscriber.join(10)
        if target.subscriber.is_alive():
            target.subscriber.kill()
        target.subscriber = None


async def _load(database: db.Database, target: Target, rate: float, seconds: float, per_insert: int = 1) -> int:
    """message.new events of target.cid into the outbox at `rate`/s, `per_insert` events per transaction
    (1: one commit and one relay wake-up per event, as sends without group commit)."""
    from chatgql.store import outbox

    cid = int(target.cid)
    tick = per_insert / rate
    start = time.monotonic()
    sent = 0
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= seconds:
            return sent
        due = int(elapsed * rate) + 1 - sent
        if due > 0:
            events = []
            for _ in range(due):
                target.seq += 1
                events.append(
                    (
                        str(cid),
                        {
                            "type": "message.new",
                            "conversationId": cid,
                            "senderId": 1,
                            "clientMsgId": str(uuid.uuid4()),
                            "body": BODY,
                            "seq": target.seq,
                            "createdAt": "2026-12-01T00:00:00.000000+00:00",
                        },
                    )
                )
            async with database.connection() as conn, conn.transaction():
                await outbox.append(conn, events)
            sent += due
        await asyncio.sleep(tick)


async def _drained(target: Target, expected: int, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if target.counts[0] + target.counts[1] >= expected:  # type: ignore[index]
            break
        await asyncio.sleep(0.05)
    return target.counts[0]  # type: ignore[index]


async def _segment(
    target: Target,
    database: db.Database,
    pg: Postgres,
    kafka: Kafka | None,
    rate: float,
    seconds: float,
    per_insert: int,
) -> dict:
    received0 = target.counts[0]  # type: ignore[index]
    cpu0, pg0, kafka0 = target.cpu(), pg.cpu_seconds(), kafka.cpu_seconds() if kafka else 0.0
    sent = await _load(database, target, rate, seconds, per_insert)
    received = await _drained(target, received0 + sent) - received0
    cpu1, pg1, kafka1 = target.cpu(), pg.cpu_seconds(), kafka.cpu_seconds() if kafka else 0.0
    return {
        "sent": sent,
        "received": received,
        "cpu": cpu1 - cpu0,
        "pg": pg1 - pg0,
        "kafka": kafka1 - kafka0,
        "seconds": seconds,
        "errors": target.counts[1],  # type: ignore[index]
    }


async def _idle(target: Target, seconds: float) -> float:
    cpu0 = target.cpu()
    await asyncio.sleep(seconds)
    return (target.cpu() - cpu0) / seconds


def _spawn(name: str, tree: Path, url: str, scratch: Path, kafka: Kafka | None, extra: dict[str, str]) -> Target:
    work = scratch / name
    work.mkdir(parents=True, exist_ok=True)
    server = Server(url, work, kafka)
    server.env["PYTHONPATH"] = str(tree)
    server.env["CHATGQL_KAFKA_TOPIC"] = f"bench.eventpath.{name}.{uuid.uuid4().hex[:6]}"
    server.env["CHATGQL_RATE_SEND_PER_SECOND"] = "0"
    server.env["CHATGQL_RATE_GROUP_PER_SECOND"] = "0"
    server.env.update(extra)
    server.spawn()
    server.wait_ready()
    return Target(name, server, url)


async def _config(
    config: str, trees: dict[str, Path], pg: Postgres, kafka: Kafka, scratch: Path, args, redis: dict[str, Redis]
) -> dict:
    """kafka: Kafka + memory bus; nokafka: memory bus alone; redis: Kafka + a redis:// bus (the consumer
    publishes to Redis and the process's feed reads it back: the multi-process path, in one process)."""
    use_kafka = kafka if config in ("kafka", "redis") else None

    targets: dict[str, Target] = {}
    databases: dict[str, db.Database] = {}
    try:
        for name, tree in trees.items():
            url = await _create_database(pg.url, f"ev_{config}_{name}")
            # each server a Redis of its own (pub/sub channels are not per database number)
            extra = {"CHATGQL_BROADCAST_URL": redis[name].url} if config == "redis" else {}
            targets[name] = _spawn(f"{config}-{name}", tree, url, scratch, use_kafka, extra)
            databases[name] = await db.Database(url, max_size=2).open()
        for target in targets.values():
            target.cid = await _group(target, [2])
            _start_subscribers(target, [2])
        await asyncio.sleep(2)  # the group's member.added passes; consumers settle
        idle = {name: await _idle(t, 3.0) for name, t in targets.items()}
        segments: dict[str, list[dict]] = {name: [] for name in targets}
        order = list(targets)
        for r in range(args.rounds):
            for name in order if r % 2 == 0 else order[::-1]:
                redis0 = redis[name].cpu_seconds() if config == "redis" else 0.0
                seg = await _segment(
                    targets[name], databases[name], pg, use_kafka, args.rate, args.seconds, args.per_insert
                )
                seg["redis"] = (redis[name].cpu_seconds() if config == "redis" else 0.0) - redis0
                segments[name].append(seg)
                log(f"{config} {name}: {seg}")
        result = {}
        for name, segs in segments.items():
            events = sum(s["received"] for s in segs)
            cpu = sum(s["cpu"] for s in segs)
            secs = sum(s["seconds"] for s in segs)
            result[name] = {
                "sent": sum(s["sent"] for s in segs),
                "received": events,
                "errors": segs[-1]["errors"],
                "cpu_ms_per_event": 1000 * cpu / max(events, 1),
                "net_cpu_ms_per_event": 1000 * (cpu - idle[name] * secs) / max(events, 1),
                "idle_cpu_percent": 100 * idle[name],
                "pg_ms_per_event": 1000 * sum(s["pg"] for s in segs) / max(events, 1),
                "kafka_ms_per_event": 1000 * sum(s["kafka"] for s in segs) / max(events, 1),
                "redis_ms_per_event": 1000 * sum(s["redis"] for s in segs) / max(events, 1),
                "rss_mb": targets[name].rss_mb(),
            }
        return result
    finally:
        for target in targets.values():
            _stop_subscribers(target)
            target.server.stop()
        for database in databases.values():
            await database.close()


async def _capacity(trees: dict[str, Path], pg: Postgres, kafka: Kafka, scratch: Path, args) -> dict:
    """200 subscribers of one group on one server (memory bus + Kafka), events at args.capacity_rate/s."""
    subscribers = 200
    result = {}
    for name, tree in trees.items():
        url = await _create_database(pg.url, f"ev_capacity_{name}")
        target = _spawn(f"capacity-{name}", tree, url, scratch, kafka, {})
        database = await db.Database(url, max_size=2).open()
        try:
            users = list(range(2, 2 + subscribers))
            target.cid = await _group(target, users)
            _start_subscribers(target, users)
            await asyncio.sleep(2)
            received0 = target.counts[0]  # type: ignore[index]
            cpu0 = target.cpu()
            t0 = time.monotonic()
            sent = await _load(database, target, args.capacity_rate, args.seconds, 1)
            received = await _drained(target, received0 + sent * subscribers, timeout=10) - received0
            elapsed = time.monotonic() - t0
            cpu = target.cpu() - cpu0
            result[name] = {
                "subscribers": subscribers,
                "events": sent,
                "asked_per_s": sent * subscribers / args.seconds,
                "deliveries": received,
                "deliveries_per_s": received / elapsed,
                "resync_errors": target.counts[1],  # type: ignore[index]
                "cpu_us_per_delivery": 1e6 * cpu / max(received, 1),
                "deliveries_per_cpu_s": received / max(cpu, 1e-9),
                "server_cpu_percent": 100 * cpu / elapsed,
            }
            log(f"capacity {name}: {result[name]}")
        finally:
            _stop_subscribers(target)
            target.server.stop()
            await database.close()
    return result


async def _shedding() -> dict:
    """In this process, no servers: how fast a Dispatcher drops a stale backlog (20,000 events of
    200 conversations, 1,000 subscriptions) against delivering the same events fresh."""
    from chatgql.events.dispatch import Dispatcher, MembershipCache

    async def members(conversation_id: int, subscribed: list[int]) -> tuple[int, list[int]]:
        return 5, [conversation_id * 10 + i for i in range(5)]

    def events(at: float) -> list:
        return [
            ({"type": "message.new", "conversationId": n % 200, "seq": n, "senderId": 1, "body": BODY}, at)
            for n in range(20_000)
        ]

    out = {}
    for label, age in (("fresh", 0.0), ("stale", 60.0)):
        dispatcher = Dispatcher(MembershipCache(members), buffer=100_000, max_delay=5.0)
        regs = [dispatcher.subscribe(c * 10 + i, c, "message.new") for c in range(200) for i in range(5)]
        for reg in regs:
            await reg.__aenter__()
        for c in range(200):  # membership cached, as in a warm process
            await dispatcher._members(c)
        batch = events(time.time() - age)
        t0, c0 = time.perf_counter(), time.process_time()
        await dispatcher.dispatch_many(batch)
        out[label] = {
            "seconds": time.perf_counter() - t0,
            "cpu_us_per_event": 1e6 * (time.process_time() - c0) / 20_000,
        }
        for reg in regs:
            await reg.__aexit__(None, None, None)
    return out


def _report(results: dict, args, base_rev: str) -> str:
    lines = [
        "# Live path: CPU per event (bench/eventpath.py)",
        "",
        f"`python -m bench.eventpath --rate {args.rate} --seconds {args.seconds} --rounds {args.rounds} "
        f"--per-insert {args.per_insert}` "
        f"· baseline {base_rev} vs this tree · {machine_info().get('cpu_model', '')} {machine_info().get('logical_cores', '')} cores, load {machine_info().get('load_avg_at_start', '')}",
        "",
        "Events written straight into the outbox at a fixed rate; one `chatgql serve` per tree (relay +",
        "consumer + dispatch + websocket write to one subscriber), interleaved segments. CPU is the server",
        "process's (psutil user+system); 'net' subtracts what the same server spends idle for as long.",
        "Configs: kafka = Kafka + memory bus (one process); nokafka = memory bus alone (the embedded default);",
        "redis = Kafka + a redis:// bus (the consumer publishes to Redis, the feed reads it back: the",
        "multi-process path, here in one process, each server with a Redis of its own).",
        "Target (issue 13 item 3): at most 0.3 ms per event.",
        "",
        "| config | tree | events sent/received | resync errors | CPU ms/event | net CPU ms/event | idle CPU % "
        "| PostgreSQL ms/event | Kafka ms/event | Redis ms/event | RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config in args.configs:
        for name, r in results[config].items():
            lines.append(
                f"| {config} | {name} | {r['sent']}/{r['received']} | {r['errors']} | {r['cpu_ms_per_event']:.3f} "
                f"| {r['net_cpu_ms_per_event']:.3f} | {r['idle_cpu_percent']:.1f} | {r['pg_ms_per_event']:.3f} "
                f"| {r['kafka_ms_per_event']:.3f} | {r['redis_ms_per_event']:.3f} | {r['rss_mb']:.0f} |"
            )
    if "capacity" in results:
        lines += [
            "",
            f"Capacity: 200 subscribers of one group on one server (memory bus + Kafka), "
            f"{args.capacity_rate} events/s for {args.seconds} s.",
            "",
            "| tree | deliveries asked/s | delivered/s | resync errors | server CPU % | CPU µs/delivery "
            "| deliveries per CPU-second |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in results["capacity"].items():
            lines.append(
                f"| {name} | {r['asked_per_s']:.0f} | {r['deliveries_per_s']:.0f} | {r['resync_errors']} "
                f"| {r['server_cpu_percent']:.0f} | {r['cpu_us_per_delivery']:.1f} | {r['deliveries_per_cpu_s']:.0f} |"
            )
    if "shedding" in results:
        r = results["shedding"]
        lines += [
            "",
            "Shedding (in-process Dispatcher, 20,000 events of 200 conversations, 1,000 subscriptions, memberships cached):",
            f"delivering them fresh took {r['fresh']['seconds'] * 1000:.0f} ms "
            f"({r['fresh']['cpu_us_per_event']:.1f} µs CPU/event, 5 deliveries each); "
            f"dropping them stale (60 s old, bound 5 s) took {r['stale']['seconds'] * 1000:.0f} ms "
            f"({r['stale']['cpu_us_per_event']:.1f} µs CPU/event), ending the 1,000 subscriptions with DELIVERY_DELAYED.",
        ]
    return "\n".join(lines) + "\n"


async def _run(args) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-bench-eventpath-"))
    base_rev = subprocess.run(
        ["git", "-C", str(REPO), "merge-base", "HEAD", args.baseline], capture_output=True, text=True, check=True
    ).stdout.strip()
    trees = {"baseline": export_src(base_rev, scratch / "baseline"), "this": REPO / "src"}
    pg = await asyncio.to_thread(Postgres.start, scratch / "pg")
    kafka = await asyncio.to_thread(Kafka.start, scratch)
    redises = {
        name: await asyncio.to_thread(Redis.start, scratch / f"redis-{name}")
        for name in (trees if "redis" in args.configs else ())
    }
    results: dict = {"shedding": await _shedding()}
    try:
        for config in args.configs:
            results[config] = await _config(config, trees, pg, kafka, scratch, args, redises)
        if args.capacity_rate:
            results["capacity"] = await _capacity(trees, pg, kafka, scratch, args)
    finally:
        for redis in redises.values():
            redis.stop()
        kafka.stop()
        pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    report = _report(results, args, base_rev[:10])
    RESULTS.write_text(report)
    print(report)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--rate", type=float, default=300)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--per-insert", type=int, default=1, help="events per outbox insert (transaction)")
    parser.add_argument("--configs", default="kafka,nokafka,redis")
    parser.add_argument("--capacity-rate", type=float, default=40, help="events/s to 200 subscribers (0: skip)")
    args = parser.parse_args()
    args.configs = [c for c in args.configs.split(",") if c]
    asyncio.run(_run(args))


if __name__ == "__main__":
    main()
