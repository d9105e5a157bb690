"""Read storm: 1,000 users x 5 devices marking read over HTTP, markRead coalescing on vs off.

    python -m bench.readstorm            # about 4 minutes (9 runs); needs wrk (apt-get install -y wrk)
    python -m bench.readstorm --seconds 5

One embedded PostgreSQL; 200 group conversations, every user a member of 5 of them (5,000
watermarks). For each mode a fresh `chatgql serve` (production mode, in-process relay, memory
bus) serves wrk (bench/wrk/readstorm.lua), whose requests come from 5,000 device tokens
(1,000 users x 5) for a conversation of that user, with a seq that rises as the run goes
(a few late devices ask less than the watermark already holds). Three loads:

- storm: 5,000 connections, one per device, each waiting an exponential time between its
  requests: together a Poisson stream of 1,000 markRead/s (the same for every mode), so p99
  is the latency of the storm, not of a queue the generator made; storm-400: the same at
  400/s, a rate one process serves with room to spare on a busy 2-core machine;
- flood: 64 connections sending as fast as they are answered: the most markRead/s.

Per run: PostgreSQL commits (pg_stat_database.xact_commit of the database, from before the
load until the server has stopped, so every backend has reported; it counts the relay's and
every other transaction of the process too) per markRead answered, the flushes the server
counted, latency (wrk: from a request's send to its response) and throughput. Writes
bench/results/readstorm.md and bench/out/readstorm.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import shutil
import tempfile
import time
from pathlib import Path

import asyncpg

from chatgql import db
from chatgql.edge.auth import issue_token
from chatgql.settings import load_settings

from .infra import BENCH_SECRET, Postgres, Server, log, machine_info, raise_fd_limit, run_with_rusage

HERE = Path(__file__).resolve().parent
LUA = HERE / "wrk" / "readstorm.lua"
RESULTS = HERE / "results" / "readstorm.md"
OUT = HERE / "out"

USERS, DEVICES, CONVERSATIONS, PER_USER = 1000, 5, 200, 5
LAST_SEQ = 10**12  # far ahead: markRead needs no message rows, and no ask is clamped
MARK_READ = (
    "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq advanced unreadCount } }"
)
# load: (connections, markRead/s they send together; 0: closed loop, each as fast as it is answered)
LOADS = {
    "storm": (USERS * DEVICES, 1000.0),  # one connection per device, 1,000 markRead/s in all
    "storm-400": (USERS * DEVICES, 400.0),  # the same at a rate one busy process serves
    "flood": (64, 0.0),
}
TARGET_COMMITS, TARGET_P99_MS = 0.2, 100.0

MODES = {  # name: the server's environment
    "off": {"CHATGQL_MARK_READ_COALESCING": "false"},
    "on": {"CHATGQL_MARK_READ_COALESCING": "true", "CHATGQL_MARK_READ_WINDOW_MS": "0"},
    "on+10ms": {"CHATGQL_MARK_READ_COALESCING": "true", "CHATGQL_MARK_READ_WINDOW_MS": "10"},
}


def conversations_of(user: int) -> list[int]:
    return [(user - 1 + j * 37) % CONVERSATIONS + 1 for j in range(PER_USER)]


async def seed(url: str) -> None:
    conn = await asyncpg.connect(db.dsn(url))
    try:
        await conn.execute(
            """INSERT INTO conversation (id, type, title, last_seq, last_message_at, created_at)
               SELECT i, 'GROUP', 'storm ' || i, $2, now(), now() FROM generate_series(1, $1::int) i""",
            CONVERSATIONS,
            LAST_SEQ,
        )
        await conn.executemany(
            "INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq) VALUES ($1, $2, 'MEMBER', 0)",
            [(cid, user) for user in range(1, USERS + 1) for cid in conversations_of(user)],
        )
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


def write_devices(workdir: Path) -> Path:
    settings = load_settings(jwt_secret=BENCH_SECRET)
    path = workdir / "devices.txt"
    lines = []
    for user in range(1, USERS + 1):
        for device in range(DEVICES):
            token = issue_token(settings, str(user), ttl_seconds=24 * 3600 - device)  # distinct per device
            lines.append(" ".join([token, *map(str, conversations_of(user))]))
    path.write_text("\n".join(lines) + "\n")
    return path


async def committed(url: str) -> int:
    """xact_commit of the database; read in a transaction rolled back, so not counted."""
    conn = await asyncpg.connect(db.dsn(url))
    try:
        async with conn.transaction():
            value = await conn.fetchval("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
            raise _Rollback(value)
    except _Rollback as done:
        return done.value
    finally:
        await conn.close()


class _Rollback(Exception):
    def __init__(self, value: int) -> None:
        self.value = value


def wrk(
    port: int,
    devices: Path,
    workdir: Path,
    name: str,
    connections: int,
    seconds: float,
    mean_delay_ms: float,
    base: int,
) -> dict:
    query = json.dumps(MARK_READ)[1:-1]
    config = workdir / f"wrk_{name}.lua"
    config.write_text(
        "return {\n"
        f"  devices = [==[{devices}]==],\n  query = [==[{query}]==],\n  threads = 2,\n"
        f"  seed = {random.randint(1, 2**30)},\n  base = {base},\n  lag = 40,\n  mean_delay_ms = {mean_delay_ms},\n"
        "}\n"
    )
    cmd = [
        shutil.which("wrk") or "wrk",
        "-t2",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(LUA),
        f"http://127.0.0.1:{port}/graphql",
        "--",
        str(config),
    ]
    status, out, cpu, wall = run_with_rusage(cmd, workdir / f"wrk_{name}.out")
    m = re.search(r"^WRKJSON (\{.*\})$", out, re.M)
    if status != 0 or not m:
        raise RuntimeError(f"wrk {name} failed (exit {status}):\n{out[-3000:]}")
    r = json.loads(m.group(1))
    r["seconds"] = r["duration_us"] / 1e6
    r["generator_cpu_pct"] = round(100 * cpu / wall, 1)
    return r


async def one_run(url: str, scratch: Path, devices: Path, mode: str, load: str, seconds: float, base: int) -> dict:
    server = Server(db.asyncpg_url(url), scratch, kafka=None)
    server.env.update(MODES[mode])
    server.env["CHATGQL_RATE_READ_PER_SECOND"] = "0"  # the storm is the test, not the per-user limit
    server.spawn()
    try:
        await asyncio.to_thread(server.wait_ready)
        await asyncio.sleep(1.5)  # startup's transactions reported (at most once a second per backend)
        before = await committed(url)
        connections, rate = LOADS[load]
        mean_delay_ms = connections / rate * 1000 if rate else 0
        result = await asyncio.to_thread(
            wrk, server.port, devices, scratch, f"{mode}_{load}", connections, seconds, mean_delay_ms, base
        )
        metrics = await asyncio.to_thread(server.metrics)
        cpu = await asyncio.to_thread(server.cpu_seconds)
    finally:
        await asyncio.to_thread(server.stop)
    await asyncio.sleep(1.0)  # the server's backends exit and report what they had pending
    commits = await committed(url) - before
    answered = result["ok"]
    flushes = metrics.get("chatgql_mark_read_flushes_total", 0.0)
    return {
        "mode": mode,
        "load": load,
        "answered": answered,
        "errors": result["bad_status"] + result["gql_errors"],
        "socket_errors": result["connect_errors"] + result["read_errors"] + result["write_errors"] + result["timeouts"],
        "timeouts": result["timeouts"],
        "connect_errors": result["connect_errors"],
        "first_error": result["first_error"] or None,
        "advanced": result["advanced"],
        "rps": round(answered / result["seconds"], 1),
        "p50_ms": result["lat_p50_us"] / 1000,
        "p99_ms": result["lat_p99_us"] / 1000,
        "max_ms": result["lat_max_us"] / 1000,
        "commits": commits,
        "commits_per_call": round(commits / answered, 4) if answered else None,
        "flushes": int(flushes),
        "flushes_per_call": round(flushes / answered, 4) if answered and flushes else None,
        "calls_per_flush": round(metrics.get("chatgql_mark_read_flushed_calls_total", 0.0) / flushes, 1)
        if flushes
        else None,
        "server_cpu_s": round(cpu, 2),
        "generator_cpu_pct": result["generator_cpu_pct"],
    }


def report(runs: list[dict], seconds: float, info: dict) -> str:
    lines = [
        "# Read storm: markRead coalescing on vs off",
        "",
        f"`python -m bench.readstorm` ({info.get('logical_cores', '?')} logical cores, load average {info.get('load_avg_at_start')} at the start, {seconds:.0f} s per run, one `chatgql serve`"
        " process in production mode with its relay in-process, embedded PostgreSQL 18, fsync on).",
        f"{USERS:,} users x {DEVICES} devices (5,000 device tokens), each user in {PER_USER} of {CONVERSATIONS}"
        " group conversations. storm: 5,000 connections (one per device), each waiting an exponential time"
        " between its requests: together a Poisson stream of 1,000 markRead/s (storm-400: 400/s);"
        " flood: 64 connections, closed loop (the most the process serves).",
        "Commits: pg_stat_database.xact_commit of the database from before the load until the server stopped"
        " (every transaction, read-only ones too: the flushes or the per-call statements, the relay's three per"
        " drain (read a batch, delete it, find the outbox empty), the pool's connection set-up), per markRead"
        " answered. Flushes: the coalescer's own statements (one commit each), from the server's /metrics.",
        "",
        "| mode | load | markRead/s | p50 ms | p99 ms | max ms | commits / markRead | flushes / markRead | calls / flush | advanced | HTTP/GraphQL errors | socket errors (timeouts) | server CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['mode']} | {r['load']} | {r['rps']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['max_ms']:.0f} |"
            f" {r['commits_per_call'] if r['commits_per_call'] is not None else '-'} |"
            f" {r['flushes_per_call'] if r['flushes_per_call'] is not None else '-'} |"
            f" {r['calls_per_flush'] if r['calls_per_flush'] is not None else '-'} |"
            f" {r['advanced']:,} of {r['answered']:,} | {r['errors']} | {r['socket_errors']} ({r['timeouts']}) | {r['server_cpu_s']} |"
        )
    lines += [
        "",
        "Socket errors other than timeouts are wrk's read errors when the server closes a keep-alive"
        " connection that stayed idle for 5 s (uvicorn's keep-alive timeout) between two requests of a"
        " device; wrk reconnects and goes on. Latency is wrk's, from a request's send to its response.",
        "",
        "Targets (issue 12, item 2), storm loads with coalescing:",
        "",
    ]
    for r in runs:
        if r["load"].startswith("storm") and r["mode"] != "off":
            commits_ok = r["commits_per_call"] is not None and r["commits_per_call"] <= TARGET_COMMITS
            p99_ok = r["p99_ms"] < TARGET_P99_MS
            lines.append(
                f"- {r['mode']}, {r['load']}: commits per markRead {r['commits_per_call']} (target <= {TARGET_COMMITS}:"
                f" {'met' if commits_ok else 'not met'}), p99 {r['p99_ms']:.1f} ms (target < {TARGET_P99_MS:.0f} ms:"
                f" {'met' if p99_ok else 'not met'})"
            )
    errors = [f"{r['mode']}/{r['load']}: {r['first_error']}" for r in runs if r["first_error"]]
    if errors:
        lines += ["", "First errors: " + "; ".join(errors)]
    return "\n".join(lines) + "\n"


async def main(seconds: float, modes: list[str], loads: list[str]) -> None:
    if not shutil.which("wrk"):
        raise SystemExit("bench.readstorm needs wrk (apt-get install -y wrk)")
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-readstorm-"))
    pg = await asyncio.to_thread(Postgres.start, scratch / "pg")
    runs: list[dict] = []
    try:
        await db.upgrade(pg.url)
        await seed(pg.url)
        devices = write_devices(scratch)
        base = 1_000_000
        for load in loads:
            for mode in modes:
                log(f"{load}, coalescing {mode}")
                run = await one_run(pg.url, scratch, devices, mode, load, seconds, base)
                base += 10_000_000  # every run starts above what the last one left
                log(json.dumps(run))
                runs.append(run)
    finally:
        await asyncio.to_thread(pg.stop)
        shutil.rmtree(scratch, ignore_errors=True)
    info = machine_info()
    OUT.mkdir(exist_ok=True)
    (OUT / "readstorm.json").write_text(json.dumps({"runs": runs, "machine": info, "seconds": seconds}, indent=2))
    RESULTS.write_text(report(runs, seconds, info))
    print(RESULTS.read_text())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=12.0, help="seconds of load per run")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    parser.add_argument("--loads", default=",".join(LOADS), help="comma-separated: " + ", ".join(LOADS))
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from bench/out/readstorm.json")
    args = parser.parse_args()
    started = time.monotonic()
    if args.report_only:
        saved = json.loads((OUT / "readstorm.json").read_text())
        RESULTS.write_text(report(saved["runs"], saved["seconds"], saved["machine"]))
        raise SystemExit(0)
    asyncio.run(main(args.seconds, args.modes.split(","), args.loads.split(",")))
    log(f"done in {time.monotonic() - started:.0f} s")
