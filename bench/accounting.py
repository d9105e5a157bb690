"""What one request writes and runs: statements, rows, outbox rows, bytes on the bus; and the inbox
page's CPU on both sides of the wire.

`python -m bench.accounting [--sends N] [--inbox-seconds S] [--workers N] [--no-profile]`

One embedded PostgreSQL with pg_stat_statements (track = all: the statements a stored function
runs are counted too) and `chatgql serve` (relay on, the bus in-process with one worker), seeded
as `python -m bench` seeds (bench/layout.py). A trigger on the outbox records each row's type and
payload size (the bytes the relay publishes: the Kafka value and the bus frame's body); its own
statement and table are left out of every count.

- send, two patterns over the spread conversations: *plain* (the same member sends again, having
  read everything: what the benchmark's send figure does) and *reply* (the other member answers a
  message they had not marked read). Each pattern's sends go one conversation at a time per client,
  16 clients; then the relay drains the outbox, the backends' statistics are flushed (they flush
  at most once a second, and an idle backend later), and the deltas are divided by the sends:
  statements by text (top level and nested), rows inserted / updated / deleted by table, WAL bytes,
  outbox rows and their bytes by type.
- inbox: the benchmark's inbox page (50 conversations with lastMessage and unreadCount) under wrk
  for `--inbox-seconds`, in rounds; per page: chatgql's CPU (its process tree), PostgreSQL's CPU
  (the postmaster's tree), and pg_stat_statements' execution time of each statement; then one more
  round under py-spy (when installed) for chatgql's profile.

Writes bench/results/accounting.md (or --report) and bench/out/accounting.json.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

from . import httpload, layout, profiles
from .infra import REPO, Postgres, Server, log, raise_fd_limit
from .perf import _cpu
from .queries import SEND, Scenario, token

SIZES = dataclasses.replace(
    layout.FULL,
    mode="accounting",
    spread=2_000,
    read_conversations=100,
    hot_members=10,
    fanout_members=10,
    live_conversations=10,
    seed_messages=3,
)
CLIENTS = 16
TRACE_SQL = """
CREATE TABLE bench_outbox_bytes (kind text, bytes int);
CREATE FUNCTION bench_outbox_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_outbox_bytes VALUES (NEW.payload->>'type', octet_length(NEW.payload::text));
    RETURN NULL;
END $$;
CREATE TRIGGER bench_outbox_bytes AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION bench_outbox_bytes();
"""
OURS = ("bench_outbox_bytes", "pg_stat_", "pg_catalog", "pg_backend_pid")


def _plain_url(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


def _start_postgres(scratch: Path) -> Postgres:
    """The embedded PostgreSQL with pg_stat_statements loaded: started once to create its data
    directory, stopped, configured, started again."""
    Postgres.start(scratch / "pg").stop()
    with open(scratch / "pg" / "pgdata" / "postgresql.conf", "a") as conf:
        conf.write(
            "\nshared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = 'all'\n"
            "track_functions = 'pl'\n"
        )
    return Postgres.start(scratch / "pg")


async def _query(url: str, sql: str, *args) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(_plain_url(url))
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def _tables(url: str) -> dict[str, tuple[int, int, int]]:
    rows = await _query(url, "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables")
    return {r["relname"]: (r["n_tup_ins"], r["n_tup_upd"], r["n_tup_del"]) for r in rows}


async def _wal(url: str) -> int:
    return int((await _query(url, "SELECT wal_bytes FROM pg_stat_wal"))[0]["wal_bytes"])


async def _reset(url: str) -> None:
    await _query(url, "SELECT pg_stat_statements_reset()")
    await _query(url, "TRUNCATE bench_outbox_bytes")


async def _statements(url: str) -> list[dict]:
    rows = await _query(
        url,
        """SELECT s.query, s.toplevel, s.calls, s.rows, s.wal_bytes, s.total_exec_time, s.mean_exec_time
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
            WHERE d.datname = current_database() ORDER BY s.calls DESC""",
    )
    out = []
    for r in rows:
        text = " ".join(r["query"].split())
        if any(mark in text for mark in OURS) or text.startswith(("SET ", "RESET ")):
            continue
        out.append({**dict(r), "query": text})
    return out


async def _drive(port: int, pattern: str, conversations: int, turns: int) -> int:
    """Sends over the first `conversations` spread conversations, `turns` each, CLIENTS at a time;
    plain: the conversation's first member sends each time; reply: the other member answers first,
    then the two take turns (an even number of turns ends with the first member's: a plain send
    after it finds everything read)."""
    tokens: dict[int, str] = {}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:

        async def send(cid: int, user: int) -> None:
            bearer = tokens.get(user) or tokens.setdefault(user, token(user))
            answer = await http.post(
                "/graphql",
                json={"query": SEND, "variables": {"c": str(cid), "m": str(uuid.uuid4()), "b": "hello"}},
                headers={"authorization": f"Bearer {bearer}"},
            )
            body = answer.json()
            if answer.status_code != 200 or body.get("errors"):
                raise RuntimeError(f"send failed: {answer.status_code} {body}")

        async def client(k: int) -> None:
            for cid in range(1 + k, conversations + 1, CLIENTS):
                for turn in range(turns):
                    if pattern == "plain":
                        user = layout.SPREAD_SENDER + cid
                    else:
                        user = (layout.SPREAD_OTHER if turn % 2 == 0 else layout.SPREAD_SENDER) + cid
                    await send(cid, user)

        await asyncio.gather(*(client(k) for k in range(CLIENTS)))
    return conversations * turns


async def _drained(url: str) -> None:
    deadline = time.monotonic() + 60
    while (await _query(url, "SELECT count(*) AS c FROM outbox"))[0]["c"] and time.monotonic() < deadline:
        await asyncio.sleep(0.2)


async def _send_pattern(port: int, url: str, pattern: str, sends: int) -> dict:
    """What `sends` sends of one pattern (_drive) ran and wrote, per send."""
    turns = max(2, 2 * (sends // (2 * SIZES.spread)))
    await _reset(url)
    tables0, wal0 = await _tables(url), await _wal(url)
    done = await _drive(port, pattern, SIZES.spread, turns)
    await _drained(url)
    await asyncio.sleep(12)  # backends flush their table statistics when idle, 10 s later at most
    tables1, wal1 = await _tables(url), await _wal(url)
    statements = await _statements(url)
    sizes = await _query(url, "SELECT kind, count(*) AS n, sum(bytes) AS bytes FROM bench_outbox_bytes GROUP BY kind")
    rows = {}
    for table, (i1, u1, d1) in tables1.items():
        if table == "bench_outbox_bytes":
            continue
        i0, u0, d0 = tables0.get(table, (0, 0, 0))
        if (i1 - i0, u1 - u0, d1 - d0) != (0, 0, 0):
            name = "message (its partitions)" if re.fullmatch(r"message_p\d+", table) else table
            seen = rows.setdefault(name, {"inserted": 0.0, "updated": 0.0, "deleted": 0.0})
            seen["inserted"] += (i1 - i0) / done
            seen["updated"] += (u1 - u0) / done
            seen["deleted"] += (d1 - d0) / done
    return {
        "sends": done,
        "rows": rows,
        "wal_bytes": (wal1 - wal0) / done,
        "outbox": {r["kind"]: {"rows": r["n"] / done, "bytes": r["bytes"] / r["n"]} for r in sizes},
        "statements": [
            {
                "query": s["query"][:160],
                "toplevel": s["toplevel"],
                "per_send": s["calls"] / done,
                "rows_per_call": s["rows"] / s["calls"] if s["calls"] else 0,
                "wal_bytes_per_send": float(s["wal_bytes"]) / done,
                "mean_ms": s["mean_exec_time"],
            }
            for s in statements
            if s["calls"] / done >= 0.001
        ],
    }


def _send_cpu(server: Server, pg: Postgres, url: str, workdir: Path, rounds: int, seconds: float) -> dict:
    """Server and PostgreSQL CPU per send under wrk, send_spread (the conversation's first member
    sends: one outbox row a send) against send_pair (either member, at random: the other member's
    send after one's own writes read.updated too), segments alternating in the same minutes."""
    segments: dict[str, list[dict]] = {"send_spread": [], "send_pair": []}
    for name in segments:  # warm-up
        httpload.run(server.port, Scenario(name, SIZES), workdir, 2)
    for round_ in range(rounds):
        for name in ("send_spread", "send_pair") if round_ % 2 == 0 else ("send_pair", "send_spread"):
            asyncio.run(_query(url, "TRUNCATE bench_outbox_bytes"))
            user0, sys0 = _cpu(server)
            pg0 = pg.cpu_seconds()
            load = httpload.run(server.port, Scenario(name, SIZES), workdir, seconds)
            user1, sys1 = _cpu(server)
            pg1 = pg.cpu_seconds()
            kinds = asyncio.run(_query(url, "SELECT kind, count(*) AS n FROM bench_outbox_bytes GROUP BY kind"))
            rows = sum(r["n"] for r in kinds)
            segments[name].append(
                {
                    "sends": load["ok"],
                    "rps": load["rps"],
                    "outbox_rows": rows / load["ok"],
                    "chatgql_ms": 1000 * (user1 - user0 + sys1 - sys0) / load["ok"],
                    "postgres_ms": 1000 * (pg1 - pg0) / load["ok"],
                }
            )
    out = {}
    for name, segs in segments.items():
        out[name] = {
            key: statistics.median(s[key] for s in segs) for key in ("chatgql_ms", "postgres_ms", "rps", "outbox_rows")
        }
        for key in ("chatgql_ms", "postgres_ms", "rps"):
            out[name][key + "_spread"] = max(s[key] for s in segs) - min(s[key] for s in segs)
        out[name]["segments"] = segs
    return out


def _inbox(
    server: Server, pg: Postgres, url: str, workdir: Path, seconds: float, rounds: int, profile: Path | None
) -> dict:
    scenario = Scenario("inbox", SIZES)
    httpload.run(server.port, scenario, workdir, 2)  # warm-up
    asyncio.run(_reset(url))
    segments = []
    for _ in range(rounds):
        user0, sys0 = _cpu(server)
        pg0 = pg.cpu_seconds()
        load = httpload.run(server.port, scenario, workdir, seconds)
        user1, sys1 = _cpu(server)
        pg1 = pg.cpu_seconds()
        segments.append(
            {
                "pages": load["ok"],
                "rps": load["rps"],
                "chatgql_ms": 1000 * (user1 - user0 + sys1 - sys0) / load["ok"],
                "postgres_ms": 1000 * (pg1 - pg0) / load["ok"],
            }
        )
    pages = sum(s["pages"] for s in segments)
    statements = [
        {
            "query": s["query"][:200],
            "per_page": s["calls"] / pages,
            "mean_ms": s["mean_exec_time"],
            "ms_per_page": s["total_exec_time"] / pages,
        }
        for s in asyncio.run(_statements(url))
        if s["calls"] / pages >= 0.01
    ]
    out = {
        "segments": segments,
        "pages": pages,
        "chatgql_ms": statistics.median(s["chatgql_ms"] for s in segments),
        "postgres_ms": statistics.median(s["postgres_ms"] for s in segments),
        "statements": statements,
    }
    if profile is not None and profiles.pyspy_path():
        recorder = profiles.Recorder(server.pid, seconds, profile).start()
        recorder.attached()
        httpload.run(server.port, scenario, workdir, seconds)
        recorder.wait()
        if profile.exists():
            summary = profiles.summarize(profile.read_text())
            out["profile"] = {
                "samples": summary["samples"],
                "by_component": {k: v["share"] for k, v in summary["by_component"].items()},
                "top_leaves": summary["top_leaves"],
            }
    return out


def run(sends: int, inbox_seconds: float, rounds: int, workers: int, report: Path, profile: bool) -> dict:
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-accounting-"))
    workdir = scratch / "work"
    workdir.mkdir()
    pg = server = None
    results: dict = {"workers": workers, "sizes": {"spread": SIZES.spread}}
    try:
        pg = _start_postgres(scratch)
        server = Server(pg.url, scratch, None, workers=workers)
        server.env["PYTHONPATH"] = str(REPO / "src")
        server.env["CHATGQL_MIGRATE_ON_START"] = "true"
        server.spawn()
        server.wait_ready()

        async def prepare() -> None:
            conn = await asyncpg.connect(_plain_url(pg.url))
            try:
                await layout.seed(conn, SIZES)
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                await conn.execute(TRACE_SQL)
            finally:
                await conn.close()

        asyncio.run(prepare())
        for pattern in ("plain", "reply"):
            results[pattern] = asyncio.run(_send_pattern(server.port, pg.url, pattern, sends))
            log(f"accounting {pattern}: {results[pattern]['outbox']}")
        results["send_cpu"] = _send_cpu(server, pg, pg.url, workdir, rounds * 2, inbox_seconds)
        log(f"accounting send cpu: { ({k: round(v['chatgql_ms'], 3) for k, v in results['send_cpu'].items()}) }")
        stacks = scratch / "inbox-profile.txt" if profile else None
        results["inbox"] = _inbox(server, pg, pg.url, workdir, inbox_seconds, rounds, stacks)
        log(
            f"accounting inbox: chatgql {results['inbox']['chatgql_ms']:.3f} ms, postgres {results['inbox']['postgres_ms']:.3f} ms a page"
        )
    finally:
        if server is not None:
            server.stop()
        if pg is not None:
            pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    out = REPO / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "accounting.json").write_text(json.dumps(results, indent=2, default=str))
    text = _report(results)
    report.write_text(text)
    print(text)
    return results


def _report(r: dict) -> str:
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "# Accounting: what a send writes, and the inbox page on both sides (`python -m bench.accounting`)",
        "",
        f"Tree {head}; `chatgql serve` with {r['workers']} worker(s), relay on, in-process bus; "
        f"{r['sizes']['spread']:,} DIRECT conversations. Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
    ]
    for pattern, title in (
        ("plain", "a plain send (the sender had read everything)"),
        ("reply", "a reply (the sender had not marked the other's message read)"),
    ):
        p = r[pattern]
        lines += [f"## Per send: {title}, {p['sends']:,} sends", ""]
        lines += ["| outbox rows by type | rows a send | bytes a row |", "|---|---|---|"]
        for kind, v in sorted(p["outbox"].items()):
            lines.append(f"| {kind} | {v['rows']:.2f} | {v['bytes']:.0f} |")
        lines += ["", "| table | inserted | updated | deleted |", "|---|---|---|---|"]
        for table, v in sorted(p["rows"].items()):
            lines.append(f"| {table} | {v['inserted']:.2f} | {v['updated']:.2f} | {v['deleted']:.2f} |")
        lines += ["", f"WAL: {p['wal_bytes']:,.0f} bytes a send.", ""]
        lines += ["| statement | top level | calls a send | rows a call | mean ms |", "|---|---|---|---|---|"]
        for s in p["statements"]:
            q = s["query"].replace("|", "\\|")
            lines.append(
                f"| `{q}` | {'yes' if s['toplevel'] else 'nested'} | {s['per_send']:.3f} | {s['rows_per_call']:.2f} | {s['mean_ms']:.3f} |"
            )
        lines.append("")
    c = r["send_cpu"]
    lines += [
        "## What the second outbox row costs: send_spread against send_pair, same run",
        "",
        f"wrk ({SIZES.clients} connections), {len(c['send_spread']['segments'])} segments a side alternating; "
        "send_spread: the conversation's first member sends (the benchmark's send figure); send_pair: either "
        "member at random, so about half the sends follow the other member's and write read.updated too. "
        "Per send, medians of the segments (spread: max - min); the relay's drain runs during the segments.",
        "",
        "| figure | outbox rows a send | chatgql ms | spread | PostgreSQL ms | spread | sends/s | spread |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in ("send_spread", "send_pair"):
        v = c[name]
        lines.append(
            f"| {name} | {v['outbox_rows']:.2f} | {v['chatgql_ms']:.3f} | {v['chatgql_ms_spread']:.3f} | "
            f"{v['postgres_ms']:.3f} | {v['postgres_ms_spread']:.3f} | {v['rps']:,.0f} | {v['rps_spread']:,.0f} |"
        )
    lines.append("")
    i = r["inbox"]
    lines += [
        f"## The inbox page ({i['pages']:,} pages)",
        "",
        f"Per page, medians of {len(i['segments'])} rounds: chatgql {i['chatgql_ms']:.3f} ms of CPU, PostgreSQL "
        f"{i['postgres_ms']:.3f} ms (its whole process tree). Rounds: "
        + "; ".join(
            f"{s['chatgql_ms']:.3f} / {s['postgres_ms']:.3f} ms at {s['rps']:.0f} pages/s" for s in i["segments"]
        )
        + ".",
        "",
        "| statement | calls a page | mean ms | ms a page |",
        "|---|---|---|---|",
    ]
    for s in i["statements"]:
        q = s["query"].replace("|", "\\|")
        lines.append(f"| `{q}` | {s['per_page']:.2f} | {s['mean_ms']:.3f} | {s['ms_per_page']:.3f} |")
    if "profile" in i:
        p = i["profile"]
        lines += ["", f"chatgql's profile (py-spy, {p['samples']:,} samples; self time by leaf package):", ""]
        lines += ["| component | share |", "|---|---|"]
        for k, v in p["by_component"].items():
            lines.append(f"| {k} | {100 * v:.1f}% |")
        lines += ["", "| leaf function | file | share |", "|---|---|---|"]
        for leaf in p["top_leaves"]:
            lines.append(f"| {leaf['function']} | {Path(leaf['file']).name} | {100 * leaf['share']:.1f}% |")
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.accounting", description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=4_000, help="sends per pattern (default 4,000)")
    parser.add_argument("--inbox-seconds", type=float, default=5.0, help="length of one inbox round (default 5 s)")
    parser.add_argument("--rounds", type=int, default=4, help="inbox rounds (default 4)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--no-profile", action="store_true", help="no py-spy round for the inbox")
    parser.add_argument("--report", type=Path, default=REPO / "bench" / "results" / "accounting.md")
    args = parser.parse_args()
    run(args.sends, args.inbox_seconds, args.rounds, args.workers, args.report, not args.no_profile)


if __name__ == "__main__":
    main()
