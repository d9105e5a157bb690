"""The partitioned message table against the plain one, at 10 million messages.

`python -m bench.partition` starts its own embedded PostgreSQL with two
databases: `flat`, migrated to 0004 (message unpartitioned), and `part`,
migrated to 0005 (message PARTITION BY HASH (conversation_id), 16 partitions).
Both get the same rows: CONVERSATIONS conversations x MESSAGES messages, two
members each, loaded with INSERT ... SELECT generate_series with the keys
dropped and built again afterwards, then VACUUM ANALYZE and a CHECKPOINT.
The load runs with wal_level=minimal (a server restart each way): data written
into storage the same transaction created skips WAL; the measurements run
with the default wal_level again.

Then pgbench runs the product's own statements (taken from chatgql.store at
run time, as bench.product_sql does), against a random conversation each time,
A B B A (flat, part, part, flat) per workload so that drift on a shared machine
falls on both sides:

- history newest: `messages(conversationId:)`, the newest page (50 + 1 rows);
- history after: `messages(first: 50, after: random seq)`;
- lastMessage x20: an inbox page's batched lastMessage read (20 random
  conversations, one LATERAL probe each);
- send: sendMessage's one statement (chat_send) into a random conversation.

Writes bench/results/partition.md. Target: partitioned within 10% of flat.
Sizes via CHATGQL_BENCH_PARTITION_CONVERSATIONS / _MESSAGES / _SECONDS / _CLIENTS.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import asyncpg

from chatgql import db
from chatgql.store import messages

from . import product_sql
from .infra import REPO, Postgres, log, machine_info, run_with_rusage

CONVERSATIONS = int(os.environ.get("CHATGQL_BENCH_PARTITION_CONVERSATIONS", 100_000))
MESSAGES = int(os.environ.get("CHATGQL_BENCH_PARTITION_MESSAGES", 100))
SECONDS = float(os.environ.get("CHATGQL_BENCH_PARTITION_SECONDS", 12))
CLIENTS = int(os.environ.get("CHATGQL_BENCH_PARTITION_CLIENTS", 8))
THREADS = 2
PAGE = 50
INBOX = 20  # lastMessage of an inbox page: one batched read of 20 conversations
OTHER = 1_000_000_000  # user OTHER + cid is the second member of conversation cid; user cid sends
BEFORE, PARTITIONED = "0004", "0005"  # the revision before the partitioning migration, and it
VARIANTS = {"flat": BEFORE, "part": PARTITIONED}
RESULTS = REPO / "bench" / "results" / "partition.md"

# A bulk load into storage its own transaction created skips WAL at wal_level=minimal (a restart each way).
FAST_LOAD = (
    "ALTER SYSTEM SET wal_level = minimal",
    "ALTER SYSTEM SET max_wal_senders = 0",
    "ALTER SYSTEM SET max_wal_size = '8GB'",
    "ALTER SYSTEM SET checkpoint_timeout = '30min'",
)
AFTER_LOAD = ("ALTER SYSTEM RESET wal_level", "ALTER SYSTEM RESET max_wal_senders")

_KEYS = ["message_pkey", "message_client_msg_id_key", "message_conversation_id_fkey"]
_ADD_KEYS = [
    "ALTER TABLE message ADD CONSTRAINT message_pkey PRIMARY KEY (conversation_id, seq)",
    "ALTER TABLE message ADD CONSTRAINT message_client_msg_id_key UNIQUE (conversation_id, client_msg_id)",
    "ALTER TABLE message ADD CONSTRAINT message_conversation_id_fkey"
    " FOREIGN KEY (conversation_id) REFERENCES conversation (id)",
]


def _url(pg: Postgres, database: str) -> str:
    return f"postgresql+asyncpg://postgres@/{database}?host={quote(pg.socket_dir, safe='')}"


async def _admin(pg: Postgres, *statements: str) -> None:
    conn = await asyncpg.connect(db.dsn(_url(pg, "postgres")))
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _load(pg: Postgres, database: str) -> dict:
    """Fill one database (in one transaction: TRUNCATE makes new storage, which skips WAL)."""
    conn = await asyncpg.connect(db.dsn(_url(pg, database)))
    try:
        t0 = time.monotonic()
        async with conn.transaction():
            await conn.execute("SET maintenance_work_mem = '512MB'")
            for key in reversed(_KEYS):
                await conn.execute(f"ALTER TABLE message DROP CONSTRAINT {key}")
            await conn.execute("TRUNCATE message, conversation_member, direct_pair, conversation, outbox")
            await conn.execute(
                f"""
                INSERT INTO conversation (id, type, title, last_seq, last_message_at)
                SELECT c, 'GROUP', 'g' || c, {MESSAGES}, now() FROM generate_series(1, {CONVERSATIONS}) c
                """
            )
            await conn.execute(
                f"""
                INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
                SELECT c, u.user_id, u.role, {MESSAGES} FROM generate_series(1, {CONVERSATIONS}) c,
                       LATERAL (VALUES (c::bigint, 'OWNER'), ({OTHER} + c, 'MEMBER')) u(user_id, role)
                """
            )
            await conn.execute(
                f"""
                INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
                SELECT c, s, CASE WHEN s % 2 = 0 THEN c ELSE {OTHER} + c END, gen_random_uuid(),
                       'message ' || s || ' of conversation ' || c || ', about this long',
                       now() - make_interval(secs => {MESSAGES} - s)
                  FROM generate_series(1, {CONVERSATIONS}) c, generate_series(1, {MESSAGES}) s
                """
            )
            loaded = time.monotonic() - t0
            for statement in _ADD_KEYS:
                await conn.execute(statement)
            await conn.execute(f"SELECT setval(pg_get_serial_sequence('conversation', 'id'), {CONVERSATIONS})")
        keyed = time.monotonic() - t0
        await conn.execute("VACUUM (ANALYZE) message")
        await conn.execute("VACUUM (ANALYZE) conversation, conversation_member")
        size = await conn.fetchrow(
            """
            SELECT sum(pg_table_size(c.oid)) AS heap, sum(pg_indexes_size(c.oid)) AS indexes, count(*) AS tables
              FROM pg_class c WHERE c.relkind = 'r' AND (c.relname = 'message' OR c.relname ~ '^message_p[0-9]+$')
            """
        )
        rows = await conn.fetchval("SELECT reltuples::bigint FROM pg_class WHERE relname = 'message'")
        return {
            "insert_s": round(loaded, 1),
            "with_keys_s": round(keyed, 1),
            "total_s": round(time.monotonic() - t0, 1),
            "heap_mb": round(size["heap"] / 2**20),
            "indexes_mb": round(size["indexes"] / 2**20),
            "tables": size["tables"],
            "rows_estimate": rows,
        }
    finally:
        await conn.close()


def _scripts() -> dict[str, str]:
    """pgbench scripts of the product's statements, with random conversations."""
    pick = f"\\set cid random(1, {CONVERSATIONS})\n"
    page = ("cid", "after", "before", "lim")
    newest = product_sql._record(page, messages.pages, [(1, 0, None, PAGE + 1, True)])[0]
    forward = product_sql._record(page, messages.pages, [(1, 0, None, PAGE + 1, False)])[0]
    keys = product_sql._record(("cids", "seqs"), messages.by_keys, [(1, 1)])[0]
    send = product_sql.send_statement()
    bounds = f"\\set before {2**63 - 1}\n\\set lim {PAGE + 1}\n"  # bound as the product binds them
    inbox = "".join(f"\\set c{n} random(1, {CONVERSATIONS})\n" for n in range(INBOX))
    return {
        "history newest": pick + bounds + "\\set after 0\n" + newest.for_pgbench(),
        "history after": pick + bounds + f"\\set after random(0, {max(0, MESSAGES - PAGE)})\n" + forward.for_pgbench(),
        f"lastMessage x{INBOX}": inbox
        + keys.for_pgbench(
            {
                "cids": "ARRAY[" + ", ".join(f":c{n}" for n in range(INBOX)) + "]",
                "seqs": "ARRAY[" + ", ".join([str(MESSAGES)] * INBOX) + "]",
            }
        ),
        "send": pick
        + "\\set uid :cid\n"
        + send.for_pgbench({"cmid": "gen_random_uuid()"})
        .replace(":body", "'hello from pgbench'")
        .replace(":message_event", f"'{send.params['message_event']}'")
        .replace(":read_event", f"'{send.params['read_event']}'"),
    }


_TPS = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")
_LAT = re.compile(r"latency average = ([0-9.]+) ms")
_FAILED = re.compile(r"number of failed transactions: (\d+)")


def _pgbench(pg: Postgres, database: str, name: str, script: str, workdir: Path, seconds: float) -> dict:
    path = workdir / f"{name.replace(' ', '_')}.sql"
    path.write_text(script + "\n")
    cmd = [str(Postgres.bin_dir() / "pgbench"), "-h", pg.socket_dir, "-U", "postgres", "-n", "-M", "prepared"]
    cmd += ["-c", str(CLIENTS), "-j", str(THREADS), "-T", str(max(1, round(seconds))), "-f", str(path), database]
    status, out, cpu, wall = run_with_rusage(cmd, workdir / f"{database}_{path.stem}.out")
    if status != 0 or not _TPS.search(out):
        raise RuntimeError(f"pgbench {name} on {database} failed (exit {status}):\n{out[-3000:]}")
    failed = int(m.group(1)) if (m := _FAILED.search(out)) else 0
    if failed:
        raise RuntimeError(f"pgbench {name} on {database}: {failed} failed transactions")
    latency = _LAT.search(out)
    return {
        "tps": float(_TPS.search(out).group(1)),
        "latency_ms": float(latency.group(1)) if latency else None,
        "pgbench_cpu_pct": round(100 * cpu / wall, 1),
    }


async def _plans(pg: Postgres) -> dict[str, str]:
    """EXPLAIN ANALYZE of the read statements on the big partitioned table, as chatgql
    binds them (EXPLAIN plans them with the values: custom plans)."""
    recorder = product_sql._RecordingConnection()
    await messages.pages(recorder, [(4242, 0, None, PAGE + 1, True)])
    await messages.pages(recorder, [(4242, 10, None, PAGE + 1, False)])
    await messages.by_keys(recorder, [(4242, MESSAGES), (4243, MESSAGES)])
    await messages.pages(recorder, [(4242, 10, None, 3, False), (4243, 10, None, 3, False)])
    names = ["history newest", "history after", "lastMessage of two conversations", "two pages at once"]
    conn = await asyncpg.connect(db.dsn(_url(pg, "part")))
    plans = {}
    try:
        for name, (sql, args) in zip(names, recorder.statements, strict=True):
            rows = await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {sql}", *args)
            plans[name] = "\n".join(r[0] for r in rows)
    finally:
        await conn.close()
    return plans


async def _restart(pg: Postgres, scratch: Path, *settings: str) -> Postgres:
    await _admin(pg, *settings)
    pg.stop()
    return Postgres.start(scratch)


async def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-partition-"))
    workdir = scratch / "work"
    workdir.mkdir()
    t_start = time.monotonic()
    pg = Postgres.start(scratch)
    try:
        await _admin(pg, *(f"CREATE DATABASE {name}" for name in VARIANTS))
        for name, revision in VARIANTS.items():
            await db.upgrade(_url(pg, name), revision)
        pg = await _restart(pg, scratch, *FAST_LOAD)
        log(f"loading {CONVERSATIONS:,} conversations x {MESSAGES} messages into each of {', '.join(VARIANTS)}")
        t0 = time.monotonic()
        loads = dict(zip(VARIANTS, await asyncio.gather(*(_load(pg, name) for name in VARIANTS)), strict=True))
        await _admin(pg, "CHECKPOINT")
        load_wall = time.monotonic() - t0
        log(f"loaded in {load_wall:.0f} s: {loads}")
        pg = await _restart(pg, scratch, *AFTER_LOAD)
        plans = await _plans(pg)

        scripts = _scripts()
        results: dict[str, dict[str, list[dict]]] = {w: {v: [] for v in VARIANTS} for w in scripts}
        for workload, script in scripts.items():
            for variant in ("flat", "part"):  # warm both: the tables are larger than shared_buffers
                _pgbench(pg, variant, workload, script, workdir, 3)
            for variant in ("flat", "part", "part", "flat"):
                run = _pgbench(pg, variant, workload, script, workdir, SECONDS / 2)
                results[workload][variant].append(run)
                log(workload, variant, run)
        total = time.monotonic() - t_start
        _write(loads, load_wall, results, plans, total, scripts)
        log(f"wrote {RESULTS} ({total:.0f} s in all)")
    finally:
        pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _machine() -> str:
    info = machine_info()
    return f"{info['cpu_model']}, {info['logical_cores']} logical cores (shared with other work)"


def _write(loads: dict, load_wall: float, results: dict, plans: dict, total: float, scripts: dict) -> None:
    lines = [
        "# Partitioned vs unpartitioned message table (bench/partition.py)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M')} with `python -m bench.partition`, {total:.0f} s in all. Machine: {_machine()}.",
        "",
        f"Data in each database: {CONVERSATIONS:,} conversations x {MESSAGES} messages = "
        f"{CONVERSATIONS * MESSAGES:,} message rows, 2 members each. `flat`: migrated to {BEFORE} (one table); "
        f"`part`: migrated to {PARTITIONED} (16 hash partitions). pgbench: {CLIENTS} clients, {THREADS} threads, "
        f"-M prepared (generic plans after five runs, as asyncpg's prepared statements), a random "
        f"conversation per transaction; each figure is the mean of two {SECONDS / 2:.0f} s runs taken A B B A "
        "after a 3 s warm-up of each side.",
        "",
        "## Load",
        "",
        f"Both databases loaded at once (2 cores), wal_level=minimal: {load_wall:.0f} s wall including the checkpoint.",
        "",
        "| database | INSERT ... SELECT (s) | + keys (s) | + VACUUM ANALYZE (s) | heap (MB) | indexes (MB) | tables |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, load in loads.items():
        lines.append(
            f"| {name} | {load['insert_s']} | {load['with_keys_s']} | {load['total_s']} | {load['heap_mb']:,} "
            f"| {load['indexes_mb']:,} | {load['tables']} |"
        )
    lines += [
        "",
        "## Throughput",
        "",
        "| workload | flat tps | part tps | part / flat | flat latency (ms) | part latency (ms) | within 10%? |",
        "|---|---|---|---|---|---|---|",
    ]
    for workload, by_variant in results.items():
        flat = statistics.mean(r["tps"] for r in by_variant["flat"])
        part = statistics.mean(r["tps"] for r in by_variant["part"])
        lat_f = statistics.mean(r["latency_ms"] for r in by_variant["flat"])
        lat_p = statistics.mean(r["latency_ms"] for r in by_variant["part"])
        ratio = part / flat
        lines.append(
            f"| {workload} | {flat:,.0f} | {part:,.0f} | {ratio:.3f} | {lat_f:.2f} | {lat_p:.2f} "
            f"| {'yes' if ratio >= 0.9 else 'NO'} |"
        )
    lines += ["", "Each run (A B B A):", ""]
    for workload, by_variant in results.items():
        runs = ", ".join(f"{v} {r['tps']:,.0f}" for v in VARIANTS for r in by_variant[v])
        cpu = max(r["pgbench_cpu_pct"] for v in VARIANTS for r in by_variant[v])
        lines.append(f"- {workload}: {runs} (pgbench at most {cpu}% of a core)")
    lines += ["", "## Plans on the partitioned table (EXPLAIN ANALYZE, parameters bound)", ""]
    for name, plan in plans.items():
        lines += [f"{name}:", "", "```", plan, "```", ""]
    lines += ["## The pgbench scripts", ""]
    for name, script in scripts.items():
        lines += [f"{name}:", "", "```", script.strip(), "```", ""]
    RESULTS.write_text("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
