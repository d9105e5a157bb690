"""Group commit of hot conversations, measured: `python -m bench.groupcommit`.

(a) pgbench, one conversation (the seeded hot GROUP, 1,000 members), 16 clients:
    chat_send (one message per transaction, what a lone send runs) against
    chat_send_batch with 10 messages per call (what a batch of 10 runs), and
    chat_send_batch with 1 (what a lone send would cost through it).
    Target: the batch of 10 stores >= 5x the messages/s of single sends.
(b) HTTP through wrk (bench/wrk/gql.lua), one `chatgql serve`, 16 connections:
    sends spread over 10,000 DIRECT conversations against sends from 1,000
    senders into the one hot conversation (group commit on, the default), and
    the hot run again with CHATGQL_SEND_GROUP_COMMIT=false for reference.
    Target: hot rate >= spread rate and hot p99 <= 2x spread p99.

Each run lasts RUN_SECONDS (after a short unmeasured warm-up for HTTP). The
report goes to bench/RESULTS.groupcommit.md (raw figures next to it in
bench/out/groupcommit.json).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path

import asyncpg

from chatgql import db

from . import httpload, layout, pgbench
from .infra import Postgres, Server, dump_json, log, machine_info
from .queries import Scenario

RUN_SECONDS = 10.0
WARMUP_SECONDS = 2.0
BATCH = 10
HERE = Path(__file__).resolve().parent
REPORT = HERE / "RESULTS.groupcommit.md"
RAW = HERE / "out" / "groupcommit.json"

SIZES = dataclasses.replace(
    layout.FULL,
    read_conversations=16,
    fanout_members=2,
    live_conversations=1,
    duration=RUN_SECONDS,
)


def batch_script(sizes: layout.Sizes, n: int) -> pgbench.Script:
    """chat_send_batch with n sends from consecutive members of the hot conversation."""
    text = (
        f"\\set j random(1, {sizes.hot_members - n + 1})\n"
        f"SELECT * FROM chat_send_batch({layout.HOT_CID},\n"
        f"  ARRAY(SELECT {layout.HOT_MEMBER} + :j + g FROM generate_series(0, {n - 1}) g),\n"
        f"  ARRAY(SELECT gen_random_uuid() FROM generate_series(1, {n})),\n"
        f"  array_fill(:body::text, ARRAY[{n}]),\n"
        f"  array_fill(:message_event::jsonb, ARRAY[{n}]),\n"
        f"  array_fill(:read_event::jsonb, ARRAY[{n}]));\n"
    )
    single = pgbench.send_script(sizes, hot=True)
    return pgbench.Script(f"send_hot_batch{n}", text, single.defines)


async def _count(conn: asyncpg.Connection, sql: str) -> int:
    return await conn.fetchval(sql)


async def _drain_outbox(conn: asyncpg.Connection, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while await _count(conn, "SELECT count(*) FROM outbox") > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("the relay did not drain the outbox")
        await asyncio.sleep(0.1)


async def _pgbench(pg: Postgres, conn: asyncpg.Connection, script: pgbench.Script, per_call: int, work: Path) -> dict:
    await conn.execute("TRUNCATE outbox")
    await conn.execute("CHECKPOINT")
    before = await _count(conn, "SELECT count(*) FROM message")
    log(f"pgbench {script.name}: {SIZES.clients} clients, {RUN_SECONDS:g} s")
    result = await asyncio.to_thread(pgbench.run, pg, script, SIZES, work, RUN_SECONDS)
    stored = await _count(conn, "SELECT count(*) FROM message") - before
    result["messages_stored"] = stored
    result["messages_per_call"] = per_call
    result["messages_per_s"] = round(result["tps"] * per_call, 1)
    await conn.execute("TRUNCATE outbox")
    return result


async def _http(
    pg: Postgres, conn: asyncpg.Connection, scratch: Path, work: Path, name: str, group_commit: bool
) -> dict:
    server = Server(pg.url, scratch, None)
    server.env["CHATGQL_SEND_GROUP_COMMIT"] = "true" if group_commit else "false"
    server.spawn()
    try:
        await asyncio.to_thread(server.wait_ready)
        scenario = Scenario(name, SIZES)
        await asyncio.to_thread(httpload.run, server.port, scenario, work, WARMUP_SECONDS)
        await _drain_outbox(conn)
        await conn.execute("CHECKPOINT")
        before_metrics = server.metrics()
        before_commits = await _count(
            conn, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        before = await _count(conn, "SELECT count(*) FROM message")
        label = f"{name} (group commit {'on' if group_commit else 'off'})"
        log(f"wrk {label}: {SIZES.clients} connections, {RUN_SECONDS:g} s")
        result = await asyncio.to_thread(httpload.run, server.port, scenario, work, RUN_SECONDS)
        after_metrics = server.metrics()
        result["messages_stored"] = await _count(conn, "SELECT count(*) FROM message") - before
        result["xact_commit"] = (
            await _count(conn, "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
            - before_commits
        )
        sends = after_metrics.get("chatgql_send_batch_size_sum", 0) - before_metrics.get(
            "chatgql_send_batch_size_sum", 0
        )
        batches = after_metrics.get("chatgql_send_batch_size_count", 0) - before_metrics.get(
            "chatgql_send_batch_size_count", 0
        )
        result["send_transactions"] = int(batches)
        result["sends_per_transaction"] = round(sends / batches, 2) if batches else None
        result["label"] = label
        await _drain_outbox(conn)
        return result
    finally:
        await asyncio.to_thread(server.stop)


def _report(results: dict) -> str:
    pg = results["pgbench"]
    single, batch, one = pg["single"], pg[f"batch{BATCH}"], pg["batch1"]
    ratio = batch["messages_per_s"] / single["messages_per_s"]
    http = results["http"]
    spread, hot, hot_off = http["spread"], http["hot"], http["hot_off"]
    rate_ok = hot["rps"] >= spread["rps"]
    p99_ok = hot["latency_ms"]["p99"] <= 2 * spread["latency_ms"]["p99"]
    machine = results["machine"]
    lines = [
        "# Group commit of hot conversations (python -m bench.groupcommit)",
        "",
        f"Run {results['started']} on {machine.get('cpu_model', '?')} ({machine.get('logical_cores', '?')} logical cores, shared "
        f"with other work: load average {results['loadavg_before']} before the run). {SIZES.clients} pgbench "
        f"clients / wrk connections, {RUN_SECONDS:g} s per run, fsync on.",
        "",
        "## (a) pgbench: one conversation, messages stored per second",
        "",
        "| statement | messages per transaction | transactions/s | messages/s | avg latency ms | failed |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in (
        ("chat_send (one send)", single),
        (f"chat_send_batch, {BATCH} sends", batch),
        ("chat_send_batch, 1 send", one),
    ):
        lines.append(
            f"| {label} | {r['messages_per_call']} | {r['tps']:.0f} | {r['messages_per_s']:.0f} | "
            f"{r['latency_avg_ms']} | {r['failed']} |"
        )
    lines += [
        "",
        f"Batch of {BATCH} vs single sends: **{ratio:.1f}x** the messages/s (target >= 5x: "
        f"{'met' if ratio >= 5 else 'NOT met'}). A lone send through chat_send_batch runs at "
        f"{one['tps'] / single['tps']:.2f}x chat_send's rate, so a lone send keeps using chat_send.",
        "",
        "## (b) HTTP (wrk), one `chatgql serve`",
        "",
        "| run | requests/s | p50 ms | p90 ms | p99 ms | errors | messages stored | sends per transaction | "
        "PostgreSQL commits |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in (
        ("spread: 10,000 conversations", spread),
        ("hot: 1 conversation, 1,000 senders", hot),
        ("hot, CHATGQL_SEND_GROUP_COMMIT=false", hot_off),
    ):
        errors = r["bad_status"] + r["gql_errors"] + r["socket_errors"]
        lat = r["latency_ms"]
        lines.append(
            f"| {label} | {r['rps']:.0f} | {lat['p50']:.1f} | {lat['p90']:.1f} | {lat['p99']:.1f} | {errors} | "
            f"{r['messages_stored']} | {r['sends_per_transaction']} | {r['xact_commit']} |"
        )
    lines += [
        "",
        f"Hot rate / spread rate: **{hot['rps'] / spread['rps']:.2f}** (target >= 1: {'met' if rate_ok else 'NOT met'}); "
        f"hot p99 / spread p99: **{hot['latency_ms']['p99'] / spread['latency_ms']['p99']:.2f}** "
        f"(target <= 2: {'met' if p99_ok else 'NOT met'}).",
        "",
        "PostgreSQL commits count every transaction of the database during the run (the relay's included). "
        "Sends per transaction comes from chatgql_send_batch_size (the lone sends count as batches of 1; "
        "with group commit off nothing is recorded).",
        "",
    ]
    return "\n".join(lines)


async def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-bench-groupcommit-"))
    work = scratch / "work"
    work.mkdir()
    results: dict = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": machine_info(),
        "loadavg_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    pg = Postgres.start(scratch)
    try:
        await db.upgrade(pg.url)
        conn = await asyncpg.connect(host=pg.socket_dir, user="postgres", database="postgres")
        try:
            log("seeding")
            await layout.seed(conn, SIZES)
            results["pgbench"] = {
                "single": await _pgbench(pg, conn, pgbench.send_script(SIZES, hot=True), 1, work),
                f"batch{BATCH}": await _pgbench(pg, conn, batch_script(SIZES, BATCH), BATCH, work),
                "batch1": await _pgbench(pg, conn, batch_script(SIZES, 1), 1, work),
            }
            results["http"] = {
                "spread": await _http(pg, conn, scratch, work, "send_spread", True),
                "hot": await _http(pg, conn, scratch, work, "send_hot", True),
                "hot_off": await _http(pg, conn, scratch, work, "send_hot", False),
            }
        finally:
            await conn.close()
    finally:
        pg.stop()
    RAW.parent.mkdir(exist_ok=True)
    dump_json(RAW, results)
    REPORT.write_text(_report(results))
    log(f"wrote {REPORT}")
    print(REPORT.read_text())
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
