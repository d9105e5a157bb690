"""How cost grows: each figure's cost next to the size of what lies under it.

`python -m bench.growth [--smoke] [--only inbox,history,sync,markread,fanout] [--runs N]`

One embedded PostgreSQL (pg_stat_statements with track = all, auto_explain loaded but off) seeded
with bulk SQL (generate_series), and `chatgql serve` on 127.0.0.1 (API only, no relay: nothing
else runs statements while an operation is measured; the fanout part starts one with its relay).
For each figure and size the operation runs through the served API, one request at a time:

- inbox: inbox(first: 50) with lastMessage and unreadCount for a user in N conversations;
- history: messages(last: 50, before:) ending `depth` messages below the newest, in a
  conversation of the largest depth's size;
- sync: sync(cursors: [{afterSeq: lastSeq - missed}]) in that conversation;
- markread: markRead by one member of a group of N members (each call advances the watermark);
- fanout: one message to a group of N members, every member subscribed (bench/fanout.py's
  subscribers over several client processes), time from the send to the last member's frame.

What the busy machine cannot blur is counted in PostgreSQL: per operation (pg_stat_statements
over the runs) the statements (top level, and nested ones inside stored functions), the shared
buffers they hit and read, the rows they returned, and their execution time; then one more run
with auto_explain on (analyze, buffers, nested statements) gives the rows each statement's
scans examined (rows returned by each relation scan plus those its filters removed). Times are
medians of many runs (client wall time, noisy on a shared machine). Answer bytes: the HTTP
body's length.

`--baseline REV`: the HTTP figures are measured twice in the same run over the same data: first
by a server running REV's code (`git archive`) with the indexes whose names hold "growth" (a
growth fix's indexes) dropped (before), then by this tree's with them (after).

Writes bench/results/growth.md (or --report; --smoke: bench/out/growth.smoke.md) and
bench/out/growth.json (--json).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import asyncpg
import orjson

from . import fanout, layout
from .infra import REPO, Postgres, Server, log, machine_info, raise_fd_limit
from .perf import export_src
from .queries import READ, send_body, token
from .rawhttp import Pool

FIGURES = ("inbox", "history", "sync", "markread", "fanout")


@dataclasses.dataclass(frozen=True)
class Sizes:
    inbox: tuple[int, ...]  # conversations of the viewer
    history: tuple[int, ...]  # depths of the page (the conversation holds the largest)
    sync: tuple[int, ...]  # missed messages
    markread: tuple[int, ...]  # group members
    fanout: tuple[int, ...]  # subscribed group members
    runs: int  # requests measured per size
    fanout_rounds: int
    fanout_procs: int


FULL = Sizes(
    (100, 1_000, 10_000), (10, 10_000, 1_000_000), (10, 10_000), (10, 1_000, 100_000), (10, 1_000, 10_000), 40, 5, 8
)
SMOKE = Sizes((5, 50), (10, 500), (10, 200), (10, 100), (4,), 3, 1, 1)

PAGE = 50
SYNC_LIMIT = 100
INBOX_CID0, INBOX_USER, INBOX_OTHER = 10_000_000, 20_000_000, 21_000_000  # + size index * 100,000
HISTORY_CID, HISTORY_USER = 11_000_001, 22_000_000
READ_CID0, READ_USER = 12_000_000, 23_000_000  # group i: READ_CID0 + i, members READ_USER + i * 1,000,000 + j
READ_LAST_SEQ = 10**12

INBOX = (
    "query Inbox($n: Int) { inbox(first: $n) { nodes { id title unreadCount lastMessage { seq senderId body createdAt } }"
    " pageInfo { hasNextPage endCursor } } }"
)
HISTORY = (
    "query History($c: ID!, $b: String) { messages(conversationId: $c, last: 50, before: $b) {"
    " nodes { seq senderId body createdAt } pageInfo { hasPreviousPage hasNextPage startCursor } } }"
)
SYNC = (
    "query Sync($cursors: [SyncCursor!]!, $n: Int) { sync(cursors: $cursors, limit: $n) { conversationId"
    " messages { seq senderId body createdAt } hasMore lastSeq lastReadSeq tooLong } }"
)
OURS = ("bench.growth", "pg_stat_statements", "pg_reload_conf", "ALTER SYSTEM", "pg_catalog", "auto_explain")
SCANS = ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Tid Scan", "Tid Range Scan")


# --------------------------------------------------------------------- database


def _start_postgres(scratch: Path) -> tuple[Postgres, Path]:
    """The embedded PostgreSQL with pg_stat_statements and auto_explain (off until _explained turns
    it on), logging as JSON lines into scratch/pglog."""
    Postgres.start(scratch / "pg").stop()
    logs = scratch / "pg" / "pgdata" / "pglog"  # written by PostgreSQL's own system user
    with open(scratch / "pg" / "pgdata" / "postgresql.conf", "a") as conf:
        conf.write(
            "\nshared_preload_libraries = 'pg_stat_statements,auto_explain'\n"
            "pg_stat_statements.track = 'all'\n"
            "auto_explain.log_min_duration = -1\nauto_explain.log_analyze = on\nauto_explain.log_buffers = on\n"
            "auto_explain.log_timing = off\nauto_explain.log_nested_statements = on\n"
            "auto_explain.log_format = 'json'\n"
            "logging_collector = on\nlog_destination = 'jsonlog'\nlog_directory = 'pglog'\n"
            "log_filename = 'pg.log'\nlog_rotation_size = 0\n"
        )
    return Postgres.start(scratch / "pg"), logs


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def _connect(pg: Postgres) -> asyncpg.Connection:
    return await asyncpg.connect(_plain(pg.url))


async def _timed(conn: asyncpg.Connection, what: str, sql: str, *args) -> float:
    t0 = time.monotonic()
    await conn.execute(sql, *args)
    seconds = time.monotonic() - t0
    log(f"growth seed {what}: {seconds:.1f} s")
    return seconds


async def seed(conn: asyncpg.Connection, sizes: Sizes, figures: tuple[str, ...]) -> dict:
    """Every case's data with one generate_series statement each; the seconds each took."""
    took: dict[str, float] = {}
    if "inbox" in figures:
        for i, n in enumerate(sizes.inbox):
            base, viewer, other = INBOX_CID0 + i * 100_000, INBOX_USER + i, INBOX_OTHER + i * 100_000
            took[f"inbox {n:,}"] = sum(
                [
                    await _timed(
                        conn,
                        f"inbox {n} conversations",
                        """INSERT INTO conversation (id, type, last_seq, last_message_at, created_at)
                           SELECT $1 + k, 'DIRECT', 2, now() - k * interval '1 s', now() - interval '30 days'
                             FROM generate_series(1, $2::int) k""",
                        base,
                        n,
                    ),
                    # the member-count trigger joins the new members to conversation: plan it on real stats
                    await _timed(conn, "analyze conversation", "ANALYZE conversation"),
                    await _timed(
                        conn,
                        f"inbox {n} members",
                        """INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
                           SELECT $1 + k, $3::text, 'MEMBER', k % 3 FROM generate_series(1, $2::int) k
                           UNION ALL
                           SELECT $1 + k, ($4::bigint + k)::text, 'MEMBER', 2 FROM generate_series(1, $2::int) k""",
                        base,
                        n,
                        str(viewer),
                        other,
                    ),
                    await _timed(
                        conn,
                        f"inbox {n} messages",
                        """INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
                           SELECT $1 + k, s, CASE WHEN s = 1 THEN $3::text ELSE ($4::bigint + k)::text END,
                                  gen_random_uuid(), 'message ' || s || ' of ' || k,
                                  now() - k * interval '1 s' - (2 - s) * interval '1 ms'
                             FROM generate_series(1, $2::int) k, generate_series(1, 2) s""",
                        base,
                        n,
                        str(viewer),
                        other,
                    ),
                ]
            )
    if "history" in figures or "sync" in figures:
        depth = max(*(d + PAGE for d in sizes.history), *(m + SYNC_LIMIT for m in sizes.sync))
        await conn.execute(
            """INSERT INTO conversation (id, type, last_seq, last_message_at, created_at)
               VALUES ($1, 'DIRECT', $2, now(), now() - interval '400 days')""",
            HISTORY_CID,
            depth,
        )
        await conn.execute(
            """INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
               VALUES ($1, $2::text, 'MEMBER', $3), ($1, $4::text, 'MEMBER', $3)""",
            HISTORY_CID,
            str(HISTORY_USER),
            depth,
            str(HISTORY_USER + 1),
        )
        # the search index is built once after the rows rather than kept up to date row by row
        # (on the partitioned table: pg_indexes says ON ONLY, which would build none of the partitions')
        search = await conn.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = 'message_search_idx'")
        if search:
            search = search.replace(" ON ONLY ", " ON ")
            await conn.execute("DROP INDEX message_search_idx")
        # every row names the conversation just written: no foreign-key check a row (triggers off)
        await conn.execute("SET session_replication_role = replica")
        took[f"history {depth:,} messages"] = await _timed(
            conn,
            f"history {depth} messages",
            """INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
               SELECT $1, s, ($3::bigint + s % 2)::text, gen_random_uuid(), 'history message ' || s,
                      now() - ($2::int - s) * interval '10 ms'
                 FROM generate_series(1, $2::int) s""",
            HISTORY_CID,
            depth,
            HISTORY_USER,
        )
        await conn.execute("RESET session_replication_role")
        if search:
            took["search index"] = await _timed(conn, "search index", search)
    if "markread" in figures:
        for i, n in enumerate(sizes.markread):
            cid, base = READ_CID0 + i, READ_USER + i * 1_000_000
            await conn.execute(
                """INSERT INTO conversation (id, type, title, last_seq, last_message_at, created_at)
                   VALUES ($1, 'GROUP', 'growth', $2, now(), now() - interval '2 days')""",
                cid,
                READ_LAST_SEQ,
            )
            took[f"markread group of {n:,}"] = await _timed(
                conn,
                f"markread group of {n}",
                """INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
                   SELECT $1, ($2::bigint + j)::text, CASE WHEN j = 1 THEN 'OWNER' ELSE 'MEMBER' END, 0
                     FROM generate_series(1, $3::int) j""",
                cid,
                base,
                n,
            )
    await conn.execute(
        "SELECT setval(pg_get_serial_sequence('conversation', 'id'), (SELECT max(id) FROM conversation))"
    )
    t0 = time.monotonic()
    await conn.execute("VACUUM ANALYZE")
    took["vacuum analyze"] = time.monotonic() - t0
    return {k: round(v, 2) for k, v in took.items()}


async def _seed_fanout_group(conn: asyncpg.Connection, members: int) -> None:
    """layout's fanout group (bench/fanout.py subscribes its members) with `members` members."""
    await conn.execute("DELETE FROM conversation_member WHERE conversation_id = $1", layout.FANOUT_CID)
    await conn.execute(
        """INSERT INTO conversation (id, type, title, created_at) VALUES ($1, 'GROUP', 'fanout', now() - interval '1 day')
           ON CONFLICT (id) DO NOTHING""",
        layout.FANOUT_CID,
    )
    await conn.execute(
        """INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
           SELECT $1, ($2::bigint + j)::text, CASE WHEN j = 1 THEN 'OWNER' ELSE 'MEMBER' END,
                  (SELECT last_seq FROM conversation WHERE id = $1)
             FROM generate_series(1, $3::int) j""",
        layout.FANOUT_CID,
        layout.FANOUT_MEMBER,
        members,
    )
    await conn.execute("ANALYZE conversation_member")


# --------------------------------------------------------------------- what PostgreSQL did


async def _reset(conn: asyncpg.Connection) -> None:
    await conn.execute("SELECT pg_stat_statements_reset()")


async def _statements(conn: asyncpg.Connection) -> list[dict]:
    rows = await conn.fetch(
        """SELECT s.query, s.toplevel, s.calls, s.rows, s.shared_blks_hit, s.shared_blks_read, s.total_exec_time
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
            WHERE d.datname = current_database()"""
    )
    out = []
    for r in rows:
        text = " ".join(r["query"].split())
        if any(mark in text for mark in OURS) or text.startswith(("SET ", "RESET ", "BEGIN", "COMMIT", "ROLLBACK")):
            continue
        out.append({**dict(r), "query": text})
    return out


def _per_op(statements: list[dict], ops: int) -> dict:
    """Per operation: statements (top level; nested ones inside functions apart), the shared buffers
    of the top-level statements (theirs include their nested statements'), rows returned, exec ms."""
    top = [s for s in statements if s["toplevel"]]
    nested = [s for s in statements if not s["toplevel"]]
    return {
        "statements": sum(s["calls"] for s in top) / ops,
        "nested_statements": sum(s["calls"] for s in nested) / ops,
        "buffers_hit": sum(s["shared_blks_hit"] for s in top) / ops,
        "buffers_read": sum(s["shared_blks_read"] for s in top) / ops,
        "buffers": sum(s["shared_blks_hit"] + s["shared_blks_read"] for s in top) / ops,
        "rows_returned": sum(s["rows"] for s in top) / ops,
        "pg_exec_ms": sum(s["total_exec_time"] for s in top) / ops,
        "by_statement": sorted(
            (
                {
                    "query": s["query"][:220],
                    "toplevel": s["toplevel"],
                    "calls": s["calls"] / ops,
                    "buffers": (s["shared_blks_hit"] + s["shared_blks_read"]) / max(1, s["calls"]),
                    "rows": s["rows"] / max(1, s["calls"]),
                }
                for s in statements
            ),
            key=lambda s: (not s["toplevel"], -s["buffers"] * s["calls"]),
        ),
    }


class Explainer:
    """auto_explain switched on for one operation: the rows its statements' scans examined."""

    def __init__(self, conn: asyncpg.Connection, logs: Path) -> None:
        self.conn = conn
        self.logs = logs
        self.offset = 0

    def _log_file(self) -> Path | None:
        found = sorted(self.logs.glob("*.json"))
        return found[-1] if found else None

    async def _set(self, value: int) -> None:
        await self.conn.execute(f"ALTER SYSTEM SET auto_explain.log_min_duration = {value}")
        await self.conn.execute("SELECT pg_reload_conf()")
        # the postmaster has reloaded once this session shows the value; the server's backends
        # reload on their next command after its signal
        for _ in range(200):
            shown = await self.conn.fetchval(
                "SELECT setting FROM pg_settings WHERE name = 'auto_explain.log_min_duration'"
            )
            if shown == str(value):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # the server's pooled backends take the SIGHUP asynchronously

    async def __call__(self, op) -> dict:
        path = self._log_file()
        self.offset = path.stat().st_size if path else 0
        await self._set(0)
        try:
            await op()
        finally:
            await self._set(-1)
        path = self._log_file()
        plans = []
        if path:
            with open(path, "rb") as f:
                f.seek(self.offset)
                for line in f:
                    try:
                        message = json.loads(line).get("message", "")
                    except ValueError:
                        continue
                    if "plan:" not in message:
                        continue
                    try:
                        plan = json.loads(message.split("plan:", 1)[1])
                    except ValueError:
                        continue
                    text = " ".join(plan.get("Query Text", "").split())
                    if any(mark in text for mark in OURS):
                        continue
                    plans.append((text, plan["Plan"]))
        scanned = 0.0
        by_relation: dict[str, float] = {}

        def walk(node: dict) -> None:
            nonlocal scanned
            if node.get("Node Type") in SCANS:
                rows = (
                    node.get("Actual Rows", 0)
                    + node.get("Rows Removed by Filter", 0)
                    + node.get("Rows Removed by Index Recheck", 0)
                ) * node.get("Actual Loops", 1)
                scanned += rows
                name = node.get("Relation Name", "?")
                by_relation[name] = by_relation.get(name, 0) + rows
            for child in node.get("Plans", ()):
                walk(child)

        for _text, plan in plans:
            walk(plan)
        return {
            "plans": len(plans),
            "plan_buffers": [
                {"query": text[:160], "buffers": plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)}
                for text, plan in plans
            ],
            "rows_scanned": round(scanned),
            "by_relation": {k: round(v) for k, v in sorted(by_relation.items(), key=lambda kv: -kv[1])},
        }


# --------------------------------------------------------------------- the HTTP figures


async def _measure(pool: Pool, pg: asyncpg.Connection, explain: Explainer, runs: int, request) -> dict:
    """`request(i)` -> (body, authorization), run `runs` times after 3 unmeasured ones."""
    answers: list[int] = []

    async def one(i: int) -> float:
        body, authorization = request(i)
        t0 = time.monotonic()
        try:
            status, payload = await pool.post(body, authorization)
        except (ConnectionError, asyncio.IncompleteReadError):
            # the server closed the connection after its keep-alive: the request never reached it
            t0 = time.monotonic()
            status, payload = await pool.post(body, authorization)
        took = time.monotonic() - t0
        if status != 200 or b'"errors"' in payload:
            raise RuntimeError(f"growth request failed: HTTP {status} {payload[:400]!r}")
        answers.append(len(payload))
        return took

    i = 0
    for _ in range(3):
        await one(i)
        i += 1
    await _reset(pg)
    times = []
    for _ in range(runs):
        times.append(await one(i))
        i += 1
    work = _per_op(await _statements(pg), runs)

    async def explained() -> None:
        nonlocal i
        await one(i)
        i += 1

    scans = await explain(explained)
    return {
        "runs": runs,
        "ms_median": round(1000 * statistics.median(times), 3),
        "ms_p90": round(1000 * sorted(times)[int(0.9 * (len(times) - 1))], 3),
        "answer_bytes": statistics.median(answers[3:]),
        **work,
        "rows_scanned": scans["rows_scanned"],
        "scanned_by_relation": scans["by_relation"],
        "explained_plans": scans["plans"],
        "plan_buffers": scans["plan_buffers"],
    }


def _gql(query: str, variables: dict) -> bytes:
    return orjson.dumps({"query": query, "variables": variables})


async def http_figures(
    server: Server, pg: Postgres, logs: Path, sizes: Sizes, figures: tuple[str, ...], read_from: int = 1_000
) -> dict:
    """read_from: the first markRead's seq (a later side starts above the earlier one's last)."""
    conn = await _connect(pg)
    pool = await Pool("127.0.0.1", server.port, 1).open()
    explain = Explainer(conn, logs)
    out: dict[str, dict] = {}
    try:
        if "inbox" in figures:
            out["inbox"] = {}
            for i, n in enumerate(sizes.inbox):
                auth = f"Bearer {token(INBOX_USER + i)}"
                body = _gql(INBOX, {"n": PAGE})
                out["inbox"][n] = await _measure(pool, conn, explain, sizes.runs, lambda _k, b=body, a=auth: (b, a))
                log(f"growth inbox {n}: {_brief(out['inbox'][n])}")
        depth_of = await conn.fetchval("SELECT last_seq FROM conversation WHERE id = $1", HISTORY_CID)
        auth = f"Bearer {token(HISTORY_USER)}"
        if "history" in figures:
            out["history"] = {}
            for d in sizes.history:
                body = _gql(HISTORY, {"c": str(HISTORY_CID), "b": str(depth_of - d + 1)})
                out["history"][d] = await _measure(pool, conn, explain, sizes.runs, lambda _k, b=body: (b, auth))
                log(f"growth history depth {d}: {_brief(out['history'][d])}")
        if "sync" in figures:
            out["sync"] = {}
            for m in sizes.sync:
                body = _gql(
                    SYNC, {"cursors": [{"conversationId": str(HISTORY_CID), "afterSeq": depth_of - m}], "n": SYNC_LIMIT}
                )
                out["sync"][m] = await _measure(pool, conn, explain, sizes.runs, lambda _k, b=body: (b, auth))
                log(f"growth sync {m} missed: {_brief(out['sync'][m])}")
        if "markread" in figures:
            out["markread"] = {}
            for i, n in enumerate(sizes.markread):
                cid, reader = READ_CID0 + i, READ_USER + i * 1_000_000 + 2
                auth_r = f"Bearer {token(reader)}"
                out["markread"][n] = await _measure(
                    pool,
                    conn,
                    explain,
                    sizes.runs,
                    lambda k, c=cid, a=auth_r: (_gql(READ, {"c": str(c), "s": read_from + k}), a),
                )
                log(f"growth markRead group of {n}: {_brief(out['markread'][n])}")
    finally:
        pool.close()
        await conn.close()
    return out


def _brief(r: dict) -> str:
    return (
        f"{r['ms_median']} ms, {r['statements']:.2f} statements (+{r['nested_statements']:.2f} nested), "
        f"{r['buffers']:.1f} buffers, {r['rows_scanned']} rows scanned, {r['answer_bytes']} bytes"
    )


# --------------------------------------------------------------------- fanout


async def fanout_figure(pg: Postgres, scratch: Path, logs: Path, sizes: Sizes) -> dict:
    """Per size: a fresh `chatgql serve` (relay on, in-process bus) over the same database, the
    group's members subscribed, `fanout_rounds` sends; the statements and buffers of everything
    PostgreSQL ran during the rounds (send, relay, delivery), per event."""
    out: dict[int, dict] = {}
    conn = await _connect(pg)
    try:
        for n in sizes.fanout:
            await _seed_fanout_group(conn, n)
            server = Server(pg.url, scratch, None, name=f"fanout-{n}")
            server.env.update(CHATGQL_RATE_SEND_PER_SECOND="0", CHATGQL_MAX_GROUP_MEMBERS=str(max(n, 1000)))
            server.spawn()
            try:
                await asyncio.to_thread(server.wait_ready)
                fsizes = dataclasses.replace(
                    layout.SMOKE, fanout_members=n, fanout_procs=min(sizes.fanout_procs, max(1, n // 100) or 1)
                )
                group = await fanout.open_members([server], fsizes, timeout=900)  # a busy machine: minutes
                await _all_subscribed(server, group)
                sender = f"Bearer {token(group.members[0])}"
                rounds = []
                try:
                    await _fanout_round(server, sender, group, -1)  # warms the server up, unmeasured
                    await _drained(conn)
                    await _reset(conn)
                    for r in range(sizes.fanout_rounds):
                        rounds.append(await _fanout_round(server, sender, group, r))
                    await _drained(conn)  # the relay's last delete may follow the frames
                    work = _per_op(await _statements(conn), sizes.fanout_rounds)

                    scans = await Explainer(conn, logs)(
                        functools.partial(_explained_round, conn, server, sender, group, sizes.fanout_rounds)
                    )
                finally:
                    group.close()
            finally:
                server.stop()
            lasts = [r["last_ms"] for r in rounds]
            out[n] = {
                "subscribed": group.opened,
                "rounds": len(rounds),
                "recipients": min(r["recipients"] for r in rounds),
                "ms_median": round(statistics.median(lasts), 2),
                "ms_p90": round(max(lasts), 2),
                "open_seconds": round(group.open_seconds, 1),
                **work,
                "rows_scanned": scans["rows_scanned"],
                "scanned_by_relation": scans["by_relation"],
                "explained_plans": scans["plans"],
                "plan_buffers": scans["plan_buffers"],
            }
            log(
                f"growth fanout to {n}: {out[n]['ms_median']} ms, {work['statements']:.1f} statements, {work['buffers']:.0f} buffers an event"
            )
    finally:
        await conn.close()
    return out


async def _all_subscribed(server: Server, group: fanout.Members) -> None:
    """Every opened socket's subscription is registered on the server (a socket whose handshake timed
    out on a starved machine stays open without one, and a round would wait for it forever)."""
    active = 0
    for _ in range(600):
        active = await asyncio.to_thread(server.active_subscriptions)
        if active >= group.opened:
            return
        await asyncio.sleep(0.5)
    group.close()
    raise RuntimeError(f"fanout: {active} of {group.opened} opened sockets have a subscription on the server")


async def _fanout_round(server: Server, sender: str, group: fanout.Members, r: int) -> dict:
    """One send to the fanout group: ms from the request to the last member's frame."""
    # a connection a round: the server closes one left idle longer than its keep-alive
    pool = await Pool("127.0.0.1", server.port, 1).open()
    t0 = time.monotonic_ns()
    try:
        status, payload = await pool.post(send_body(layout.FANOUT_CID, f"growth {r}"), sender)
    finally:
        pool.close()
    if status != 200 or b'"errors"' in payload:
        raise RuntimeError(f"fanout send failed: HTTP {status} {payload[:300]!r}")
    seq = orjson.loads(payload)["data"]["sendMessage"]["message"]["seq"]
    got, reports = [], 0
    while reports < len(group.procs):
        kind, got_seq, times = await asyncio.to_thread(_queue_get, group, 600)
        if kind == "error":
            raise RuntimeError(f"fanout client failed: {got_seq}")
        if kind == "round" and got_seq == seq:
            reports += 1
            got += times
    return {"recipients": len(got), "last_ms": (max(got) - t0) / 1e6}


async def _explained_round(
    conn: asyncpg.Connection, server: Server, sender: str, group: fanout.Members, r: int
) -> None:
    await _fanout_round(server, sender, group, r)
    await _drained(conn)


async def _drained(conn: asyncpg.Connection) -> None:
    for _ in range(1200):
        if not await conn.fetchval("SELECT count(*) FROM outbox /* bench.growth */"):
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the relay did not drain the outbox")


def _queue_get(group: fanout.Members, timeout: float):
    from .infra import queue_get

    return queue_get(group.out, group.procs, timeout, "fanout round")


# --------------------------------------------------------------------- before and after


async def _indexes(pg: Postgres, drop: bool = False, create: dict[str, str] | None = None) -> dict[str, str]:
    """The indexes whose names hold "growth" (a growth fix's): dropped (drop) or
    created again from their definitions (create); their definitions."""
    conn = await _connect(pg)
    try:
        if create:
            for sql in create.values():
                await conn.execute(sql)
            await conn.execute("ANALYZE")
            return create
        rows = await conn.fetch("SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE '%growth%'")
        defs = {r["indexname"]: r["indexdef"] for r in rows}
        if drop:
            for name in defs:
                await conn.execute(f"DROP INDEX {name}")
            await conn.execute("ANALYZE")
        return defs
    finally:
        await conn.close()


def _api_server(pg: Postgres, scratch: Path, src: Path, name: str) -> Server:
    """`chatgql serve` of the code in src, API only (no relay, no consumer: nothing else runs
    statements while an operation is measured), no per-user rate limits."""
    server = Server(pg.url, scratch, None, serve_args=("--no-relay", "--no-consumer"), name=name)
    server.env.update(PYTHONPATH=str(src), CHATGQL_RATE_READ_PER_SECOND="0", CHATGQL_RATE_SEND_PER_SECOND="0")
    server.spawn()
    server.wait_ready()
    return server


# --------------------------------------------------------------------- run


def run(
    sizes: Sizes, figures: tuple[str, ...], report: Path, json_path: Path, baseline: str | None, smoke: bool
) -> dict:
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-growth-"))
    pg = server = None
    t_start = time.monotonic()
    results: dict = {
        "mode": "smoke" if smoke else "full",
        "sizes": dataclasses.asdict(sizes),
        "figures": list(figures),
        "tree": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "machine": machine_info(),
    }
    try:
        pg, logs = _start_postgres(scratch)

        async def prepare() -> dict:
            from chatgql import db

            await db.upgrade(pg.url)
            conn = await _connect(pg)
            try:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                return await seed(conn, sizes, figures)
            finally:
                await conn.close()

        results["seed_seconds"] = asyncio.run(prepare())
        http = tuple(f for f in figures if f != "fanout")
        if http and baseline:
            # before: the baseline's code, without the growth indexes; after: this tree's
            defs = asyncio.run(_indexes(pg, drop=True))
            results["baseline"] = {"rev": baseline, "indexes_dropped": defs}
            server = _api_server(pg, scratch, export_src(baseline, scratch / "baseline"), "baseline")
            results["before"] = asyncio.run(http_figures(server, pg, logs, sizes, http))
            server.stop()
            asyncio.run(_indexes(pg, create=defs))
        if http:
            server = _api_server(pg, scratch, REPO / "src", "api")
            results.update(asyncio.run(http_figures(server, pg, logs, sizes, http, read_from=1_000_000)))
            server.stop()
            server = None
        if "fanout" in figures:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(results, indent=2, default=str))  # kept if fanout fails
            results["fanout"] = asyncio.run(fanout_figure(pg, scratch, logs, sizes))
    finally:
        if server is not None:
            server.stop()
        if pg is not None:
            pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    results["total_seconds"] = round(time.monotonic() - t_start, 1)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2, default=str))
    text = _report(results)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text)
    print(text)
    return results


TITLES = {
    "inbox": ("The inbox page", "conversations of the viewer", "inbox(first: 50) with lastMessage and unreadCount"),
    "history": (
        "A history page",
        "depth (messages below the newest)",
        "messages(last: 50, before:) in one conversation",
    ),
    "sync": ("Sync", "missed messages", f"sync of one conversation, limit {SYNC_LIMIT}"),
    "markread": ("markRead in a group", "members", "markRead by one member, advancing each time"),
    "fanout": (
        "Fanout",
        "online members",
        "one sendMessage, every member subscribed (messageNew with seen, seenByCount)",
    ),
}

# What lies under each figure, in the code as it is (the measured shape above each says whether it holds).
WHY = {
    "inbox": (
        "**Grows with the database: the viewer's memberships, not the page.** The page's order is "
        "(membership's pinned_at, conversation's activity, id): two tables, so no index holds it. "
        "PostgreSQL reads every membership of the viewer (conversation_member_user_id_idx), probes "
        "each one's conversation by its key and keeps the top 51 (a top-N sort): about 3 buffers and "
        "2 rows scanned a membership, whatever the page holds; the 50 last-message probes are flat. "
        "Not a plain index or a statement change: the next lever is to keep the activity time on the "
        "membership row too (written by chat_send, with an index on (user_id, pinned_at, activity DESC, "
        "conversation_id DESC)), so a page reads 51 index entries. That is a write to every member's row "
        "a message: affordable for DIRECT chats and groups up to CHATGQL_BIG_GROUP_THRESHOLD members; big "
        "groups would keep their activity on the conversation and the page would merge the viewer's few "
        "big groups into the index range."
    ),
    "history": (
        "**Flat.** Two statements whatever the depth: the conversation with the viewer's membership, then "
        "the page as one range of the (conversation_id, seq) primary key in the conversation's partition, "
        "which starts at `before` by descending the index (a few buffers at any depth) and reads the 50 "
        "messages and one more."
    ),
    "sync": (
        "**Grows with the answer, flat in what was missed.** The messages after the cursor are one range "
        "of the primary key, at most `limit` (100) of them: 10 missed messages read 11 rows, 10,000 read "
        "101 (more than CHATGQL_MAX_CATCH_UP behind: the newest page, tooLong). The buffers follow the "
        "rows answered."
    ),
    "markread": (
        "**Flat.** One statement (the watermark's guarded UPDATE, its read.updated outbox row, the "
        "answer's unread count) and the relay's wake-up: the member's row and the conversation's, by "
        "their keys, whatever the group's size (the member count is kept on the conversation by a "
        "trigger; a big group's read events are coalesced after the statement, not in it). It grew with "
        "the database before this run's fix: the statement takes its keys (one or a batch) as a jsonb "
        "record set, which the planner estimates at 100 rows, and joined plainly to conversation the "
        "generic plan hashed the whole conversation table for one key; the join is now "
        "a LATERAL probe by key (store/reads.py; before and after in the tables above when the run had "
        "`--baseline`; tests/store/test_read_plans.py)."
    ),
    "fanout": (
        "**The database's work is flat; the time grows with the answer (the frames).** One send, then "
        "the relay's read and delete of the outbox row and one batched read of the roster's watermarks "
        "for seen and seenByCount, whatever the number of subscribers (tests/graphql/test_event_batching.py "
        "holds delivery to 2 statements an event; the fractions are the relay's polls and the server's "
        "periodic statements falling in the rounds). Most of the buffers are the send's own chat_send "
        "call, the same at every size. The rows scanned grow with the members, about one member row each, in "
        "few buffers: the roster of who gets the event (store/conversations.live_members: every member up to "
        "CHATGQL_BIG_GROUP_THRESHOLD, above it only the subscribed ones), so they follow the answer. "
        "The time is the frames: one process builds and writes one frame a subscriber, so the last "
        "frame leaves in O(members); the lever past one process is more API processes on a shared bus "
        "(bench/results/livescale.md)."
    ),
}


def _table(rows: dict, fanout_: bool = False) -> list[str]:
    if fanout_:
        head = "| members | ms to the last (median) | slowest | statements an event | buffers an event | rows scanned | frames |"
        lines = [head, "|---|---|---|---|---|---|---|"]
        for n, r in rows.items():
            scanned = f"{r['rows_scanned']:,}" if "rows_scanned" in r else "-"
            lines.append(
                f"| {int(n):,} | {r['ms_median']:.1f} | {r['ms_p90']:.1f} | {r['statements']:.1f} (+{r['nested_statements']:.1f} nested) | "
                f"{r['buffers']:,.0f} | {scanned} | {r['recipients']:,} |"
            )
        return lines
    lines = [
        "| size | ms (median) | p90 | PostgreSQL ms | statements | buffers (hit + read) | rows scanned | rows returned | answer bytes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, r in rows.items():
        nested = f" (+{r['nested_statements']:.2f} nested)" if r["nested_statements"] else ""
        lines.append(
            f"| {int(n):,} | {r['ms_median']:.2f} | {r['ms_p90']:.2f} | {r['pg_exec_ms']:.3f} | "
            f"{r['statements']:.2f}{nested} | "
            f"{r['buffers']:,.1f} ({r['buffers_hit']:,.1f} + {r['buffers_read']:,.1f}) | {r['rows_scanned']:,} | "
            f"{r['rows_returned']:,.1f} | {r['answer_bytes']:,.0f} |"
        )
    return lines


def _shape(rows: dict, key: str = "buffers") -> str:
    """flat / grows with the answer / grows with the database, from the work column against the size."""
    items = [(int(n), r) for n, r in rows.items()]
    (n0, r0), (n1, r1) = items[0], items[-1]
    w0, w1 = max(r0[key], 1e-9), r1[key]
    a0, a1 = max(r0.get("answer_bytes", 1), 1), r1.get("answer_bytes", 1)
    growth, answer_growth, size_growth = w1 / w0, a1 / a0, n1 / n0
    if growth < 1.5:
        return f"flat: {key} x{growth:.2f} for a size x{size_growth:,.0f}"
    if growth <= 1.5 * answer_growth:
        return f"grows with the answer: {key} x{growth:.2f}, the answer x{answer_growth:.2f}"
    return (
        f"grows with the database: {key} x{growth:.1f} for a size x{size_growth:,.0f} (the answer x{answer_growth:.2f})"
    )


def _report(r: dict) -> str:
    head = r.get("tree", "?")
    lines = [
        "# How cost grows (`python -m bench.growth`)",
        "",
        f"Tree {head}, {r['mode']} sizes; written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{r['machine'].get('logical_cores', '?')} cores shared with other work, {r['total_seconds']:.0f} s in all. "
        "One `chatgql serve` process (API only for the HTTP figures; with its relay and the in-process bus "
        "for fanout) over an embedded PostgreSQL; one request at a time, each figure's runs after 3 "
        "unmeasured ones. ms: client wall time (noisy: the machine is shared); PostgreSQL ms, statements, "
        "buffers, rows: per operation, from pg_stat_statements over the runs (statements: top level, "
        "with the ones run inside stored functions in brackets; buffers: shared buffers hit + read by the "
        "top-level statements, theirs included); rows scanned: every relation scan's rows and the rows its "
        "filters removed, from one more run under auto_explain (analyze, nested statements).",
        "",
        "Seeding (bulk SQL, seconds): " + ", ".join(f"{k} {v}" for k, v in r["seed_seconds"].items()) + ".",
        "",
    ]
    for figure in FIGURES:
        if figure not in r:
            continue
        title, size, what = TITLES[figure]
        lines += [f"## {title} (size: {size})", "", f"{what}.", ""]
        if figure in r.get("before", {}):
            dropped = ", ".join(r["baseline"]["indexes_dropped"]) or "none here"
            lines += [
                f"Before ({r['baseline']['rev']}'s code, the indexes named *growth* dropped ({dropped}); "
                "same run, same data; with the same buffers, a difference in ms is the machine's):",
                "",
            ]
            lines += _table(r["before"][figure]) + ["", "After:", ""]
        lines += _table(r[figure], figure == "fanout")
        lines += ["", f"Shape (measured): {_shape(r[figure])}.", "", WHY[figure], ""]
        if figure != "fanout":
            big = list(r[figure].values())[-1]
            lines += ["Statements of the largest size (per operation; buffers and rows a call):", ""]
            lines += ["| statement | level | calls | buffers a call | rows a call |", "|---|---|---|---|---|"]
            for s in big["by_statement"][:8]:
                q = s["query"].replace("|", "\\|")
                lines.append(
                    f"| `{q[:160]}` | {'top' if s['toplevel'] else 'nested'} | {s['calls']:.2f} | {s['buffers']:,.1f} | {s['rows']:,.1f} |"
                )
            lines += [
                "",
                "Rows scanned by relation (largest size): "
                + ", ".join(f"{k} {v:,}" for k, v in big["scanned_by_relation"].items())
                + ".",
                "",
            ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.growth", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds")
    parser.add_argument("--only", default=",".join(FIGURES), help=f"a subset of {', '.join(FIGURES)}")
    parser.add_argument("--runs", type=int, help="requests measured per size (default 40; 3 in smoke)")
    parser.add_argument("--fanout-members", help="the fanout sizes, comma-separated (default 10,1000,10000)")
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also measure the HTTP figures with REV's code (git archive), *growth* indexes dropped: before and after",
    )
    parser.add_argument("--report", type=Path)
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "out" / "growth.json")
    args = parser.parse_args()
    figures = tuple(f for f in FIGURES if f in args.only.split(","))
    sizes = SMOKE if args.smoke else FULL
    if args.runs:
        sizes = dataclasses.replace(sizes, runs=args.runs)
    if args.fanout_members:
        sizes = dataclasses.replace(sizes, fanout=tuple(int(n) for n in args.fanout_members.split(",")))
    report = args.report or (
        REPO / "bench" / "out" / "growth.smoke.md" if args.smoke else REPO / "bench" / "results" / "growth.md"
    )
    run(sizes, figures, report, args.json, args.baseline, args.smoke)


if __name__ == "__main__":
    main()
