"""The Redis Cluster bus against the single-Redis bus, bounded (about 30 s in all).

`python -m bench.redisbus` starts a redis-server (redis://) and a 3-master
Redis Cluster (redis+cluster://, scripts/redis-cluster.sh) on 127.0.0.1 and,
for each, drives chatgql's Bus the way the product does (Bus.publish keyed by
conversation id; the feed's receive loop), in one process:

- throughput: 4 publishing tasks push EVENTS events over 1,000 conversations
  as fast as they go; a second Bus listening to every bucket receives them all;
  events/s from the first publish to the last receive, and the CPU seconds of
  this process and of the Redis server(s);
- latency: RATE events/s for SECONDS s, publish -> receive, p50/p99;
- selectivity: listeners wanting 8 and 125 of the 1,000 conversations (64 buckets,
  and 1,024 buckets):
  the share of the published events it received (all of them on redis://);
- shared rate limits: microseconds per check, per process vs in Redis.

Writes bench/results/redisbus.md.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import orjson

from bench.infra import Redis, process_cpu
from chatgql.edge.ratelimit import RateLimiter, RedisStore, SharedRateLimiter
from chatgql.events.bus import Bus

REPO = Path(__file__).resolve().parent.parent
EVENTS = 20_000
CONVERSATIONS = 1_000
PUBLISHERS = 4
RATE = 1_000
SECONDS = 4
CHECKS = 2_000


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _event(cid: int, n: int) -> str:
    return orjson.dumps({"type": "message.new", "conversationId": cid, "seq": n, "body": "x" * 60}).decode()


async def _receive(listener: Bus, count: int, arrived: dict[int, float] | None = None, timeout: float = 30) -> int:
    got = 0
    async with listener.subscribe() as receiver:
        deadline = time.monotonic() + timeout
        while got < count:
            try:
                event = await asyncio.wait_for(receiver.get(), max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                break
            got += 1
            if arrived is not None:
                arrived[orjson.loads(event.message)["seq"]] = time.perf_counter()
    return got


async def throughput(url: str, redis_pids: list[int]) -> dict:
    publisher, listener = Bus(url), Bus(url)
    await publisher.connect()
    await listener.connect()
    await listener.want(None)  # every bucket (redis://: the one channel)
    try:
        receiving = asyncio.create_task(_receive(listener, EVENTS))
        cpu0, redis0, t0 = _cpu(), sum(process_cpu(p) for p in redis_pids), time.perf_counter()

        async def publish(part: int) -> None:
            for n in range(part, EVENTS, PUBLISHERS):
                cid = n % CONVERSATIONS
                await publisher.publish(_event(cid, n), str(cid))

        await asyncio.gather(*(publish(p) for p in range(PUBLISHERS)))
        got = await receiving
        elapsed = time.perf_counter() - t0
        return {
            "events/s": got / elapsed,
            "received": got,
            "this process CPU s": _cpu() - cpu0,
            "redis CPU s": sum(process_cpu(p) for p in redis_pids) - redis0,
        }
    finally:
        await listener.release(None)
        await publisher.disconnect()
        await listener.disconnect()


async def latency(url: str) -> dict:
    publisher, listener = Bus(url), Bus(url)
    await publisher.connect()
    await listener.connect()
    await listener.want(None)
    count = RATE * SECONDS
    arrived: dict[int, float] = {}
    sent: dict[int, float] = {}
    try:
        receiving = asyncio.create_task(_receive(listener, count, arrived))
        start = time.perf_counter()
        for n in range(count):
            due = start + n / RATE
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            cid = n % CONVERSATIONS
            sent[n] = time.perf_counter()
            await publisher.publish(_event(cid, n), str(cid))
        await receiving
    finally:
        await listener.release(None)
        await publisher.disconnect()
        await listener.disconnect()
    lat = sorted((arrived[n] - sent[n]) * 1000 for n in arrived)
    return {
        "p50 ms": lat[len(lat) // 2] if lat else float("nan"),
        "p99 ms": lat[int(len(lat) * 0.99)] if lat else float("nan"),
        "missing": count - len(lat),
    }


async def selectivity(url: str, every: int, buckets: int = 64) -> dict:
    """A listener wanting every `every`-th conversation: how many buckets, what share of the events."""
    publisher, listener = Bus(url, buckets), Bus(url, buckets)
    await publisher.connect()
    await listener.connect()
    wanted = list(range(0, CONVERSATIONS, every))
    for cid in wanted:
        await listener.want(cid)
    total = 4_000
    try:
        for n in range(total):
            cid = n % CONVERSATIONS
            await publisher.publish(_event(cid, n), str(cid))
        await asyncio.sleep(0.5)
        received = await _receive(listener, total, timeout=2)
        listened = len(listener.channels)
    finally:
        for cid in wanted:
            await listener.release(cid)
        await publisher.disconnect()
        await listener.disconnect()
    label = f"{len(wanted)} conversations, {buckets} buckets" if buckets != 64 else f"{len(wanted)} conversations"
    return {f"{label}: buckets listened": listened, f"{label}: received share": received / total}


async def rate_limit_cost(url: str | None) -> float:
    store = RedisStore(url, 1.0) if url else None
    limiter: RateLimiter = SharedRateLimiter("bench", 1e9, 10**9, store) if store else RateLimiter("bench", 1e9, 10**9)
    if store:
        await store.start()
    try:
        for i in range(100):
            await limiter.check(i)
        t0 = time.perf_counter()
        for i in range(CHECKS):
            await limiter.check(i % 100)
        return (time.perf_counter() - t0) / CHECKS * 1e6
    finally:
        if store:
            await store.close()


def start_cluster(scratch: Path) -> tuple[str, list[int]]:
    from tests.support.redis_cluster import free_cluster_port

    port = free_cluster_port()
    url = subprocess.run(
        [str(REPO / "scripts/redis-cluster.sh"), "start", "--port", str(port), "--dir", str(scratch / "cluster")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    pids = [int((scratch / "cluster" / str(p) / "redis.pid").read_text()) for p in (port, port + 1, port + 2)]
    return url, pids


def stop_cluster(scratch: Path, url: str) -> None:
    if not url:
        return
    first = url.removeprefix("redis+cluster://").split(",")[0].rsplit(":", 1)[1]
    subprocess.run(
        [str(REPO / "scripts/redis-cluster.sh"), "stop", "--port", first, "--dir", str(scratch / "cluster")],
        check=False,
    )


async def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-bench-redisbus-"))
    single = Redis.start(scratch)
    cluster_url = ""
    rows: dict[str, dict] = {}
    try:
        cluster_url, cluster_pids = start_cluster(scratch)
        for name, url, pids in (
            ("redis:// (one Redis)", single.url, [single.pid]),
            ("redis+cluster:// (3 masters)", cluster_url, cluster_pids),
        ):
            row = rows[name] = {}
            row.update(await throughput(url, pids))
            row.update(await latency(url))
            row.update(await selectivity(url, every=125))  # 8 conversations
            row.update(await selectivity(url, every=8))  # 125 conversations
            row.update(await selectivity(url, every=8, buckets=1024))
            row["rate-limit check us"] = await rate_limit_cost(url)
            print(name, row, flush=True)
        rows["per process (no Redis)"] = {"rate-limit check us": await rate_limit_cost(None)}
    finally:
        single.stop()
        stop_cluster(scratch, cluster_url)
        shutil.rmtree(scratch, ignore_errors=True)
    write(rows)


def write(rows: dict[str, dict]) -> None:
    columns = list(dict.fromkeys(k for row in rows.values() for k in row))
    lines = [
        "# bench/redisbus.py: the Redis Cluster bus against the single-Redis bus",
        "",
        f"One process publishes and receives (Bus.publish keyed by conversation id, the feed's receive loop);"
        f" {EVENTS:,} events over {CONVERSATIONS:,} conversations from {PUBLISHERS} tasks for throughput;"
        f" {RATE:,}/s for {SECONDS} s for latency; listeners wanting 8 and 125 of the conversations for the"
        f" buckets they listen to and the share of the events they receive. {os.cpu_count()} cores, shared with other work: compare rows of one run, not runs.",
        "",
        "| bus | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for name, row in rows.items():
        cells = []
        for column in columns:
            value = row.get(column)
            if value is None:
                cells.append("")
            elif isinstance(value, float):
                cells.append(f"{value:,.0f}" if value >= 100 else f"{value:.3g}")
            else:
                cells.append(f"{value:,}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    (REPO / "bench" / "results" / "redisbus.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
