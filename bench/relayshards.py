"""Sharded outbox relays: takeover after SIGKILL, and events/s with 1 and 2 relay processes.

`python -m bench.relayshards` (about 2 minutes) starts an embedded PostgreSQL and
a Kafka (scripts/kafka.sh), and `chatgql relay` processes (CHATGQL_RELAY_SHARDS=4),
then measures, writing bench/results/relayshards.md:

- throughput: the outbox is filled with EVENTS message.new-sized events of 200
  conversations in one transaction, while the relays are idle and leading their
  shards; the clock runs from that commit until the outbox is empty (or
  SECONDS passed: then the events gone by then count). Same run, same data:
  one process with one shard (the single leader before sharding: the
  baseline), one process with 4 shards, two processes with 4 shards (2 each).
  CPU of the relay processes per event is from psutil.
- takeover: two relay processes lead two shards each while a writer adds about
  200 events/s; one is killed with SIGKILL. "locks" is the time until the other
  holds every shard's slot locks; "relayed" is the time until one event written
  into each of the 64 slots just after the kill has been published and deleted
  (the dead relay's slots included). The killed relay is started again and the
  shards shared out again before the next trial.

Bounded: each throughput run at most SECONDS, each takeover trial a few seconds.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from chatgql import db
from chatgql.store import outbox

from .infra import REPO, Kafka, Postgres, die_with_parent, log, machine_info

EVENTS = 60_000
SECONDS = 10.0
TRIALS = 8
SHARDS = 4
RESULTS = REPO / "bench" / "results" / "relayshards.md"
BODY = "x" * 200


class Relay:
    """One `chatgql relay` process (or, with command="consume", one `chatgql consume`)."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path, command: str = "relay") -> None:
        self.name = name
        self.command = command
        self.env = env
        self.log = log_dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "chatgql.server.cli", self.command],
                env=self.env,
                cwd=str(REPO),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,  # never outlives the benchmark
            )

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def cpu_seconds(self) -> float:
        try:
            t = psutil.Process(self.proc.pid).cpu_times()  # type: ignore[union-attr]
            return t.user + t.system
        except psutil.Error:
            return 0.0


def relay_env(url: str, kafka: Kafka, topic: str, shards: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGQL_")}
    env.update(
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", ""),
        CHATGQL_DATABASE_URL=url,
        CHATGQL_MIGRATE_ON_START="false",
        CHATGQL_KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap,
        CHATGQL_KAFKA_TOPIC=topic,
        CHATGQL_KAFKA_TOPIC_PARTITIONS="8",
        CHATGQL_RELAY_SHARDS=str(shards),
    )
    return env


async def leaders(database: db.Database) -> dict[str, int]:
    """application_name -> how many slots it holds."""
    async with database.connection() as conn:
        return {row.application_name: len(row.slots) for row in await outbox.slot_leaders(conn)}


async def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def shared_out(database: db.Database, processes: int) -> bool:
    held = await leaders(database)
    return (
        len(held) == processes
        and sum(held.values()) == outbox.SLOTS
        and max(held.values()) <= -(-outbox.SLOTS // processes)
    )


async def outbox_rows(database: db.Database) -> int:
    async with database.connection() as conn:
        return await conn.fetchval("SELECT count(*) FROM outbox")


def events(conversations: range, count: int) -> list[tuple[str, dict]]:
    cids = list(conversations)
    out = []
    for i in range(count):
        cid = cids[i % len(cids)]
        out.append(
            (
                str(cid),
                {"type": "message.new", "conversationId": cid, "senderId": 1, "seq": i // len(cids) + 1, "body": BODY},
            )
        )
    return out


async def throughput(
    database: db.Database, kafka: Kafka, url: str, scratch: Path, processes: int, shards: int, run: int
) -> dict:
    topic = f"bench.relayshards.{run}"
    relays = [Relay(f"tp{run}-{i}", relay_env(url, kafka, topic, shards), scratch) for i in range(processes)]
    for relay in relays:
        relay.start()
    try:
        await wait_for(lambda: shared_out(database, processes), 60, f"{processes} relays to share the shards")
        # One warm-up event per conversation: the producer's metadata and connections exist.
        async with database.transaction() as conn:
            await outbox.append(conn, events(range(1, 201), 200))
        await outbox_notify(database)
        await wait_for(lambda: is_empty(database), 30, "the warm-up to drain")
        batch = events(range(1, 201), EVENTS)
        cpu_before = sum(r.cpu_seconds() for r in relays)
        async with database.transaction() as conn:
            await outbox.append(conn, batch)
        started = time.perf_counter()
        await outbox_notify(database)
        left = EVENTS
        while left and time.perf_counter() - started < SECONDS:
            await asyncio.sleep(0.05)
            left = await outbox_rows(database)
        elapsed = time.perf_counter() - started
        cpu = sum(r.cpu_seconds() for r in relays) - cpu_before
        relayed = EVENTS - left
        result = {
            "processes": processes,
            "shards": shards,
            "relayed": relayed,
            "seconds": elapsed,
            "per_second": relayed / elapsed,
            "cpu_us_per_event": cpu / max(relayed, 1) * 1e6,
        }
        log(f"throughput {processes} process(es), {shards} shard(s): {result}")
        # What is left (a run that hit SECONDS) must not spill into the next run.
        await wait_for(lambda: is_empty(database), 120, "the outbox to drain")
        return result
    finally:
        for relay in relays:
            relay.stop()


async def is_empty(database: db.Database) -> bool:
    return await outbox_rows(database) == 0


async def outbox_notify(database: db.Database) -> None:
    async with database.connection() as conn:
        await outbox.notify(conn)


async def takeover(database: db.Database, kafka: Kafka, url: str, scratch: Path) -> list[dict]:
    env = relay_env(url, kafka, "bench.relayshards.takeover", SHARDS)
    relays = [Relay(f"to-{i}", env, scratch) for i in range(2)]
    async with database.connection() as conn:
        keys = [
            row.k
            for row in await conn.fetch(
                "SELECT DISTINCT ON (hashtextextended(k::text, 0) & 63) k::text AS k FROM generate_series(100000, 120000) k"
            )
        ]
    assert len(keys) == outbox.SLOTS
    stop = asyncio.Event()

    async def writer() -> None:  # about 200 events/s, 20 at a time, of 200 conversations
        n = 0
        while not stop.is_set():
            async with database.transaction() as conn:
                await outbox.append(conn, events(range(1 + n % 200, 21 + n % 200), 20))
            await outbox_notify(database)
            n += 20
            await asyncio.sleep(0.1)

    trials = []
    for relay in relays:
        relay.start()
    writing = asyncio.create_task(writer())
    try:
        for trial in range(TRIALS):
            await wait_for(lambda: shared_out(database, 2), 60, "two relays to share the shards")
            # At a random point of the survivor's look-every-0.5-s cycle.
            await asyncio.sleep(1 + random.uniform(0, 0.5))
            victim = relays[trial % 2]
            killed_at = time.perf_counter()
            victim.kill()
            async with database.transaction() as conn:
                ids = [
                    await conn.fetchval(
                        "INSERT INTO outbox (msg_key, payload) VALUES ($1, $2) RETURNING id",
                        key,
                        {"type": "bench.marker", "conversationId": int(key)},
                    )
                    for key in keys
                ]
            await outbox_notify(database)
            locks = relayed = None
            while time.perf_counter() - killed_at < 30 and (locks is None or relayed is None):
                if locks is None and list((await leaders(database)).values()) == [outbox.SLOTS]:
                    locks = time.perf_counter() - killed_at
                if relayed is None:
                    async with database.connection() as conn:
                        if not await conn.fetchval("SELECT count(*) FROM outbox WHERE id = ANY($1::bigint[])", ids):
                            relayed = time.perf_counter() - killed_at
                await asyncio.sleep(0.01)
            result = {"trial": trial + 1, "locks": locks, "relayed": relayed}
            log(f"takeover: {result}")
            trials.append(result)
            victim.start()
    finally:
        stop.set()
        await writing
        for relay in relays:
            relay.stop()
    return trials


def report(runs: list[dict], trials: list[dict], info: dict) -> str:
    baseline = runs[0]["per_second"]
    lines = [
        "# Sharded outbox relays (`python -m bench.relayshards`)",
        "",
        f"Machine: {info['logical_cores']} logical cores ({info['cpu_model']}), load average "
        f"{info['load_avg_at_start']} at start (shared with other work while it ran); "
        f"embedded PostgreSQL, a single-node Kafka (scripts/kafka.sh), topic of 8 partitions, acks=all.",
        "",
        "## Events relayed per second",
        "",
        f"{EVENTS:,} events of 200 conversations (~300-byte message.new payloads) committed at once "
        f"into an idle outbox; clock from the commit until the outbox is empty (at most {SECONDS:.0f} s).",
        "",
        "| relay processes | shards | events relayed | seconds | events/s | vs 1 process, 1 shard | relay CPU per event |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['processes']} | {r['shards']} | {r['relayed']:,} | {r['seconds']:.1f} | {r['per_second']:,.0f} | "
            f"{r['per_second'] / baseline:.2f}x | {r['cpu_us_per_event']:.0f} us |"
        )
    locks = [t["locks"] for t in trials if t["locks"] is not None]
    relayed = [t["relayed"] for t in trials if t["relayed"] is not None]
    lines += [
        "",
        "## Takeover after SIGKILL of one of two relay processes (4 shards, ~200 events/s)",
        "",
        "locks: until the survivor holds every shard's locks; relayed: until an event written into each of "
        "the 64 slots right after the kill was published and deleted (the dead relay's included). "
        "Target: under 2 s (CHATGQL_RELAY_STANDBY_SECONDS=0.5).",
        "",
        "| trial | locks (s) | relayed (s) |",
        "|---|---|---|",
    ]
    for t in trials:
        fmt = lambda v: "never" if v is None else f"{v:.3f}"  # noqa: E731
        lines.append(f"| {t['trial']} | {fmt(t['locks'])} | {fmt(t['relayed'])} |")
    if locks and relayed:
        lines += [
            "",
            f"Median: locks {statistics.median(locks):.3f} s, relayed {statistics.median(relayed):.3f} s; "
            f"worst: locks {max(locks):.3f} s, relayed {max(relayed):.3f} s "
            f"({len(relayed)} of {len(trials)} trials relayed everything).",
        ]
    return "\n".join(lines) + "\n"


async def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-relayshards-"))
    log(f"scratch {scratch}")
    pg = Postgres.start(scratch / "pg")
    kafka = None
    try:
        await db.upgrade(pg.url)
        kafka = Kafka.start(scratch)
        database = await db.Database(pg.url, max_size=4).open()
        try:
            runs = []
            for run, (processes, shards) in enumerate(((1, 1), (1, SHARDS), (2, SHARDS))):
                runs.append(await throughput(database, kafka, pg.url, scratch, processes, shards, run))
            trials = await takeover(database, kafka, pg.url, scratch)
        finally:
            await database.close()
        RESULTS.write_text(report(runs, trials, machine_info()))
        log(f"wrote {RESULTS}")
    finally:
        if kafka is not None:
            kafka.stop()
        pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
