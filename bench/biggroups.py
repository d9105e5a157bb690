"""biggroups: a message to a 100,000-member group with 3,000 subscribed members, and markRead's SQL there.

`python -m bench.biggroups` (bounded: about a minute of load) starts an embedded PostgreSQL and a
`chatgql serve` process (in-process bus, no Kafka), builds two groups through the API:

- big: 100,000 members, added with addMembers in batches of 1,000;
- baseline: 3,000 members (the same 3,000 users that subscribe, all of its members);

opens 3,000 websockets (one per subscribed member, spread over client processes), each with a
messageNew subscription on each group, and then, alternately, sends ROUNDS messages to each group:
time from the send request's start until the last of the 3,000 subscribers has the event
(CLOCK_MONOTONIC, one clock machine-wide). Then the SQL statements per markRead in each group,
counted by PostgreSQL itself (log_statement = all for the duration, the server's log read back),
including the statements the event's delivery runs (membership, the coalesced read event).

Writes bench/results/biggroups.md. Target: last delivery median < 250 ms in the big group;
markRead O(1) statements (the same count in both groups).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import re
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson

from chatgql import db

from .infra import REPO, CpuMeter, Postgres, Server, die_with_parent, log, queue_get, raise_fd_limit, use_uvloop
from .queries import read_body, send_body, token
from .rawhttp import Pool

BIG, BASELINE, SUBSCRIBED, BATCH = 100_000, 3_000, 3_000, 1_000
CLIENT_PROCS, ROUNDS, READS = 3, 5, 40
OWNER = 1  # users 1..SUBSCRIBED subscribe; they are members of both groups
SUB = "subscription($c: ID) { messageNew(conversationId: $c) { conversationId seq } }"
TARGET_MS = 250.0


def _client(url: str, user_ids: list[int], conversations: list[int], stop, out) -> None:
    """One client process: a websocket per user, a subscription per conversation on each."""
    die_with_parent()
    use_uvloop()
    from .ws import open_many, receive

    async def main() -> None:
        sockets, errors = await open_many(url, [token(u) for u in user_ids], SUB, {"c": str(conversations[0])})
        for ws in sockets:  # the second subscription on the same socket
            await ws.send(
                orjson.dumps(
                    {
                        "id": "2",
                        "type": "subscribe",
                        "payload": {"query": SUB, "variables": {"c": str(conversations[1])}},
                    }
                ).decode()
            )
        out.put(("ready", len(sockets), errors[:3]))
        times: dict[tuple[str, int], list[int]] = {}
        n = len(sockets)

        def on_event(now: int, data: dict) -> None:
            event = data["messageNew"]
            key = (event["conversationId"], event["seq"])
            got = times.setdefault(key, [])
            got.append(now)
            if len(got) == n:
                out.put(("round", key, times.pop(key)))

        tasks = [asyncio.create_task(receive(ws, on_event)) for ws in sockets]
        while not stop.is_set():
            await asyncio.sleep(0.05)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)

    try:
        asyncio.run(main())
    except Exception as error:  # noqa: BLE001
        out.put(("error", repr(error), None))


async def _gql(http: httpx.AsyncClient, server: Server, user: int, query: str, variables: dict) -> dict:
    r = await http.post(
        server.base + "/graphql",
        json={"query": query, "variables": variables},
        headers={"authorization": f"Bearer {token(user)}"},
    )
    body = r.json()
    if r.status_code != 200 or body.get("errors"):
        raise RuntimeError(f"{query[:60]}: HTTP {r.status_code} {str(body)[:300]}")
    return body["data"]


async def _build(http: httpx.AsyncClient, server: Server, members: int) -> tuple[int, float]:
    """A group of `members` (users 1..members), created and then filled with addMembers batches."""
    t0 = time.monotonic()
    data = await _gql(
        http,
        server,
        OWNER,
        'mutation($m: [ID!]!) { createGroup(title: "bench", memberIds: $m) { id } }',
        {"m": [str(u) for u in range(2, BATCH + 1)]},
    )
    cid = int(data["createGroup"]["id"])
    for start in range(BATCH + 1, members + 1, BATCH):
        batch = [str(u) for u in range(start, min(start + BATCH, members + 1))]
        await _gql(
            http,
            server,
            OWNER,
            "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id } }",
            {"c": str(cid), "u": batch},
        )
    count = await _gql(http, server, OWNER, "query($c: ID!) { conversation(id: $c) { memberCount } }", {"c": str(cid)})
    assert count["conversation"]["memberCount"] == members, count
    return cid, time.monotonic() - t0


async def _rounds(server: Server, procs, out, groups: dict[str, int]) -> dict[str, list[dict]]:
    pool = await Pool("127.0.0.1", server.port, 2).open()
    sender = f"Bearer {token(OWNER)}"
    results: dict[str, list[dict]] = {name: [] for name in groups}
    try:
        for r in range(ROUNDS):
            for name, cid in groups.items():
                await asyncio.sleep(0.5)
                t0 = time.monotonic_ns()
                status, payload = await pool.post(send_body(cid, f"round {r}"), sender)
                ack = time.monotonic_ns()
                if status != 200 or b'"errors"' in payload:
                    raise RuntimeError(f"send failed: HTTP {status} {payload[:300]!r}")
                seq = orjson.loads(payload)["data"]["sendMessage"]["message"]["seq"]
                received: list[int] = []
                reports = 0
                while reports < len(procs):
                    kind, key, times = await asyncio.to_thread(queue_get, out, procs, 60, f"{name} round {r}")
                    if kind == "error":
                        raise RuntimeError(f"client failed: {key}")
                    if kind == "round" and tuple(key) == (str(cid), seq):
                        reports += 1
                        received += times
                lat = [t - t0 for t in received]
                results[name].append(
                    {
                        "recipients": len(lat),
                        "ack_ms": round((ack - t0) / 1e6, 1),
                        "first_ms": round(min(lat) / 1e6, 1),
                        "median_ms": round(statistics.median(lat) / 1e6, 1),
                        "last_ms": round(max(lat) / 1e6, 1),
                    }
                )
                log(f"{name} round {r}: last of {len(lat)} after {results[name][-1]['last_ms']} ms")
    finally:
        pool.close()
    return results


# a logged statement: its first line, then its continuation lines (tab-indented)
_STATEMENT = re.compile(r"LOG:\s+(?:statement|execute [^:]*):\s+(.*(?:\n\t.*)*)")


async def _statements_per_read(database: db.Database, server: Server, pgdata: Path, cid: int) -> dict:
    """markRead READS times (different members) with PostgreSQL logging every statement; the log read back."""
    log_file = pgdata / "log"
    async with database.connection() as conn:
        await conn.execute("ALTER SYSTEM SET log_statement = 'all'")
        await conn.execute("SELECT pg_reload_conf()")
        seq = await conn.fetchval("SELECT last_seq FROM conversation WHERE id = $1", cid)
    await asyncio.sleep(1.0)
    start = log_file.stat().st_size
    pool = await Pool("127.0.0.1", server.port, 2).open()
    try:
        for user in range(2, 2 + READS):
            status, payload = await pool.post(read_body(cid, seq), f"Bearer {token(user)}")
            if status != 200 or b'"advanced":true' not in payload:
                raise RuntimeError(f"markRead failed: HTTP {status} {payload[:300]!r}")
        await asyncio.sleep(2.5)  # the relay, the deliveries and the last coalesced event
    finally:
        pool.close()
    with open(log_file, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    async with database.connection() as conn:
        await conn.execute("ALTER SYSTEM RESET log_statement")
        await conn.execute("SELECT pg_reload_conf()")
    kinds: Counter[str] = Counter()
    for m in _STATEMENT.finditer(text):
        sql = " ".join(m.group(1).split())
        if sql.upper() in ("BEGIN", "COMMIT", "ROLLBACK") or sql.startswith(("BEGIN", "SET ", "RESET")):
            kinds["BEGIN/COMMIT"] += 1
        elif sql.startswith("SELECT pg_try_advisory_lock"):
            kinds["relay: leader lock"] += 1
        elif "UPDATE conversation_member" in sql:
            kinds["markRead: watermark + outbox (one statement)"] += 1
        elif "outbox" in sql:
            kinds["relay: outbox read/delete"] += 1
        elif "conversation_member" in sql:
            kinds["event path: " + sql[:70]] += 1
        else:
            kinds["other: " + sql[:70]] += 1
    total = sum(kinds.values())
    return {"reads": READS, "statements": total, "per_read": round(total / READS, 2), "kinds": dict(kinds)}


def _report(out: dict) -> str:
    lines = [
        "# Big groups benchmark (`python -m bench.biggroups`)",
        "",
        f"Measured {out['when']} on this machine ({out['cores']} cores, shared with other work: see CPU).",
        "One `chatgql serve` process (in-process bus, no Kafka), embedded PostgreSQL, "
        f"{CLIENT_PROCS} websocket client processes.",
        "",
        f"- big group: {BIG:,} members, built with {BIG // BATCH} createGroup/addMembers calls of {BATCH:,} ids "
        f"in {out['build_big_s']:.1f} s ({out['build_big_s'] / (BIG // BATCH) * 1000:.0f} ms a call);",
        f"- baseline: a {BASELINE:,}-member group, all of whose members are the same subscribers;",
        f"- {out['subscribed']:,} members subscribed (one websocket each, a messageNew subscription per group "
        f"on it), opened in {out['open_s']:.1f} s.",
        "",
        f"## A message: send request start -> the last of the {out['subscribed']:,} subscribers has it",
        "",
        "| group | rounds | last delivery median (ms) | last max | median delivery | ack median |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, rounds in out["rounds"].items():
        lasts = [r["last_ms"] for r in rounds]
        lines.append(
            f"| {name} | {len(rounds)} | **{statistics.median(lasts):.1f}** | {max(lasts):.1f} | "
            f"{statistics.median(r['median_ms'] for r in rounds):.1f} | {statistics.median(r['ack_ms'] for r in rounds):.1f} |"
        )
    big_last = statistics.median(r["last_ms"] for r in out["rounds"]["big"])
    verdict = "met" if big_last < TARGET_MS else "NOT met"
    lines += [
        "",
        f"Target: last delivery median < {TARGET_MS:.0f} ms in the 100,000-member group: **{verdict}** "
        f"({big_last:.1f} ms).",
        "",
        "## SQL statements per markRead (PostgreSQL's own log, log_statement = all)",
        "",
        f"{READS} markRead calls by different members, each advancing; counted: every statement any "
        "connection ran meanwhile (the call, the relay, the event's delivery, the coalesced readUpdated).",
        "",
        "| group | statements per markRead | what |",
        "| --- | --- | --- |",
    ]
    for name, s in out["reads"].items():
        what = "; ".join(f"{k}: {v}" for k, v in sorted(s["kinds"].items()))
        lines.append(f"| {name} | **{s['per_read']}** | {what} |")
    lines += ["", "CPU over the delivery rounds (seconds):", "", f"    {out['cpu']}", ""]
    return "\n".join(lines)


async def main() -> None:
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-biggroups-"))
    pg = Postgres.start(scratch / "pg")
    server: Server | None = None
    procs: list = []
    stop = None
    try:
        await db.upgrade(pg.url)
        server = Server(pg.url, scratch, None)
        server.env.update(
            CHATGQL_MAX_GROUP_MEMBERS=str(BIG),
            CHATGQL_RATE_ADD_MEMBERS_PER_SECOND="0",
            CHATGQL_RATE_READ_PER_SECOND="0",
            CHATGQL_RATE_SEND_PER_SECOND="0",
            CHATGQL_RATE_GROUP_PER_SECOND="0",
            CHATGQL_MAX_GROUPS_PER_DAY="0",
        )
        server.spawn()
        server.wait_ready()
        async with httpx.AsyncClient(timeout=60) as http:
            big, build_big = await _build(http, server, BIG)
            baseline, _ = await _build(http, server, BASELINE)
        log(f"groups built: big {big} in {build_big:.1f} s, baseline {baseline}")
        database = await db.Database(pg.url, max_size=2).open()
        try:
            async with database.connection() as conn:
                await conn.execute("VACUUM ANALYZE conversation_member")

            users = list(range(1, SUBSCRIBED + 1))
            ctx = mp.get_context("spawn")
            stop, out = ctx.Event(), ctx.Queue()
            procs = [
                ctx.Process(target=_client, args=(server.ws_url, users[i::CLIENT_PROCS], [big, baseline], stop, out))
                for i in range(CLIENT_PROCS)
            ]
            t_open = time.monotonic()
            for p in procs:
                p.start()
            opened = 0
            for _ in procs:
                kind, n, errs = await asyncio.to_thread(queue_get, out, procs, 180, "clients")
                if kind != "ready":
                    raise RuntimeError(f"client failed: {n}")
                opened += n
            for _ in range(600):
                if await asyncio.to_thread(server.active_subscriptions) >= 2 * opened:
                    break
                await asyncio.sleep(0.05)
            open_s = time.monotonic() - t_open
            log(f"{opened} subscribers in {open_s:.1f} s")
            meter = CpuMeter({"chatgql": server.cpu_seconds, "postgres": pg.cpu_seconds}).start()
            rounds = await _rounds(server, procs, out, {"big": big, "baseline": baseline})
            cpu = meter.stop()
            reads = {
                "big": await _statements_per_read(database, server, Path(pg.server.pgdata), big),
                "baseline": await _statements_per_read(database, server, Path(pg.server.pgdata), baseline),
            }
        finally:
            await database.close()
        result = {
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cores": __import__("os").cpu_count(),
            "build_big_s": build_big,
            "subscribed": opened,
            "open_s": open_s,
            "rounds": rounds,
            "reads": reads,
            "cpu": cpu,
        }
        report = _report(result)
        (REPO / "bench" / "results" / "biggroups.md").write_text(report)
        print(report)
    finally:
        if stop is not None:
            stop.set()
        for p in procs:
            p.join(20)
            if p.is_alive():
                p.kill()
        if server is not None:
            server.stop()
        pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
