"""Live delivery, fast path against plain path: a parked subscription's wake-up, and the hub.

`python -m bench.fastlive [--only wake,hub] [--rounds N] [--events K] [--members M] [--hub-events K]
[--hub-members M]`

bench.fastpaths's method (its helpers too): every side is this tree's `chatgql serve`, one
setting apart, the sides up at once against one PostgreSQL, a database each, seeded alike, and
the load alternates between them round by round, the order rotated each round. The load is live
delivery: a group of M members, every one subscribed (bench/fanout.py's client processes,
messageNew of the group without read receipts: bench/queries.py SUB_CONVERSATION); a round is
K sends, one at a time, by members in turn (the next send once every member has the last
event). Per round and side: the server's CPU (user + system of its process tree, from /proc, plus
the redis-server's on a Redis side) from the first send until every member has the last event,
divided by the events; and each member's send -> frame time (from the send request's start to the
frame's arrival at the member's socket, one clock machine-wide), its median and its 99th percentile.

- wake: two single-process servers, CHATGQL_PARK_SUBSCRIPTIONS on (a parked subscription has no
  task: each event starts one that delivers and ends) and off (each subscription waits in its
  own task); a big group (--members, --events): the wake-ups are most of the work.
- hub: two `--workers 2` servers, their bus and rate limits the supervisor's hub, or a
  redis-server (CHATGQL_BROADCAST_URL=redis://: what a several-worker server uses instead of its
  hub); the members' websockets land on either worker, the sends too; a small group
  (--hub-members, --hub-events): the way from the send to the frames is most of the work, not the
  fan-out to the members (which is the same on both sides).

Writes its own section of bench/results/fastpaths.md (or --report), before the hand-written notes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import orjson

from . import fanout, layout
from .fastpaths import LIVE_SECTION, NOTES, _cell, _compare, _gain, _order, _spawn, _verdict
from .infra import REPO, Postgres, Redis, Server, log, queue_get, raise_fd_limit
from .perf import SIZES, _create_databases, _database_url
from .queries import SUB_CONVERSATION, send_body, token
from .rawhttp import Pool

PARTS = ("wake", "hub")
HEADING = LIVE_SECTION


def _percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def _deliver_one(group: fanout.Members, pool: Pool, sender: int, label: str) -> list[int]:
    """One send by member `sender`; every member's send -> frame time (ns)."""
    t0 = time.monotonic_ns()
    status, payload = await pool.post(send_body(layout.FANOUT_CID, label), f"Bearer {token(sender)}")
    if status != 200 or b'"errors"' in payload:
        raise RuntimeError(f"send failed: HTTP {status} {payload[:300]!r}")
    seq = orjson.loads(payload)["data"]["sendMessage"]["message"]["seq"]
    received: list[int] = []
    reports = 0
    while reports < len(group.procs):
        kind, got_seq, times = await asyncio.to_thread(queue_get, group.out, group.procs, 60, "delivery")
        if kind == "error":
            raise RuntimeError(f"member client failed: {got_seq}")
        if kind == "round" and got_seq == seq:
            reports += 1
            received += times
    return [t - t0 for t in received]


@dataclasses.dataclass
class _Side:
    server: Server
    group: fanout.Members
    extra_cpu: object = None  # () -> CPU seconds of what else the side runs on (its redis-server)

    def cpu(self) -> float:
        return self.server.cpu_seconds() + (self.extra_cpu() if self.extra_cpu else 0.0)


async def _round(side: _Side, events: int, members: int, first_sender: int, label: str) -> dict:
    # a connection of the round's own: the server closes one left idle while the other side's rounds ran
    pool = await Pool("127.0.0.1", side.server.port, 1).open()
    try:
        cpu0 = side.cpu()
        latencies: list[int] = []
        for i in range(events):
            sender = layout.FANOUT_MEMBER + 1 + (first_sender + i) % members  # rate limits are per user
            latencies += await _deliver_one(side.group, pool, sender, f"{label} event {i}")
        cpu = side.cpu() - cpu0
    finally:
        pool.close()
    ms = [x / 1e6 for x in latencies]
    return {
        "cpu_ms_per_event": 1000 * cpu / events,
        "cpu_us_per_frame": 1e6 * cpu / len(latencies),
        "frames": len(latencies),
        "median_ms": statistics.median(ms),
        "p99_ms": _percentile(ms, 99),
        "last_ms": max(ms),
    }


async def _rounds(sides: dict[str, _Side], rounds: int, events: int, members: int) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {name: [] for name in sides}
    sent = 0
    warm_up = max(2, events // 4)
    for name, side in sides.items():  # plans, statements, connections; every subscription woken
        await _round(side, warm_up, members, sent, f"warm-up {name}")
        sent += warm_up
    for round_ in range(rounds):
        for name in _order(list(sides), round_):
            await asyncio.sleep(0.3)  # the last round's writes are done
            one = await _round(sides[name], events, members, sent, f"round {round_}")
            sent += events
            if one["frames"] != events * members:
                raise RuntimeError(f"{name}: {one['frames']} frames for {events} events to {members} members")
            results[name].append(one)
            log(
                f"fastlive {name} round {round_}: {one['cpu_ms_per_event']:.1f} ms CPU per event, "
                f"send -> frame median {one['median_ms']:.1f} ms, p99 {one['p99_ms']:.1f} ms"
            )
    return results


async def _measure(servers: dict[str, Server], extra: dict, sizes: layout.Sizes, rounds: int, events: int) -> dict:
    sides: dict[str, _Side] = {}
    try:
        for name, server in servers.items():
            group = await fanout.open_members([server], sizes, SUB_CONVERSATION)
            sides[name] = _Side(server, group, extra.get(name))
            if group.opened < sizes.fanout_members:
                raise RuntimeError(f"{name}: only {group.opened} of {sizes.fanout_members} members subscribed")
        return await _rounds(sides, rounds, events, sizes.fanout_members)
    finally:
        for side in sides.values():
            side.group.close()


def _start(pg: Postgres, scratch: Path, sides: dict[str, dict], prefix: str, sizes, **spawn) -> dict[str, Server]:
    databases = {name: f"{prefix}_{i}" for i, name in enumerate(sides)}
    asyncio.run(_create_databases(pg, list(databases.values())))
    servers: dict[str, Server] = {}
    try:
        for name, env in sides.items():
            servers[name] = _spawn(pg, scratch, name, databases[name], env, **spawn.get(name, {}))
        for name, server in servers.items():
            server.wait_ready()
            asyncio.run(_seed(_database_url(pg, databases[name]), sizes))
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return servers


async def _seed(url: str, sizes: layout.Sizes) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await layout.seed(conn, sizes)
    finally:
        await conn.close()


def run_wake(pg: Postgres, scratch: Path, sizes: layout.Sizes, rounds: int, events: int) -> dict:
    """CPU and send -> frame with parked subscriptions against a task each."""
    sides = {"parked": {}, "a task each": {"CHATGQL_PARK_SUBSCRIPTIONS": "false"}}
    servers = _start(pg, scratch, sides, "wake", sizes)
    try:
        results = asyncio.run(_measure(servers, {}, sizes, rounds, events))
    finally:
        for server in servers.values():
            server.stop()
    return {"rounds": results, "members": sizes.fanout_members, "events": events, "a": "a task each", "b": "parked"}


def run_hub(pg: Postgres, scratch: Path, sizes: layout.Sizes, rounds: int, events: int) -> dict:
    """CPU and send -> frame with two workers on the supervisor's hub against a redis-server bus."""
    redis = Redis.start(scratch)
    try:
        sides = {"hub": {}, "redis bus": {}}
        spawn = {"hub": {"workers": 2}, "redis bus": {"workers": 2, "bus": redis.url}}
        servers = _start(pg, scratch, sides, "livehub", sizes, **spawn)
        try:
            results = asyncio.run(_measure(servers, {"redis bus": redis.cpu_seconds}, sizes, rounds, events))
        finally:
            for server in servers.values():
                server.stop()
    finally:
        redis.stop()
    return {"rounds": results, "members": sizes.fanout_members, "events": events, "a": "redis bus", "b": "hub"}


def _rows(part: str, result: dict) -> list[str]:
    a, b = result["rounds"][result["a"]], result["rounds"][result["b"]]
    label = {"wake": "parked subscriptions (wake-up)", "hub": "hub (2 workers)"}[part]
    serves = f"{result['events']} messages a round to {result['members']} subscribers"
    cpu = _compare([r["cpu_ms_per_event"] for r in a], [r["cpu_ms_per_event"] for r in b])
    frame = _compare([r["cpu_us_per_frame"] for r in a], [r["cpu_us_per_frame"] for r in b])
    median = _compare([r["median_ms"] for r in a], [r["median_ms"] for r in b])
    p99 = _compare([r["p99_ms"] for r in a], [r["p99_ms"] for r in b])
    return [
        f"| {label} | {serves}: server CPU per event | {result['a']}: {_cell(cpu, 'a', 1, 'ms')} "
        f"| {result['b']}: {_cell(cpu, 'b', 1, 'ms')} | {_gain(cpu)} "
        f"| {frame['a']:.0f} -> {frame['b']:.0f} us | {_verdict(cpu)} |",
        f"| {label} | {serves}: send -> frame, median | {result['a']}: {_cell(median, 'a', 1, 'ms')} "
        f"| {result['b']}: {_cell(median, 'b', 1, 'ms')} | {_gain(median)} "
        f"| p99 {p99['a']:.1f} -> {p99['b']:.1f} ms | {_verdict(median)} |",
    ]


def report(results: dict, args: argparse.Namespace) -> str:
    head = os.popen(f"git -C {REPO} rev-parse --short HEAD").read().strip()
    lines = [
        HEADING.strip(),
        "",
        f"This tree ({head}), bench.fastpaths's method: the sides up at once, {args.rounds} rounds, "
        "the order rotated each round; medians over the rounds with (lowest-highest), a gain is the "
        "median of the rounds' own savings. A round is K events (the column *what it serves* says "
        "how many), each one sendMessage to a group whose every member is subscribed (messageNew, no "
        "read receipts), sent once every member has the one before. CPU is the server's process tree "
        "(user + system, /proc), with Redis its redis-server too, from the round's first send until "
        "every member has its last event, divided by the events (the send's own request included); "
        "per frame: divided by the frames delivered. Send -> frame: from the send request's start to "
        "the frame's arrival at each member's socket (client processes, one clock), the round's median "
        "and 99th percentile over every member and event. Verdicts as in the table above (on each "
        "row's own figure). Load average at the end: "
        f"{', '.join(f'{v:.1f}' for v in os.getloadavg())} (2 cores, shared).",
        "",
        "| fast path | what it serves | A: without (plain path) | B: with | gain (rounds) | A -> B | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for part in PARTS:
        if part in results:
            lines += _rows(part, results[part])
    lines += [
        "",
        "Reproduce: `python -m bench.fastlive "
        f"--only {','.join(results)} --rounds {args.rounds} --events {args.events} --members {args.members} "
        f"--hub-events {args.hub_events} --hub-members {args.hub_members}`.",
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
    ]
    return "\n".join(lines)


def write_section(path: Path, section: str) -> str:
    """The report with this section in place of its earlier one (or before the notes)."""
    old = path.read_text() if path.exists() else ""
    if HEADING in old:
        start = old.index(HEADING)
        rest = old[start + len(HEADING) :]
        end = rest.find("\n## ")
        tail = rest[end:] if end >= 0 else ""
        return old[:start] + "\n" + section + tail
    if NOTES in old:
        start = old.index(NOTES)
        return old[:start] + "\n" + section + old[start:]
    return old + "\n" + section


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fastlive", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated subset of " + ", ".join(PARTS))
    parser.add_argument("--rounds", type=int, default=5, help="rounds per comparison (default 5)")
    parser.add_argument("--events", type=int, default=10, help="sends per round and side (default 10)")
    parser.add_argument("--members", type=int, default=500, help="subscribed members of the group (default 500)")
    parser.add_argument("--hub-events", type=int, default=100, help="the hub part's sends per round (default 100)")
    parser.add_argument("--hub-members", type=int, default=20, help="the hub part's group (default 20)")
    parser.add_argument("--report", type=Path, default=REPO / "bench" / "results" / "fastpaths.md")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "out" / "fastlive.json")
    args = parser.parse_args()
    parts = [p for p in args.only.split(",") if p]
    if set(parts) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(set(parts) - set(PARTS)))}")
    sizes = {
        "wake": (dataclasses.replace(SIZES, fanout_members=args.members, fanout_procs=2), args.events),
        "hub": (dataclasses.replace(SIZES, fanout_members=args.hub_members, fanout_procs=2), args.hub_events),
    }
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-fastlive-"))
    pg = Postgres.start(scratch / "pg")
    results: dict = {}
    try:
        for part in parts:
            t0 = time.monotonic()
            run = run_wake if part == "wake" else run_hub
            results[part] = run(pg, scratch, sizes[part][0], args.rounds, sizes[part][1])
            log(f"fastlive {part}: {time.monotonic() - t0:.0f} s")
    finally:
        pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1, default=str))
    section = report(results, args)
    args.report.write_text(write_section(args.report, section))
    print(section)


if __name__ == "__main__":
    main()
