"""gc_soak: the garbage collector's pauses under a modest, steady live load.

`chatgql serve` (in-process bus, or Kafka with --kafka) holds 1,000 websockets,
each with two subscriptions (messageNew and readUpdated over all of its user's
conversations: 2,000 in all), while a sender posts `sendMessage` at 35/s to
groups of 10 of those users and, after each acknowledgement, another member of
that group marks the message read (`markRead`, 35/s): every message and every
watermark move is delivered to 10 websockets. After the soak the server's
/metrics give the longest collector pause since it started
(chatgql_gc_pause_longest_seconds) and the pause histogram per generation;
HTTP and delivery latency (send start -> the last member has the message) are
measured alongside, since a collector pause is latency for both.

    python -m bench.gcsoak [--seconds 60] [--sides baseline,product] [--kafka] [--keep]

Two soaks on fresh servers, same database, one after the other: `baseline`
runs the collector policy chatgql had before (BASELINE_ENV: start-up objects
frozen, young threshold 10,000, nothing frozen later), `product` the
settings' defaults (collector.py). After each soak every client leaves and
the server's frozen objects and RSS are read again: frozen objects are freed
by reference counting only, so they must come back down. Runs alone (its own
scratch PostgreSQL, seeded with SQL), about three minutes for both sides;
results in bench/out/gc_soak.json, the report in bench/results/gcsoak.md. A sitecustomize on PYTHONPATH may add
diagnostics to the server process (it inherits the environment).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import orjson

from .infra import (
    CpuMeter,
    Kafka,
    Postgres,
    Server,
    die_with_parent,
    dump_json,
    log,
    process_cpu,
    queue_get,
    raise_fd_limit,
    use_uvloop,
)
from .live import stats_ms
from .queries import token
from .rawhttp import Pool

USER0, CID0 = 9_000_000, 900_000  # users USER0 + 1 .. USER0 + users; groups CID0 + 1 .. CID0 + groups
GROUP_SIZE = 10
SUB_MESSAGES = "subscription { messageNew { conversationId seq message { senderId body createdAt } } }"
SUB_READS = "subscription { readUpdated { conversationId userId lastReadSeq } }"
SEND = (
    "mutation Send($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, body: $b)"
    " { duplicate message { seq createdAt } } }"
)
READ = (
    "mutation Read($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq advanced unreadCount } }"
)


async def seed(conn, users: int) -> None:
    groups = users // GROUP_SIZE
    await conn.execute(
        """INSERT INTO conversation (id, type, title, created_at)
           SELECT $1 + g, 'GROUP', 'soak ' || g, now() - interval '1 day' FROM generate_series(1, $2::int) g""",
        CID0,
        groups,
    )
    await conn.execute(
        """INSERT INTO conversation_member (conversation_id, user_id, role)
           SELECT $1 + 1 + (u - 1) / $4, $2 + u, 'MEMBER' FROM generate_series(1, $3::int) u""",
        CID0,
        USER0,
        users,
        GROUP_SIZE,
    )
    await conn.execute(
        "SELECT setval(pg_get_serial_sequence('conversation', 'id'), (SELECT max(id) FROM conversation))"
    )
    await conn.execute("VACUUM ANALYZE")


# --------------------------------------------------------------------- subscribers (child processes)


def _client(url: str, user_ids: list[int], stop, out) -> None:
    die_with_parent()
    use_uvloop()
    import websockets

    async def open_one(uid: int):
        for attempt in range(3):
            try:
                ws = await websockets.connect(
                    url,
                    subprotocols=["graphql-transport-ws"],
                    compression=None,
                    ping_interval=None,
                    max_size=None,
                    open_timeout=60,
                    proxy=None,
                )
                await ws.send(
                    orjson.dumps(
                        {"type": "connection_init", "payload": {"Authorization": f"Bearer {token(uid)}"}}
                    ).decode()
                )
                frame = orjson.loads(await asyncio.wait_for(ws.recv(), 60))
                if frame["type"] != "connection_ack":
                    raise RuntimeError(f"refused: {frame}")
                for op, query in (("m", SUB_MESSAGES), ("r", SUB_READS)):
                    await ws.send(orjson.dumps({"id": op, "type": "subscribe", "payload": {"query": query}}).decode())
                return ws
            except Exception:  # noqa: BLE001 - retried, then reported
                if attempt == 2:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))

    async def main() -> None:
        gate = asyncio.Semaphore(64)

        async def gated(uid: int):
            async with gate:
                return await open_one(uid)

        sockets = await asyncio.gather(*(gated(u) for u in user_ids))
        out.put(("ready", len(sockets)))
        delays: list[int] = []  # message delivery, per receiving socket: receive - send start (ns)
        counts = {"next": 0, "reads": 0, "errors": 0}

        async def read(ws) -> None:
            try:
                async for raw in ws:
                    now = time.monotonic_ns()
                    frame = orjson.loads(raw)
                    if frame.get("type") == "next":
                        data = frame["payload"].get("data") or {}
                        counts["next"] += 1
                        if "messageNew" in data:
                            delays.append(now - int(data["messageNew"]["message"]["body"]))
                        else:
                            counts["reads"] += 1
                    elif frame.get("type") == "ping":
                        await ws.send('{"type":"pong"}')
                    elif frame.get("type") in ("error", "complete"):
                        counts["errors"] += 1
            except websockets.ConnectionClosed:
                pass

        tasks = [asyncio.create_task(read(ws)) for ws in sockets]
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the last deliveries
        for t in tasks:
            t.cancel()
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
        out.put(("done", (delays, counts)))

    try:
        asyncio.run(main())
    except Exception as error:  # noqa: BLE001 - reported to the parent
        out.put(("error", repr(error)))


# --------------------------------------------------------------------- the soak


def gc_figures(metrics: dict[str, float]) -> dict:
    """Collector pauses from a /metrics reading: the longest, and per generation count, sum and histogram."""
    out: dict = {"longest_ms": round(1000 * metrics.get("chatgql_gc_pause_longest_seconds", 0.0), 1)}
    for gen in ("0", "1", "2"):
        buckets = {}
        for name, value in metrics.items():
            prefix = f'chatgql_gc_pause_seconds_bucket{{generation="{gen}",le="'
            if name.startswith(prefix):
                buckets[name[len(prefix) : -2]] = int(value)
        out[f"gen{gen}"] = {
            "count": int(metrics.get(f'chatgql_gc_pause_seconds_count{{generation="{gen}"}}', 0.0)),
            "seconds": round(metrics.get(f'chatgql_gc_pause_seconds_sum{{generation="{gen}"}}', 0.0), 4),
            "le": buckets,
        }
    return out


async def _load(server: Server, users: int, rate: float, seconds: float) -> dict:
    """sendMessage at `rate`/s, each followed by another member's markRead of it; latencies in ms."""
    pool = await Pool("127.0.0.1", server.port, 32).open()
    rng = random.Random(7)
    groups = users // GROUP_SIZE
    send_ns: list[int] = []
    read_ns: list[int] = []
    failures: list[str] = []
    tasks = []

    async def one() -> None:
        g = rng.randint(1, groups)
        members = [USER0 + (g - 1) * GROUP_SIZE + j for j in range(1, GROUP_SIZE + 1)]
        sender, reader = rng.sample(members, 2)
        try:
            start = time.monotonic_ns()
            body = orjson.dumps(
                {"query": SEND, "variables": {"c": str(CID0 + g), "m": str(uuid.uuid4()), "b": str(start)}}
            )
            status, payload = await pool.post(body, f"Bearer {token(sender)}")
            send_ns.append(time.monotonic_ns() - start)
            answer = orjson.loads(payload)
            if status != 200 or answer.get("errors"):
                raise RuntimeError(f"send: HTTP {status} {payload[:200]!r}")
            seq = answer["data"]["sendMessage"]["message"]["seq"]
            start = time.monotonic_ns()
            body = orjson.dumps({"query": READ, "variables": {"c": str(CID0 + g), "s": seq}})
            status, payload = await pool.post(body, f"Bearer {token(reader)}")
            read_ns.append(time.monotonic_ns() - start)
            if status != 200 or b'"errors"' in payload:
                raise RuntimeError(f"read: HTTP {status} {payload[:200]!r}")
        except Exception as error:  # noqa: BLE001 - counted and reported
            failures.append(repr(error))

    t0 = time.monotonic_ns()
    for i in range(int(rate * seconds)):
        delay = (t0 + int(i * 1e9 / rate) - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    pool.close()
    return {
        "sends": len(send_ns),
        "send_ms": stats_ms(send_ns),
        "mark_read_ms": stats_ms(read_ns),
        "failures": len(failures),
        "first_failure": failures[0] if failures else None,
    }


CONVERSATION_FIELDS = (
    "id",
    "type",
    "title",
    "lastSeq",
    "lastMessageAt",
    "createdAt",
    "lastReadSeq",
    "unreadCount",
    "memberCount",
    "members { userId role }",
    "lastMessage { seq body createdAt }",
)


def distinct_document(i: int, rng: random.Random) -> str:
    """A document no client sent before (a fuzzer, many client versions): aliased selections of
    the inbox and the viewer, about a kilobyte; every fourth one asks for a field that does not exist."""
    parts = []
    for k in range(rng.randint(3, 6)):
        fields = " ".join(rng.sample(CONVERSATION_FIELDS, rng.randint(3, 8)))
        first = rng.randint(1, 5)
        parts.append(f"i{i}_{k}: inbox(first: {first}) {{ nodes {{ {fields} }} pageInfo {{ hasNextPage }} }}")
    parts.append(f"v{i}: viewer {{ userId totalUnread unreadConversations }}")
    if i % 4 == 0:
        parts.append(f"nope{i}: viewer {{ missing{i} }}")
    return "query Fuzz%d { %s }" % (i, " ".join(parts))


async def documents(server: Server, users: int, clients: int, seconds: float) -> dict:
    """`clients` fuzzers, each POSTing a new document as soon as the last one is answered, for
    `seconds`; the collector's pauses during it (from the histogram)."""
    pool = await Pool("127.0.0.1", server.port, clients).open()
    rng = random.Random(11)
    before = gc_figures(await asyncio.to_thread(server.metrics))
    latencies: list[int] = []
    outcomes = {"answered": 0, "refused": 0, "failed": 0}
    counter = iter(range(10**9))
    deadline = time.monotonic() + seconds

    async def fuzzer() -> None:
        while time.monotonic() < deadline:
            i = next(counter)
            body = orjson.dumps({"query": distinct_document(i, rng)})
            start = time.monotonic_ns()
            try:
                status, payload = await pool.post(body, f"Bearer {token(USER0 + 1 + i % users)}")
                latencies.append(time.monotonic_ns() - start)
                outcomes["refused" if b'"errors"' in payload else "answered"] += 1
            except Exception:  # noqa: BLE001 - counted
                outcomes["failed"] += 1

    await asyncio.gather(*(fuzzer() for _ in range(clients)))
    pool.close()
    after = gc_figures(await asyncio.to_thread(server.metrics))
    return {
        "clients": clients,
        "seconds": seconds,
        **outcomes,
        "http_ms": stats_ms(latencies),
        "gc_during": _pauses_between(before, after),
        "frozen_objects_at_end": int((await asyncio.to_thread(server.metrics)).get("chatgql_gc_frozen_objects", 0)),
    }


def _pauses_between(before: dict, after: dict) -> dict:
    """Collections per generation between two readings, their total, and the histogram bucket
    the longest of them fell in (the gauge keeps the longest since the process started)."""
    out = {}
    for g in ("gen0", "gen1", "gen2"):
        b, a = before[g], after[g]
        longest_le = None
        previous = 0
        for le, count in sorted(a["le"].items(), key=lambda kv: float(kv[0])):
            new = count - b["le"].get(le, 0)
            if new > previous:
                longest_le = le
            previous = new
        out[g] = {
            "collections": a["count"] - b["count"],
            "pause_ms": round(1000 * (a["seconds"] - b["seconds"]), 1),
            "longest_at_most_s": longest_le,
        }
    return out


async def soak(server: Server, users: int = 1000, rate: float = 35.0, seconds: float = 60.0, procs_n: int = 2) -> dict:
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    ids = [USER0 + u for u in range(1, users + 1)]
    idle = await asyncio.to_thread(server.metrics)
    idle_rss = server.rss()
    procs = [
        ctx.Process(target=_client, args=(server.ws_url, ids[i::procs_n], stop, out), daemon=True)
        for i in range(procs_n)
    ]
    t_open = time.monotonic()
    for p in procs:
        p.start()
    try:
        opened = 0
        for _ in procs:
            kind, n = await asyncio.to_thread(queue_get, out, procs, 300, "soak clients")
            if kind != "ready":
                raise RuntimeError(f"soak client failed: {n}")
            opened += n
        for _ in range(600):
            active = await asyncio.to_thread(server.active_subscriptions)
            if active >= 2 * opened:
                break
            await asyncio.sleep(0.1)
        log(f"gc_soak: {opened} websockets, {active} subscriptions in {time.monotonic() - t_open:.1f} s")
        before = gc_figures(await asyncio.to_thread(server.metrics))
        meter = CpuMeter(
            {
                "server": server.cpu_seconds,
                **{f"client{i}": (lambda pid=p.pid: process_cpu(pid)) for i, p in enumerate(procs)},
            }
        ).start()
        load = await _load(server, users, rate, seconds)
        cpu = meter.stop()
        loaded = await asyncio.to_thread(server.metrics)
        after = gc_figures(loaded)
        rss_mb = round(server.rss() / 2**20, 1)
    finally:
        stop.set()
    delays: list[int] = []
    counts = {"next": 0, "reads": 0, "errors": 0}
    for _ in procs:
        kind, data = await asyncio.to_thread(queue_get, out, procs, 60, "soak clients")
        if kind != "done":
            raise RuntimeError(f"soak client failed: {data}")
        delays += data[0]
        for k in counts:
            counts[k] += data[1][k]
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    for _ in range(100):  # every websocket gone from the server
        if await asyncio.to_thread(server.active_subscriptions) == 0:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(2.0)
    left = await asyncio.to_thread(server.metrics)
    frozen = "chatgql_gc_frozen_objects"
    during = {
        g: {
            "collections": after[g]["count"] - before[g]["count"],
            "pause_ms": round(1000 * (after[g]["seconds"] - before[g]["seconds"]), 1),
        }
        for g in ("gen0", "gen1", "gen2")
    }
    return {
        "websockets": opened,
        "subscriptions": active,
        "rate_per_s": rate,
        "seconds": seconds,
        "gc_pause_longest_ms": after["longest_ms"],
        "gc_during_soak": during,
        "gc_at_end": after,
        "http": load,
        "delivery_ms": stats_ms(delays),
        "deliveries": counts,
        "cpu": cpu,
        # memory after every client left: frozen objects are freed by reference counting only
        "frozen_objects": {
            "before_connections": int(idle.get(frozen, 0)),
            "end_of_soak": int(loaded.get(frozen, 0)),
            "after_all_disconnected": int(left.get(frozen, 0)),
        },
        "rss_mb": {
            "before_connections": round(idle_rss / 2**20, 1),
            "end_of_soak": rss_mb,
            "after_all_disconnected": round(server.rss() / 2**20, 1),
        },
        "gc_pause_longest_ms_after_disconnect": gc_figures(left)["longest_ms"],
        "gc_after_disconnect": gc_figures(left),
    }


# The collector policy chatgql ran before bench/gcsoak.py existed (start-up objects frozen,
# young threshold 10,000, nothing frozen later); the other side runs the settings' defaults.
BASELINE_ENV = {"CHATGQL_GC_FREEZE_EVERY_YOUNG": "0", "CHATGQL_GC_YOUNG_THRESHOLD": "10000"}
# Sides to choose from (--sides): the environment each server gets on top of the bench's.
REPORT = Path(__file__).resolve().parent / "results" / "gcsoak.md"
SIDES = {"baseline": BASELINE_ENV, "product": {}, "young2000": {"CHATGQL_GC_YOUNG_THRESHOLD": "2000"}}


async def main(
    seconds: float,
    use_kafka: bool,
    keep: bool,
    out_path: Path,
    users: int,
    rate: float,
    sides: list[str],
    doc_seconds: float = 30.0,
    doc_clients: int = 4,
    report_path: Path | None = None,
) -> dict:
    """One soak per side ("baseline": BASELINE_ENV, "product": defaults), each on a fresh server,
    same database, same machine, one after the other."""
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-gcsoak-"))
    pg = kafka = None
    results: dict = {
        "users": users,
        "rate_per_s": rate,
        "seconds": seconds,
        "bus": "kafka" if use_kafka else "memory",
        "doc_seconds": doc_seconds,
        "doc_clients": doc_clients,
        "baseline_env": BASELINE_ENV,
        "sides": {},
    }
    try:
        pg = await asyncio.to_thread(Postgres.start, scratch / "pg")
        from chatgql import db

        await db.upgrade(pg.url)
        conn = await asyncpg.connect(host=pg.socket_dir, user="postgres", database="postgres")
        await seed(conn, users)
        await conn.close()
        if use_kafka:
            kafka = await asyncio.to_thread(Kafka.start, scratch / "kafka")
        for side in sides:
            server = Server(pg.url, scratch, kafka)
            server.env.update(SIDES[side])
            server.spawn()
            try:
                await asyncio.to_thread(server.wait_ready)
                result = results["sides"][side] = await soak(server, users, rate, seconds)
                if doc_seconds > 0:
                    result["distinct_documents"] = await documents(server, users, doc_clients, doc_seconds)
                    end = gc_figures(await asyncio.to_thread(server.metrics))
                    result["gc_pause_longest_ms_at_end"] = end["longest_ms"]
                    d = result["distinct_documents"]
                    log(
                        f"gc_soak [{side}] distinct documents: {d['answered']} answered, {d['refused']} refused, "
                        f"HTTP p99 {d['http_ms'].get('p99')} ms; collector during it {d['gc_during']}; frozen at end "
                        f"{d['frozen_objects_at_end']}"
                    )
            finally:
                server.stop()
            g = result["gc_during_soak"]
            log(
                f"gc_soak [{side}]: longest pause {result['gc_pause_longest_ms']} ms (after the disconnects: "
                f"{result['gc_pause_longest_ms_after_disconnect']} ms); during the soak gen0 {g['gen0']}, "
                f"gen1 {g['gen1']}, gen2 {g['gen2']}; HTTP send p99 {result['http']['send_ms'].get('p99')} ms, "
                f"delivery p99 {result['delivery_ms'].get('p99')} ms max {result['delivery_ms'].get('max')} ms; "
                f"frozen {result['frozen_objects']}; machine busy {result['cpu']['machine_busy_pct']}%"
            )
        dump_json(out_path, results)
        (report_path or out_path.with_suffix(".md")).write_text(markdown(results))
        return results
    finally:
        if keep:
            log(f"scratch (server log chatgql.log): {scratch}")
        if kafka is not None:
            kafka.stop()
        if pg is not None:
            pg.stop()
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


PERCENTILES = "{p50} / {p99} / {max} ms"


def markdown(results: dict) -> str:
    """The soak's figures, side by side."""
    sides = list(results["sides"])
    rows = [
        ("websockets / subscriptions", lambda r: f"{r['websockets']:,} / {r['subscriptions']:,}"),
        (
            "**chatgql_gc_pause_longest_seconds** after the live soak (since start: connections, soak)",
            lambda r: f"**{r['gc_pause_longest_ms']} ms**",
        ),
        ("... after every client left", lambda r: f"{r['gc_pause_longest_ms_after_disconnect']} ms"),
        (
            "... after the distinct-documents phase (end of run)",
            lambda r: f"{r.get('gc_pause_longest_ms_at_end', '-')} ms",
        ),
        *[
            (
                f"live soak: gen{g} collections, total pause",
                lambda r, g=g: "{collections}, {pause_ms} ms".format(**r["gc_during_soak"][f"gen{g}"]),
            )
            for g in range(3)
        ],
        ("live soak: HTTP sendMessage p50 / p99 / max", lambda r: PERCENTILES.format(**r["http"]["send_ms"])),
        ("live soak: HTTP markRead p50 / p99 / max", lambda r: PERCENTILES.format(**r["http"]["mark_read_ms"])),
        ("live soak: delivery p50 / p99 / max", lambda r: PERCENTILES.format(**r["delivery_ms"])),
        ("live soak: deliveries (frames), errors", lambda r: "{next:,}, {errors}".format(**r["deliveries"])),
        (
            "live soak: CPU server / machine busy (2 cores = 100%)",
            lambda r: f"{r['cpu']['pct_of_one_core'].get('server')}% of a core / {r['cpu']['machine_busy_pct']}%",
        ),
        (
            "frozen objects: before connections / end of soak / all left",
            lambda r: "{before_connections:,} / {end_of_soak:,} / {after_all_disconnected:,}".format(
                **r["frozen_objects"]
            ),
        ),
        (
            "server RSS: before connections / end of soak / all left",
            lambda r: "{before_connections} / {end_of_soak} / {after_all_disconnected} MiB".format(**r["rss_mb"]),
        ),
        (
            "distinct documents: answered + refused, HTTP p99",
            lambda r: (
                (lambda d: f"{d['answered']:,} + {d['refused']:,}, {d['http_ms'].get('p99')} ms")(
                    r["distinct_documents"]
                )
                if "distinct_documents" in r
                else "-"
            ),
        ),
        *[
            (
                f"distinct documents: gen{g} collections, total pause, longest <= bucket",
                lambda r, g=g: (
                    (lambda d: f"{d['collections']}, {d['pause_ms']} ms, {d['longest_at_most_s']} s")(
                        r["distinct_documents"]["gc_during"][f"gen{g}"]
                    )
                    if "distinct_documents" in r
                    else "-"
                ),
            )
            for g in range(3)
        ],
        (
            "distinct documents: frozen objects at the end",
            lambda r: f"{r['distinct_documents']['frozen_objects_at_end']:,}" if "distinct_documents" in r else "-",
        ),
    ]
    out = [
        "# Garbage-collector soak (`python -m bench.gcsoak`)",
        "",
        f"{results['users']:,} websockets, two subscriptions each, {results['rate_per_s']:g} sendMessage/s + as many "
        f"markRead/s for {results['seconds']:g} s ({results['bus']} bus); then every client leaves; then "
        f"{results.get('doc_clients', '-')} clients send new documents back to back for "
        f"{results.get('doc_seconds', '-')} s. "
        "Sides on fresh servers, same database, one after the other. `baseline`: the collector policy before "
        f"(`{results['baseline_env']}`); `product`: the defaults (src/chatgql/runtime/collector.py). Wall-clock pauses: a busy "
        "machine stretches them (see machine busy).",
        "",
        "| | " + " | ".join(sides) + " |",
        "|---|" + "---|" * len(sides),
    ]
    for label, cell in rows:
        values = []
        for side in sides:
            try:
                values.append(cell(results["sides"][side]))
            except (KeyError, TypeError):
                values.append("-")
        out.append(f"| {label} | " + " | ".join(values) + " |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.gcsoak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--users", type=int, default=1000, help="websockets (two subscriptions each)")
    parser.add_argument("--rate", type=float, default=35.0, help="sends per second (and as many markRead)")
    parser.add_argument("--kafka", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--doc-seconds",
        type=float,
        default=30.0,
        help="then, with no websocket open, a new document per request for this long (0: skip)",
    )
    parser.add_argument("--doc-clients", type=int, default=4, help="clients sending new documents back to back")
    parser.add_argument(
        "--sides",
        default="baseline,product",
        help="which soaks to run, in order: baseline (the earlier collector policy), product "
        "(the defaults), young2000 (the defaults with a young threshold of 2,000)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "gc_soak.json")
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="markdown report (default: bench/results/gcsoak.md, or beside --out when --out is given)",
    )
    args = parser.parse_args()
    explicit_out = any(arg == "--out" or arg.startswith("--out=") for arg in sys.argv[1:])
    report = args.report or (args.out.with_suffix(".md") if explicit_out else REPORT)
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
    use_uvloop()
    sides = [x.strip() for x in args.sides.split(",") if x.strip()]
    result = asyncio.run(
        main(
            args.seconds,
            args.kafka,
            args.keep,
            args.out,
            args.users,
            args.rate,
            sides,
            args.doc_seconds,
            args.doc_clients,
            report,
        )
    )
    print(markdown(result))
    sys.exit(0)
