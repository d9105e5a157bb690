"""Each fast path against the plain path, in one run: what it saves, or that it does not.

`python -m bench.fastpaths [--only http,hub,shared,parked] [--rounds N] [--seconds S]`

Every side is this tree's `chatgql serve`, one setting apart (docs/operating/configuration.md,
Execution); the sides run at once against one PostgreSQL, a database each, seeded alike
(bench/perf.py's data), and the load alternates between them round by round, the order
rotated each round, so each sees the same minutes of a shared machine:

- http: four single-process servers: `all on` (the defaults), `no prebuilt`
  (CHATGQL_PREBUILT_PAGES=false), `no planner` (CHATGQL_PLANNER=false: accepted documents
  by graphql-core's executor) and `plain` (CHATGQL_PREPARED_DOCUMENTS=false: Strawberry's own
  pipeline, parsing and validation and execution, every request). wrk on the inbox page,
  sendMessage and markRead; server CPU (user + system) per request and req/s per segment.
- hub: two `--workers 2` servers, their bus and rate limits the supervisor's hub, or a
  redis-server (CHATGQL_BROADCAST_URL; its CPU counted with its side); sendMessage and markRead.
- shared: two servers, CHATGQL_SHARED_EVENT_RESULTS on and off, each with a group of
  --members members all subscribed (messageNew with seen and seenByCount, as bench/fanout.py):
  one send per round, server CPU from the send until every member has the event, and that time.
- parked: a fresh server per round, CHATGQL_PARK_SUBSCRIPTIONS on and off alternately, --sockets
  idle websockets subscribed as bench/connections.py opens them: server RSS growth per socket.

A gain is the median over rounds of (B / A - 1) per round, A and B measured in the same round;
its spread is the lowest and highest of those. Writes bench/results/fastpaths.md (or --report).
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

from . import connections, fanout, layout
from .infra import REPO, Postgres, Redis, Server, log, process_cpu, queue_get, raise_fd_limit
from .perf import SIZES, _create_databases, _database_url, _seed, _segment
from .queries import Scenario, send_body, token
from .rawhttp import Pool

PARTS = ("http", "hub", "shared", "parked")
HTTP_SIDES = {
    "all on": {},
    "no prebuilt": {"CHATGQL_PREBUILT_PAGES": "false"},
    "no planner": {"CHATGQL_PLANNER": "false"},
    "plain": {"CHATGQL_PREPARED_DOCUMENTS": "false"},
}
HTTP_FIGURES = ("inbox", "send_spread", "read")
SERVES = {
    "inbox": "inbox page of 50 with lastMessage",
    "send_spread": "sendMessage",
    "read": "markRead",
}
NOTES = "\n## Reading\n"  # the report's hand-written part, from this heading on: kept when it is written again
# bench.fastlive's section of the report, before the notes: kept too
LIVE_SECTION = "\n## Live delivery: parked wake-ups and the hub (`python -m bench.fastlive`)\n"
HUB_FIGURES = ("send_spread", "read")
# (fast path, what it serves, side with it, side without it, figures)
HTTP_PAIRS = (
    ("planner (with prebuilt pages)", "no planner", "all on", HTTP_FIGURES),
    ("prebuilt pages", "no prebuilt", "all on", ("inbox",)),
    ("planner alone (no prebuilt pages)", "no planner", "no prebuilt", ("inbox",)),
    ("prepared documents (graphql-core, no plan)", "plain", "no planner", HTTP_FIGURES),
    ("all HTTP fast paths", "plain", "all on", HTTP_FIGURES),
)


def _order(names: list[str], round_: int) -> list[str]:
    k = round_ % len(names)
    return names[k:] + names[:k]


def _spawn(pg: Postgres, scratch: Path, name: str, database: str, env: dict, workers: int = 1, bus: str | None = None):
    server = Server(_database_url(pg, database), scratch, None, workers=workers, broadcast_url=bus)
    server.env["PYTHONPATH"] = str(REPO / "src")
    server.env["CHATGQL_MIGRATE_ON_START"] = "true"
    server.env.update(env)
    server.log_path = scratch / f"chatgql-{name.replace(' ', '-')}.log"
    server.spawn()
    return server


def _start_sides(pg: Postgres, scratch: Path, sides: dict[str, dict], prefix: str, **kwargs) -> dict[str, Server]:
    databases = {name: f"{prefix}_{i}" for i, name in enumerate(sides)}
    asyncio.run(_create_databases(pg, list(databases.values())))
    servers = {name: _spawn(pg, scratch, name, databases[name], env, **kwargs) for name, env in sides.items()}
    for name, server in servers.items():
        server.wait_ready()
        asyncio.run(_seed(_database_url(pg, databases[name])))
    return servers


def _ms(segment: dict) -> float:
    return 1000 * (segment["user"] + segment["sys"]) / segment["ok"]


def _load_rounds(
    servers: dict[str, Server], figures: tuple[str, ...], rounds: int, seconds: float, scratch: Path, extra=None
) -> dict[str, dict[str, list[dict]]]:
    """{figure: {side: [segment per round]}}; extra(side) -> CPU seconds to add to a side (redis)."""
    workdir = scratch / "work"
    workdir.mkdir(exist_ok=True)
    read_base = 1
    out: dict[str, dict[str, list[dict]]] = {}
    names = list(servers)
    for figure in figures:
        scenario = Scenario(figure, SIZES)
        segments: dict[str, list[dict]] = {name: [] for name in names}
        for server in servers.values():  # warm-up: plans, statement caches, connections
            _segment(server, scenario, workdir, 2, read_base)
            read_base += 10_000_000
        for round_ in range(rounds):
            for name in _order(names, round_):
                before = extra(name) if extra else 0.0
                segment = _segment(servers[name], scenario, workdir, seconds, read_base)
                segment["sys"] += (extra(name) - before) if extra else 0.0
                segments[name].append(segment)
                read_base += 10_000_000
        out[figure] = segments
        log(
            f"fastpaths {figure}: "
            + ", ".join(f"{n} {statistics.median(_ms(s) for s in segs):.3f} ms" for n, segs in segments.items())
        )
    return out


def _compare(a: list[float], b: list[float], lower_is_better: bool = True) -> dict:
    """A (without the fast path) against B (with it), round by round: the saving in percent of A."""
    ratios = [100 * (1 - y / x) if lower_is_better else 100 * (y / x - 1) for x, y in zip(a, b, strict=True)]
    return {
        "a": statistics.median(a),
        "a_range": (min(a), max(a)),
        "b": statistics.median(b),
        "b_range": (min(b), max(b)),
        "gain_pct": statistics.median(ratios),
        "gain_range": (min(ratios), max(ratios)),
    }


def run_http(pg: Postgres, scratch: Path, rounds: int, seconds: float) -> dict:
    servers = _start_sides(pg, scratch, HTTP_SIDES, "http")
    try:
        segments = _load_rounds(servers, HTTP_FIGURES, rounds, seconds, scratch)
    finally:
        for server in servers.values():
            server.stop()
    return {"segments": segments}


def run_hub(pg: Postgres, scratch: Path, rounds: int, seconds: float) -> dict:
    redis = Redis.start(scratch)
    try:
        sides = {"hub": {}, "redis": {}}
        databases = {"hub": "hub_0", "redis": "hub_1"}
        asyncio.run(_create_databases(pg, list(databases.values())))
        servers = {
            "hub": _spawn(pg, scratch, "hub", databases["hub"], sides["hub"], workers=2),
            "redis": _spawn(pg, scratch, "redis", databases["redis"], sides["redis"], workers=2, bus=redis.url),
        }
        try:
            for name, server in servers.items():
                server.wait_ready()
                asyncio.run(_seed(_database_url(pg, databases[name])))
            segments = _load_rounds(
                servers,
                HUB_FIGURES,
                rounds,
                seconds,
                scratch,
                extra=lambda name: redis.cpu_seconds() if name == "redis" else 0.0,
            )
        finally:
            for server in servers.values():
                server.stop()
    finally:
        redis.stop()
    return {"segments": segments}


FANOUT_SIZES = dataclasses.replace(SIZES, fanout_members=500, fanout_procs=2)


async def _fanout_round(server: Server, group: fanout.Members, pool: Pool, sender: str, label: str) -> dict:
    """One send to the group; server CPU from the send until every member has it, and that time."""
    cpu0 = process_cpu(server.pid)
    t0 = time.monotonic_ns()
    status, payload = await pool.post(send_body(layout.FANOUT_CID, label), sender)
    if status != 200 or b'"errors"' in payload:
        raise RuntimeError(f"fanout send failed: HTTP {status} {payload[:300]!r}")
    seq = orjson.loads(payload)["data"]["sendMessage"]["message"]["seq"]
    received: list[int] = []
    reports = 0
    while reports < len(group.procs):
        kind, got_seq, times = await asyncio.to_thread(queue_get, group.out, group.procs, 60, "fanout round")
        if kind == "error":
            raise RuntimeError(f"fanout client failed: {got_seq}")
        if kind == "round" and got_seq == seq:
            reports += 1
            received += times
    cpu = process_cpu(server.pid) - cpu0
    return {"cpu_ms": 1000 * cpu, "last_ms": (max(received) - t0) / 1e6, "recipients": len(received)}


async def _fanout_sides(servers: dict[str, Server], rounds: int) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {name: [] for name in servers}
    groups, pools = {}, {}
    sender = f"Bearer {token(layout.FANOUT_MEMBER + 1)}"
    try:
        for name, server in servers.items():
            groups[name] = await fanout.open_members([server], FANOUT_SIZES)
            pools[name] = await Pool("127.0.0.1", server.port, 1).open()
        for name in servers:  # warm-up: plans, the roster's statements
            await _fanout_round(servers[name], groups[name], pools[name], sender, "warm-up")
        for round_ in range(rounds):
            for name in _order(list(servers), round_):
                await asyncio.sleep(0.3)  # the last round's writes are done
                results[name].append(
                    await _fanout_round(servers[name], groups[name], pools[name], sender, f"round {round_}")
                )
    finally:
        for pool in pools.values():
            pool.close()
        for group in groups.values():
            group.close()
    return results


def run_shared(pg: Postgres, scratch: Path, rounds: int) -> dict:
    sides = {"shared": {}, "per subscriber": {"CHATGQL_SHARED_EVENT_RESULTS": "false"}}
    databases = {name: f"shared_{i}" for i, name in enumerate(sides)}
    asyncio.run(_create_databases(pg, list(databases.values())))
    servers = {name: _spawn(pg, scratch, name, databases[name], env) for name, env in sides.items()}
    try:
        for name, server in servers.items():
            server.wait_ready()
            asyncio.run(_seed_fanout(_database_url(pg, databases[name])))
        results = asyncio.run(_fanout_sides(servers, rounds))
    finally:
        for server in servers.values():
            server.stop()
    for name, rs in results.items():
        log(f"fastpaths shared {name}: {statistics.median(r['cpu_ms'] for r in rs):.1f} ms CPU per event")
    return {"rounds": results, "members": FANOUT_SIZES.fanout_members}


async def _seed_fanout(url: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await layout.seed(conn, FANOUT_SIZES)
    finally:
        await conn.close()


def run_parked(pg: Postgres, scratch: Path, rounds: int, sockets: int) -> dict:
    sizes = dataclasses.replace(SIZES, mode="full", connections=sockets, connection_warmup=100, connection_procs=2)
    sides = {"parked": {}, "a task each": {"CHATGQL_PARK_SUBSCRIPTIONS": "false"}}
    asyncio.run(_create_databases(pg, ["parked_0"]))
    url = _database_url(pg, "parked_0")
    results: dict[str, list[dict]] = {name: [] for name in sides}
    seeded = False
    for round_ in range(rounds):
        for name in _order(list(sides), round_):
            server = _spawn(pg, scratch, f"parked-{round_}-{name}", "parked_0", sides[name])
            try:
                server.wait_ready()
                if not seeded:
                    asyncio.run(_seed(url))
                    seeded = True
                one = asyncio.run(connections.run_one(server, sizes, ("graphql-transport-ws", "deflate")))
            finally:
                server.stop()
            if one["opened"] < sockets or one["server_active_subscriptions"] < sockets:
                raise RuntimeError(
                    f"parked {name}: only {one['opened']} of {sockets} sockets open ({one['open_errors']})"
                )
            results[name].append(one)
            log(f"fastpaths parked {name}: {one['kb_per_subscription']} KB per idle socket")
    return {"rounds": results, "sockets": sockets}


def _fmt(value: float, digits: int = 3) -> str:
    return f"{value:,.{digits}f}"


def _cell(c: dict, side: str, digits: int, unit: str) -> str:
    lo, hi = c[f"{side}_range"]
    return f"{_fmt(c[side], digits)} {unit} ({_fmt(lo, digits)}-{_fmt(hi, digits)})"


def _gain(c: dict) -> str:
    lo, hi = c["gain_range"]
    return f"**{c['gain_pct']:+.0f}%** ({lo:+.0f} to {hi:+.0f})"


def _verdict(c: dict, floor: float = 5.0) -> str:
    """keep: every round saves; within noise: the rounds disagree, or the median saves under floor%."""
    lo, _ = c["gain_range"]
    if c["gain_pct"] >= floor and lo > 0:
        return "pays"
    if c["gain_pct"] <= -floor and c["gain_range"][1] < 0:
        return "costs"
    return "within noise"


def report(results: dict, args: argparse.Namespace) -> str:
    head = os.popen(f"git -C {REPO} rev-parse --short HEAD").read().strip()
    lines = [
        "# The fast paths against the plain path (`python -m bench.fastpaths`)",
        "",
        f"This tree ({head}); every side is the same code, one setting apart, and the sides ran in the same "
        f"minutes, the load alternating between them in {args.rounds} rounds (the order rotated each round). "
        "Figures are medians over the rounds with (lowest-highest); a gain is the median of the rounds' own "
        "savings (B against A in the same round) with their lowest and highest. CPU is the server's "
        "(user + system; with workers the whole process tree, with Redis its redis-server too) divided by "
        f"its answered requests. HTTP segments: wrk, {SIZES.clients} connections, {args.seconds:g} s each. "
        f"Load average at the end: {', '.join(f'{v:.1f}' for v in os.getloadavg())} (2 cores, shared).",
        "",
        "| fast path | what it serves | A: without (plain path) | B: with | gain (CPU per request; rounds) "
        "| req/s A -> B | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    http = results.get("http")
    if http:
        seg = http["segments"]
        for label, without, with_, figures in HTTP_PAIRS:
            for figure in figures:
                a, b = seg[figure][without], seg[figure][with_]
                c = _compare([_ms(s) for s in a], [_ms(s) for s in b])
                rps = _compare([s["rps"] for s in a], [s["rps"] for s in b], lower_is_better=False)
                lines.append(
                    f"| {label} | {SERVES[figure]} | {without}: {_cell(c, 'a', 3, 'ms')} | {with_}: {_cell(c, 'b', 3, 'ms')} "
                    f"| {_gain(c)} | {rps['a']:,.0f} -> {rps['b']:,.0f} | {_verdict(c)} |"
                )
    hub = results.get("hub")
    if hub:
        for figure, sides in hub["segments"].items():
            a, b = sides["redis"], sides["hub"]
            c = _compare([_ms(s) for s in a], [_ms(s) for s in b])
            rps = _compare([s["rps"] for s in a], [s["rps"] for s in b], lower_is_better=False)
            lines.append(
                f"| hub (2 workers) | {SERVES[figure]} | redis bus: {_cell(c, 'a', 3, 'ms')} | hub: {_cell(c, 'b', 3, 'ms')} "
                f"| {_gain(c)} | {rps['a']:,.0f} -> {rps['b']:,.0f} | {_verdict(c)} |"
            )
    shared = results.get("shared")
    if shared:
        a, b = shared["rounds"]["per subscriber"], shared["rounds"]["shared"]
        c = _compare([r["cpu_ms"] for r in a], [r["cpu_ms"] for r in b])
        last = _compare([r["last_ms"] for r in a], [r["last_ms"] for r in b])
        lines.append(
            f"| shared event results | one message to {shared['members']} subscribers (CPU per event) "
            f"| {_cell(c, 'a', 1, 'ms')} | {_cell(c, 'b', 1, 'ms')} | {_gain(c)} "
            f"| last delivery {last['a']:.0f} -> {last['b']:.0f} ms | {_verdict(c)} |"
        )
    parked = results.get("parked")
    if parked:
        a = [r["kb_per_subscription"] for r in parked["rounds"]["a task each"]]
        b = [r["kb_per_subscription"] for r in parked["rounds"]["parked"]]
        c = _compare(a, b)
        lines.append(
            f"| parked subscriptions | {parked['sockets']:,} idle subscribed websockets (RSS per socket) "
            f"| {_cell(c, 'a', 1, 'KB')} | {_cell(c, 'b', 1, 'KB')} | {_gain(c)} (memory) | - | {_verdict(c)} |"
        )
    lines += [
        "",
        "Verdict: *pays* when the median saves 5% or more and every round saves; *within noise* when the "
        "rounds disagree or the median saves less; *costs* the other way round.",
        "",
        "Reproduce: `python -m bench.fastpaths "
        f"--only {','.join(results)} --rounds {args.rounds} --seconds {args.seconds:g} "
        f"--members {FANOUT_SIZES.fanout_members} --sockets {args.sockets}`"
        " (each part alone: `--only http`, `--only hub`, `--only shared`, `--only parked`).",
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    global FANOUT_SIZES
    parser = argparse.ArgumentParser(prog="python -m bench.fastpaths", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PARTS), help="comma-separated subset of " + ", ".join(PARTS))
    parser.add_argument("--rounds", type=int, default=5, help="rounds per comparison (default 5)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one HTTP segment (default 3 s)")
    parser.add_argument("--members", type=int, default=500, help="subscribers of the shared part's group")
    parser.add_argument("--sockets", type=int, default=1500, help="idle websockets per parked round")
    parser.add_argument("--report", type=Path, default=REPO / "bench" / "results" / "fastpaths.md")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "out" / "fastpaths.json")
    args = parser.parse_args()
    parts = [p for p in args.only.split(",") if p]
    if set(parts) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(set(parts) - set(PARTS)))}")
    FANOUT_SIZES = dataclasses.replace(FANOUT_SIZES, fanout_members=args.members)
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-fastpaths-"))
    pg = Postgres.start(scratch / "pg")
    results: dict = {}
    failed: dict[str, str] = {}
    try:
        for part in parts:
            t0 = time.monotonic()
            try:
                if part == "http":
                    results[part] = run_http(pg, scratch, args.rounds, args.seconds)
                elif part == "hub":
                    results[part] = run_hub(pg, scratch, args.rounds, args.seconds)
                elif part == "shared":
                    results[part] = run_shared(pg, scratch, args.rounds)
                else:
                    results[part] = run_parked(pg, scratch, max(2, args.rounds // 2), args.sockets)
            except Exception as error:  # noqa: BLE001 - the other parts still run; the report leaves it out
                log(f"fastpaths {part} failed: {error!r}")
                failed[part] = repr(error)
            log(f"fastpaths {part}: {time.monotonic() - t0:.0f} s")
    finally:
        pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({**results, "failed": failed}, indent=1, default=str))
    text = report(results, args)
    old = args.report.read_text() if args.report.exists() else ""
    kept = [old.index(heading) for heading in (LIVE_SECTION, NOTES) if heading in old]
    if kept:
        text += old[min(kept) :]
    args.report.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
