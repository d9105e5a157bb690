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
report goes to bench/results/groupcommit.md (raw figures next to it in
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
from chatgql.events import types as events
from chatgql.store import keys_literal

from . import httpload, layout, pgbench
from .infra import Postgres, Server, dump_json, log, machine_info
from .queries import Scenario

RUN_SECONDS = 5.0  # the compared figures are two runs each (A B B A); the references one
WARMUP_SECONDS = 2.0
BATCH = 10
HERE = Path(__file__).resolve().parent
REPORT = HERE / "results" / "groupcommit.md"
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
        f"  array_fill(:read_event::jsonb, ARRAY[{n}]),\n"
        f"  {keys_literal(events.MessageNew.store_keys())},\n"
        f"  {keys_literal(events.ReadUpdated.store_keys())});\n"
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
    cpu = pg.cpu_seconds()
    result = await asyncio.to_thread(pgbench.run, pg, script, SIZES, work, RUN_SECONDS)
    cpu = pg.cpu_seconds() - cpu
    stored = await _count(conn, "SELECT count(*) FROM message") - before
    result["postgres_cpu_s"] = round(cpu, 3)
    result["postgres_cpu_pct_of_one_core"] = round(100 * cpu / result["seconds"], 1)
    result["messages_stored"] = stored
    result["messages_per_call"] = per_call
    result["messages_per_s"] = round(result["tps"] * per_call, 1)
    await conn.execute("TRUNCATE outbox")
    return result


def _combine_pgbench(runs: list[dict]) -> dict:
    out = dict(runs[0])
    seconds = sum(r["seconds"] for r in runs)
    out["tps"] = round(sum(r["transactions"] for r in runs) / seconds, 1)
    out["messages_per_s"] = round(out["tps"] * out["messages_per_call"], 1)
    out["latency_avg_ms"] = round(sum(r["latency_avg_ms"] for r in runs) / len(runs), 3)
    out["failed"] = sum(r["failed"] for r in runs)
    stored = sum(r["messages_stored"] for r in runs)
    out["messages_stored"] = stored
    out["postgres_cpu_ms_per_message"] = round(1000 * sum(r["postgres_cpu_s"] for r in runs) / stored, 3)
    out["postgres_cpu_pct_of_one_core"] = round(100 * sum(r["postgres_cpu_s"] for r in runs) / seconds, 1)
    out["runs"] = runs
    return out


def _combine_http(runs: list[dict]) -> dict:
    """Requests/s over all runs; latency percentiles: the mean of the runs'."""
    out = dict(runs[0])
    out["rps"] = round(sum(r["ok"] for r in runs) / sum(r["seconds"] for r in runs), 1)
    out["latency_ms"] = {k: round(sum(r["latency_ms"][k] for r in runs) / len(runs), 2) for k in runs[0]["latency_ms"]}
    keys = ("bad_status", "gql_errors", "socket_errors", "messages_stored", "xact_commit", "send_transactions")
    for key in (*keys, "events_relayed"):
        out[key] = sum(r[key] for r in runs)
    for key in ("server_cpu_pct", "postgres_cpu_pct"):
        out[key] = round(sum(r[key] for r in runs) / len(runs), 1)
    sends = sum(r["sends"] for r in runs)
    out["sends_per_transaction"] = round(sends / out["send_transactions"], 2) if out["send_transactions"] else None
    out["runs"] = runs
    return out


async def _http(
    pg: Postgres, conn: asyncpg.Connection, scratch: Path, work: Path, names: list[str], group_commit: bool
) -> list[dict]:
    """One `chatgql serve`; a warm-up per scenario, then one measured wrk run per name, in order."""
    server = Server(pg.url, scratch, None)
    server.env["CHATGQL_SEND_GROUP_COMMIT"] = "true" if group_commit else "false"
    server.spawn()
    try:
        await asyncio.to_thread(server.wait_ready)
        for name in dict.fromkeys(names):
            await asyncio.to_thread(httpload.run, server.port, Scenario(name, SIZES), work, WARMUP_SECONDS)
        return [await _measure_http(pg, server, conn, work, name, group_commit) for name in names]
    finally:
        await asyncio.to_thread(server.stop)


async def _metric(server: Server, name: str) -> float:
    return (await asyncio.to_thread(server.metrics)).get(name, 0.0)


async def _measure_http(
    pg: Postgres, server: Server, conn: asyncpg.Connection, work: Path, name: str, group_commit: bool
) -> dict:
    commits = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    await _drain_outbox(conn)
    await conn.execute("CHECKPOINT")
    sends0 = await _metric(server, "chatgql_send_batch_size_sum")
    batches0 = await _metric(server, "chatgql_send_batch_size_count")
    commits0 = await _count(conn, commits)
    relayed0 = await _metric(server, "chatgql_events_relayed_total")
    messages0 = await _count(conn, "SELECT count(*) FROM message")
    label = f"{name} (group commit {'on' if group_commit else 'off'})"
    log(f"wrk {label}: {SIZES.clients} connections, {RUN_SECONDS:g} s")
    cpu = server.cpu_seconds(), pg.cpu_seconds()
    result = await asyncio.to_thread(httpload.run, server.port, Scenario(name, SIZES), work, RUN_SECONDS)
    result["server_cpu_pct"] = round(100 * (server.cpu_seconds() - cpu[0]) / result["seconds"], 1)
    result["postgres_cpu_pct"] = round(100 * (pg.cpu_seconds() - cpu[1]) / result["seconds"], 1)
    result["messages_stored"] = await _count(conn, "SELECT count(*) FROM message") - messages0
    result["xact_commit"] = await _count(conn, commits) - commits0
    result["sends"] = int(await _metric(server, "chatgql_send_batch_size_sum") - sends0)
    result["send_transactions"] = int(await _metric(server, "chatgql_send_batch_size_count") - batches0)
    await _drain_outbox(conn)  # the relay publishes what the run wrote; count it
    result["events_relayed"] = int(await _metric(server, "chatgql_events_relayed_total") - relayed0)
    result["label"] = label
    return result


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
        f"clients / wrk connections, runs of {RUN_SECONDS:g} s (the compared figures: two runs each, in the order "
        "A B B A; percentiles are the mean of the two), fsync on.",
        "",
        "## (a) pgbench: one conversation, messages stored per second",
        "",
        "| statement | messages per transaction | transactions/s | messages/s | each run's messages/s | avg latency ms "
        "| failed | PostgreSQL CPU ms per message | PostgreSQL CPU, % of one core |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in (
        ("chat_send (one send)", single),
        (f"chat_send_batch, {BATCH} sends", batch),
        ("chat_send_batch, 1 send", one),
    ):
        lines.append(
            f"| {label} | {r['messages_per_call']} | {r['tps']:.0f} | {r['messages_per_s']:.0f} | "
            f"{' / '.join(str(round(x['messages_per_s'])) for x in r['runs'])} | {r['latency_avg_ms']} | {r['failed']} | "
            f"{r['postgres_cpu_ms_per_message']} | {r['postgres_cpu_pct_of_one_core']} |"
        )
    lines += [
        "",
        f"Batch of {BATCH} vs single sends: **{ratio:.1f}x** the messages/s (target >= 5x: "
        f"{'met' if ratio >= 5 else 'NOT met'}). A lone send through chat_send_batch runs at "
        f"{one['tps'] / single['tps']:.2f}x chat_send's rate, so a lone send keeps using chat_send.",
        "",
        "## (b) HTTP (wrk), one `chatgql serve`",
        "",
        "| run | requests/s | each run's requests/s | p50 ms | p90 ms | p99 ms | each run's p99 | errors "
        "| messages stored | sends per transaction | PostgreSQL commits | events relayed per message "
        "| server CPU % | PostgreSQL CPU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in (
        ("spread: 10,000 conversations", spread),
        ("hot: 1 conversation, 1,000 senders", hot),
        ("hot, CHATGQL_SEND_GROUP_COMMIT=false", hot_off),
    ):
        errors = r["bad_status"] + r["gql_errors"] + r["socket_errors"]
        lat = r["latency_ms"]
        lines.append(
            f"| {label} | {r['rps']:.0f} | {' / '.join(str(round(x['rps'])) for x in r['runs'])} | "
            f"{lat['p50']:.1f} | {lat['p90']:.1f} | {lat['p99']:.1f} | "
            f"{' / '.join(str(round(x['latency_ms']['p99'], 1)) for x in r['runs'])} | {errors} | "
            f"{r['messages_stored']} | {r['sends_per_transaction']} | {r['xact_commit']} | "
            f"{r['events_relayed'] / max(1, r['messages_stored']):.2f} | {r['server_cpu_pct']} | "
            f"{r['postgres_cpu_pct']} |"
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
            # A B B A: both sides see the same minutes of a noisy, shared machine.
            single, batch = pgbench.send_script(SIZES, hot=True), batch_script(SIZES, BATCH)
            a1 = await _pgbench(pg, conn, single, 1, work)
            b1 = await _pgbench(pg, conn, batch, BATCH, work)
            b2 = await _pgbench(pg, conn, batch, BATCH, work)
            a2 = await _pgbench(pg, conn, single, 1, work)
            results["pgbench"] = {
                "single": _combine_pgbench([a1, a2]),
                f"batch{BATCH}": _combine_pgbench([b1, b2]),
                "batch1": _combine_pgbench([await _pgbench(pg, conn, batch_script(SIZES, 1), 1, work)]),
            }
            spread1, hot1, hot2, spread2 = await _http(
                pg, conn, scratch, work, ["send_spread", "send_hot", "send_hot", "send_spread"], True
            )
            (hot_off,) = await _http(pg, conn, scratch, work, ["send_hot"], False)
            results["http"] = {
                "spread": _combine_http([spread1, spread2]),
                "hot": _combine_http([hot1, hot2]),
                "hot_off": _combine_http([hot_off]),
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
