"""The whole benchmark, in order:

1. scratch dir; Kafka (full mode, or --kafka) via scripts/kafka.sh; redis-server
   (with --workers N > 1: the bus the workers share); embedded PostgreSQL;
   migrations; seed (bench/layout.py).
2. pgbench baselines (no chatgql running, so no relay competes): send spread,
   send hot, read, inbox. Outbox rows they write are counted, then truncated.
3. `chatgql serve` in its own process (with workers: uvicorn's supervisor and N workers); the same four as HTTP GraphQL via wrk
   (same connections, same duration, same warm-up). The outbox is drained
   between runs. After the measured HTTP runs of each, an extra short run with
   py-spy recording the server (not counted in any figure): bench/profiles.py.
4. live (with its bare Kafka baseline), fanout, connections.
5. results.json and a markdown report.

`only` limits the run to some figures; the others are listed as skipped (never as met).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import orjson

from chatgql import db

from . import connections, fanout, httpload, layout, live, pgbench, profiles, report
from .infra import (
    CpuMeter,
    Kafka,
    Postgres,
    Redis,
    Server,
    dump_json,
    log,
    log_summary,
    machine_info,
    raise_fd_limit,
    versions,
)
from .queries import Scenario, inbox_body, read_body, send_body, token
from .rawhttp import Pool


def _warm_kafka(scratch: Path) -> tuple[Kafka, dict]:
    kafka = Kafka.start(scratch)
    try:
        return kafka, kafka.warm_up()
    except BaseException:
        kafka.stop()
        raise


SCENARIOS = ("send_spread", "send_hot", "read", "inbox")
PHASES = ("live", "fanout", "connections")
FIGURES = SCENARIOS + PHASES  # what --only picks from
# the verdicts each figure gives
FIGURE_VERDICTS = {
    **{name: (name,) for name in SCENARIOS},
    "live": ("live_p99_ms", "live_vs_kafka_p99", "live_p50_added_ms"),
    "fanout": ("fanout_last_ms",),
    "connections": ("kb_per_subscription",),
}
TARGETS = report.TARGETS
TARGET_TEXT = {
    **{name: ">= {}" for name in SCENARIOS},
    "live_p99_ms": "< {} ms",
    "live_vs_kafka_p99": "<= {}x",
    "live_p50_added_ms": "<= {} ms",
    "fanout_last_ms": "< {} ms (median of rounds)",
    "kb_per_subscription": "<= {} KB",
}
# markRead seqs: every run starts above everything before it (pgbench warm-up starts at 0),
# in the order pgbench, HTTP warm-up, HTTP, HTTP, pgbench; so every call can advance
PG_READ_BASES = (100_000_000, 4_000_000_000)
READ_BASE_WARMUP = 1_000_000_000
HTTP_READ_BASES = (2_000_000_000, 3_000_000_000)
PROFILE_READ_BASE = 3_500_000_000  # the profiled run comes after the HTTP runs, before the last pgbench run


TIMELINE: list[dict] = []


class _mark:
    """Record when a phase ran (the report places server log warnings in phases)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.t0 = time.time()

    def __exit__(self, *exc: object) -> None:
        TIMELINE.append({"phase": self.name, "start": self.t0, "end": time.time()})


async def _connect(pg: Postgres) -> asyncpg.Connection:
    return await asyncpg.connect(host=pg.socket_dir, user="postgres", database="postgres")


async def _count(conn, table: str) -> int:
    return await conn.fetchval(f"SELECT count(*) FROM {table}")


async def _drain_outbox(conn, timeout: float = 300) -> float:
    t0 = time.monotonic()
    while await _count(conn, "outbox") > 0:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError("the relay did not drain the outbox")
        await asyncio.sleep(0.1)
    return round(time.monotonic() - t0, 2)


def _script(name: str, sizes: layout.Sizes) -> pgbench.Script:
    if name == "send_spread":
        return pgbench.send_script(sizes, hot=False)
    if name == "send_hot":
        return pgbench.send_script(sizes, hot=True)
    if name == "read":
        return pgbench.read_script(sizes)
    return pgbench.inbox_script(sizes)


async def _probe(server: Server, sizes: layout.Sizes, read_seq: int = 1) -> dict:
    """One request of each kind, checked field by field, before the load runs (read_seq: above what
    markRead runs before it have set, below what the ones after it use)."""
    pool = await Pool("127.0.0.1", server.port, 1).open()
    try:
        status, body = await pool.post(send_body(1), f"Bearer {token(layout.SPREAD_SENDER + 1)}")
        send = orjson.loads(body)
        assert status == 200 and "errors" not in send and send["data"]["sendMessage"]["duplicate"] is False, body
        status, body = await pool.post(read_body(layout.READ_CID0 + 1, read_seq), f"Bearer {token(layout.READER + 1)}")
        read = orjson.loads(body)
        assert status == 200 and "errors" not in read and read["data"]["markRead"]["advanced"] is True, body
        status, body = await pool.post(inbox_body(sizes.inbox_page), f"Bearer {token(layout.INBOX_USER)}")
        inbox = orjson.loads(body)
        assert status == 200 and "errors" not in inbox, body[:500]
        nodes = inbox["data"]["inbox"]["nodes"]
        assert len(nodes) == sizes.inbox_page and all(n["lastMessage"] for n in nodes), body[:500]
        assert inbox["data"]["inbox"]["pageInfo"]["hasNextPage"] is True
        return {
            "send": "ok",
            "read": "ok (advanced)",
            "inbox": f"ok ({len(nodes)} nodes, each with lastMessage, "
            f"{sum(1 for n in nodes if n['unreadCount'])} unread, {len(body)} bytes)",
        }
    finally:
        pool.close()


async def _pg_segment(
    pg: Postgres, conn, name: str, script: pgbench.Script, sizes, workdir: Path, seconds: float, base: int, cpu_sources
) -> dict:
    """One measured pgbench run (no chatgql process is up: nothing relays its outbox rows)."""
    await conn.execute("TRUNCATE outbox")
    await conn.execute("CHECKPOINT")
    messages0, outbox0 = await _count(conn, "message"), await _count(conn, "outbox")
    meter = CpuMeter(cpu_sources).start()
    with _mark(f"pgbench {name}"):
        result = await asyncio.to_thread(
            pgbench.run, pg, script, sizes, workdir, seconds, {"n": str(base)} if name == "read" else None
        )
    result["cpu"] = meter.stop({"load_generator": result["pgbench_cpu_s"]})
    result["messages_stored"] = await _count(conn, "message") - messages0
    result["outbox_events"] = await _count(conn, "outbox") - outbox0
    await conn.execute("TRUNCATE outbox")
    return result


async def _http_segment(
    server: Server, conn, scenario: Scenario, workdir: Path, seconds: float, base: int, cpu_sources
) -> dict:
    """One measured HTTP run; the outbox is drained before and after (the drain time is reported)."""
    drained_before = await _drain_outbox(conn)
    await conn.execute("CHECKPOINT")
    messages0 = await _count(conn, "message")
    meter = CpuMeter(cpu_sources).start()
    with _mark(f"http {scenario.name}"):
        result = await asyncio.to_thread(httpload.run, server.port, scenario, workdir, seconds, base)
    result["cpu"] = meter.stop({"load_generator": result["generator_cpu_s"]})
    result["outbox_backlog_at_end"] = await _count(conn, "outbox")
    result["outbox_drain_s"] = await _drain_outbox(conn)
    result["outbox_drain_before_s"] = drained_before
    result["messages_stored"] = await _count(conn, "message") - messages0
    return result


async def _profile_segment(
    server: Server, conn, scenario: Scenario, workdir: Path, seconds: float, profile_dir: Path
) -> dict:
    """An extra HTTP run, not counted in any figure, with py-spy recording the server process.

    Returns what py-spy said, the run's own throughput and server CPU (py-spy slows the process it
    samples a little), and the path of the raw collapsed stacks; summarised later by profiles.summarize.
    """
    raw = profile_dir / f"{scenario.name}.txt"
    info: dict = {"seconds": seconds, "rate_hz": profiles.RATE, "raw_file": str(raw)}
    # with workers: py-spy follows uvicorn's supervisor and every worker (--subprocesses)
    recorder = profiles.Recorder(server.pid, seconds, raw, subprocesses=server.workers > 1)
    try:
        await _drain_outbox(conn)
        recorder.start()
        if not await asyncio.to_thread(recorder.attached):
            recorder.stop()
            info.update(await asyncio.to_thread(recorder.wait))
            info.setdefault("error", "py-spy did not start sampling")
            return info
        meter = CpuMeter({"server": server.cpu_seconds}).start()
        with _mark(f"profile {scenario.name}"):
            # a second longer than py-spy records, so the load covers the whole recording
            load = await asyncio.to_thread(httpload.run, server.port, scenario, workdir, seconds + 1, PROFILE_READ_BASE)
        cpu = meter.stop({"load_generator": load["generator_cpu_s"]})
        info.update(await asyncio.to_thread(recorder.wait))
        server_s = cpu["pct_of_one_core"].get("server", 0.0) / 100 * cpu["wall_s"]
        info["load_while_profiling"] = {
            "rps": load["rps"],
            "ok": load["ok"],
            "errors": load["bad_status"] + load["gql_errors"] + load["socket_errors"],
            "server_cpu_pct_of_one_core": cpu["pct_of_one_core"].get("server"),
            "server_cpu_ms_per_request": round(1000 * server_s / load["ok"], 3) if load["ok"] else None,
        }
        await _drain_outbox(conn)
    except Exception as error:  # noqa: BLE001 - profiling is optional: reported, the run goes on
        info["error"] = repr(error)
    finally:
        recorder.stop()  # no-op once py-spy has finished
    return info


def _finish_profile(info: dict, http: dict) -> dict:
    """Summarise the raw stacks; shares -> microseconds per request with the measured runs' server CPU."""
    raw = Path(info["raw_file"])
    if "error" not in info:
        try:
            summary = profiles.summarize(raw.read_text(errors="replace"))
        except OSError as error:
            info["error"] = f"cannot read {raw}: {error}"
        else:
            if not summary["samples"]:
                info["error"] = "py-spy recorded no samples"
            info.update(summary)
            info["server_cpu_ms_per_request"] = http.get("server_cpu_ms_per_request")
            info["us_per_request"] = profiles.per_request(summary, http.get("server_cpu_ms_per_request"))
    return info


def _combine_cpu(cpus: list[dict]) -> dict:
    wall = sum(c["wall_s"] for c in cpus) or 1.0

    def avg(get) -> float:
        return round(sum(get(c) * c["wall_s"] for c in cpus) / wall, 1)

    keys = {k for c in cpus for k in c["pct_of_one_core"]}
    return {
        "wall_s": round(wall, 3),
        "cores": cpus[0]["cores"],
        "machine_busy_pct": avg(lambda c: c["machine_busy_pct"]),
        "pct_of_one_core": {k: avg(lambda c, k=k: c["pct_of_one_core"].get(k, 0.0)) for k in sorted(keys)},
        "harness_pct": avg(lambda c: c["harness_pct"]),
        "other_pct": avg(lambda c: c["other_pct"]),
    }


def _combine_pgbench(name: str, segs: list[dict]) -> dict:
    """Two runs as one: transactions over the time they took (pgbench's tps excludes connecting)."""
    tx = sum(s["transactions"] for s in segs)
    busy = sum(s["transactions"] / s["tps"] for s in segs if s["tps"])
    out = {
        "tps": round(tx / busy, 1) if busy else 0.0,
        "transactions": tx,
        "failed": sum(s["failed"] for s in segs),
        "latency_avg_ms": round(sum(s["latency_avg_ms"] * s["transactions"] for s in segs) / tx, 3) if tx else None,
        "clients": segs[0]["clients"],
        "threads": segs[0]["threads"],
        "seconds": round(sum(s["seconds"] for s in segs), 2),
        "pgbench_cpu_pct_of_one_core": round(
            100 * sum(s["pgbench_cpu_s"] for s in segs) / sum(s["seconds"] for s in segs), 1
        ),
        "cpu": _combine_cpu([s["cpu"] for s in segs]),
        "segments": [
            {k: s[k] for k in ("tps", "transactions", "seconds", "latency_avg_ms")}
            | {"other_cpu_pct": s["cpu"]["other_pct"]}
            for s in segs
        ],
        "script": segs[0]["script"],
    }
    cpu = out["cpu"]
    out["postgres_cpu_ms_per_transaction"] = (
        round(1000 * cpu["pct_of_one_core"].get("postgres", 0.0) / 100 * cpu["wall_s"] / tx, 3) if tx else None
    )
    stored = sum(s["messages_stored"] for s in segs)
    events = sum(s["outbox_events"] for s in segs)
    check: dict = {"messages_stored": stored, "outbox_events": events}
    if name.startswith("send") and stored != tx:
        check["problem"] = f"{stored} messages stored for {tx} transactions"
    if name == "read":
        out["advanced_fraction"] = round(events / tx, 4) if tx else 0.0
    if out["failed"]:
        check["problem"] = f"{out['failed']} failed transactions"
    out["check"] = check
    return out


def _combine_http(name: str, segs: list[dict], sizes: layout.Sizes) -> dict:
    ok = sum(s["ok"] for s in segs)
    seconds = sum(s["seconds"] for s in segs)
    counters = ("requests", "ok", "bad_status", "gql_errors", "socket_errors", "duplicates", "not_advanced")
    out = {k: sum(s[k] for s in segs) for k in counters}
    out.update(
        {
            "generator": segs[0]["generator"],
            "connections": segs[0]["connections"],
            "threads": segs[0]["threads"],
            "rps": round(ok / seconds, 1) if seconds else 0.0,
            "seconds": round(seconds, 3),
            "first_error": next((s["first_error"] for s in segs if s["first_error"]), None),
            # percentiles cannot be merged exactly: the mean of the runs' percentiles, weighted by requests
            "latency_ms": {
                k: round(sum(s["latency_ms"][k] * s["ok"] for s in segs) / ok, 2) if ok else 0.0
                for k in ("mean", "p50", "p90", "p99")
            }
            | {"max": max(s["latency_ms"]["max"] for s in segs)},
            "generator_cpu_s": round(sum(s["generator_cpu_s"] for s in segs), 3),
            "cpu": _combine_cpu([s["cpu"] for s in segs]),
            "outbox_backlog_at_end": max(s["outbox_backlog_at_end"] for s in segs),
            "outbox_drain_s": max(s["outbox_drain_s"] for s in segs),
            "segments": [
                {k: s[k] for k in ("rps", "ok", "seconds")}
                | {"p99_ms": s["latency_ms"]["p99"], "other_cpu_pct": s["cpu"]["other_pct"]}
                for s in segs
            ],
        }
    )
    cpu = out["cpu"]
    for who in ("server", "postgres"):
        used = cpu["pct_of_one_core"].get(who, 0.0) / 100 * cpu["wall_s"]
        out[f"{who}_cpu_ms_per_request"] = round(1000 * used / ok, 3) if ok else None
    out["generator_cpu_pct_of_one_core"] = (
        round(sum(s["generator_cpu_pct_of_one_core"] * s["seconds"] for s in segs) / seconds, 1) if seconds else 0.0
    )
    stored = sum(s["messages_stored"] for s in segs)
    check: dict = {"messages_stored": stored}
    problems = []
    if out["bad_status"] or out["gql_errors"] or out["socket_errors"]:
        problems.append(
            f"{out['bad_status']} non-200, {out['gql_errors']} GraphQL errors, "
            f"{out['socket_errors']} socket errors; first: {out['first_error']}"
        )
    if name.startswith("send"):
        # requests still in flight when the generator stops may commit without being counted
        if not ok <= stored <= ok + len(segs) * sizes.clients:
            problems.append(f"{stored} messages stored for {ok} successful sends")
        if out["duplicates"]:
            problems.append(f"{out['duplicates']} sends answered duplicate")
    if name == "read":
        out["advanced_fraction"] = round(1 - out["not_advanced"] / ok, 4) if ok else 0.0
    if problems:
        check["problem"] = "; ".join(problems)
    out["check"] = check
    return out


async def _start_server(
    pg: Postgres, scratch: Path, kafka: Kafka | None, workers: int = 1, broadcast_url: str | None = None
) -> Server:
    server = Server(pg.url, scratch, kafka, workers=workers, broadcast_url=broadcast_url)
    server.spawn()
    await asyncio.to_thread(server.wait_ready)
    return server


async def _throughput(
    results: dict,
    pg: Postgres,
    conn,
    sizes,
    scratch: Path,
    workdir: Path,
    kafka: Kafka | None,
    base_sources: dict,
    selected: tuple[str, ...],
    profile_dir: Path | None,
    profile_seconds: float,
    server_opts: dict,
) -> None:
    """send/read/inbox: for each, pgbench and HTTP alternate A B B A (half the duration each), so
    both sides see the same minutes of a noisy machine. chatgql is stopped during pgbench runs.
    With profile_dir, a profiled HTTP run (not measured) follows the two measured ones."""
    half = sizes.duration / 2
    results["pgbench"], results["http"] = {}, {}
    for name in (n for n in SCENARIOS if n in selected):
        script, scenario = _script(name, sizes), Scenario(name, sizes)
        log(f"{name}: pgbench / HTTP / HTTP / pgbench, {sizes.clients} connections, {half:g} s each")
        if sizes.warmup > 0:
            await asyncio.to_thread(pgbench.run, pg, script, sizes, workdir, sizes.warmup)
        a1 = await _pg_segment(pg, conn, name, script, sizes, workdir, half, PG_READ_BASES[0], base_sources)
        server = await _start_server(pg, scratch, kafka, **server_opts)
        try:
            if "probe" not in results:
                # with --only, read's first pgbench run may already have raised the watermarks
                results["probe"] = await _probe(server, sizes, READ_BASE_WARMUP - 1 if name == "read" else 1)
            sources = {"server": server.cpu_seconds, **base_sources}
            if sizes.warmup > 0:
                await asyncio.to_thread(httpload.run, server.port, scenario, workdir, sizes.warmup, READ_BASE_WARMUP)
            b1 = await _http_segment(server, conn, scenario, workdir, half, HTTP_READ_BASES[0], sources)
            b2 = await _http_segment(server, conn, scenario, workdir, half, HTTP_READ_BASES[1], sources)
            prof = None
            if profile_dir is not None:
                who = f"pid {server.pid}" + (f" and its {server.workers} workers" if server.workers > 1 else "")
                log(f"{name}: profiled HTTP run, {profile_seconds:g} s (py-spy on {who}; not measured)")
                prof = await _profile_segment(server, conn, scenario, workdir, profile_seconds, profile_dir)
        finally:
            await asyncio.to_thread(server.stop)
        await conn.execute("TRUNCATE outbox")
        a2 = await _pg_segment(pg, conn, name, script, sizes, workdir, half, PG_READ_BASES[1], base_sources)
        base = results["pgbench"][name] = _combine_pgbench(name, [a1, a2])
        http = results["http"][name] = _combine_http(name, [b1, b2], sizes)
        log(
            f"{name}: pgbench {a1['tps']:.0f} / {a2['tps']:.0f} tps, HTTP {b1['rps']:.0f} / {b2['rps']:.0f} req/s "
            f"-> ratio {http['rps'] / base['tps']:.3f}; {http['generator']} at {http['generator_cpu_pct_of_one_core']}% "
            f"of a core, server at {http['cpu']['pct_of_one_core'].get('server')}%, other {http['cpu']['other_pct']}%"
        )
        if prof is not None:
            prof = results.setdefault("profiles", {})[name] = _finish_profile(prof, http)
            if "error" in prof:
                log(f"{name}: profile failed: {prof['error']}")
            else:
                top = ", ".join(f"{b} {100 * v['share']:.0f}%" for b, v in list(prof["by_component"].items())[:5])
                log(f"{name}: profile {prof['samples']} samples; self time by package: {top}")


async def _phase(results: dict, name: str, coro) -> None:
    """Run one of live/fanout/connections; a failure is recorded (and reported), the run goes on."""
    try:
        results[name] = await coro
    except Exception as error:  # noqa: BLE001 - reported in results.json and the report
        log(f"{name} FAILED: {error!r}")
        results[name] = {"error": repr(error)}
        results["notes"].append(f"The {name} phase failed: {error!r}")


def _verdicts(results: dict) -> dict:
    v: dict = {}
    for figure in results.get("skipped") or ():
        for key in FIGURE_VERDICTS[figure]:
            target = TARGETS[key]
            v[key] = {"skipped": True, "met": None, "value": None, "target": TARGET_TEXT[key].format(target)}
    for name in SCENARIOS:
        http, base = results["http"].get(name), results["pgbench"].get(name)
        if http and base and base["tps"]:
            ratio = round(http["rps"] / base["tps"], 3)
            v[name] = {
                "value": ratio,
                "target": f">= {TARGETS[name]}",
                "met": ratio >= TARGETS[name],
                "http_rps": http["rps"],
                "pgbench_tps": base["tps"],
            }
    lv = results.get("live")
    if lv and "error" not in lv:
        p99 = lv["product"]["latency_ms"].get("p99")
        complete = lv["product"]["missing"] == 0 and not lv["product"].get("subscription_ended")
        v["live_p99_ms"] = {
            "value": p99,
            "target": f"< {TARGETS['live_p99_ms']} ms at {lv['product']['rate_per_s']:g}/s",
            "met": complete and p99 is not None and p99 < TARGETS["live_p99_ms"],
            "missing": lv["product"]["missing"],
        }
        v["live_vs_kafka_p99"] = {
            "value": lv["ratio_p99"],
            "target": f"<= {TARGETS['live_vs_kafka_p99']}x",
            "met": lv["ratio_p99"] is not None and lv["ratio_p99"] <= TARGETS["live_vs_kafka_p99"],
            "baseline": lv["baseline"]["kind"],
        }
        p50, base_p50 = lv["product"]["latency_ms"].get("p50"), lv["baseline"]["latency_ms"].get("p50")
        if p50 is not None and base_p50 is not None:
            kafka = lv["transport"].startswith("kafka")
            bound = TARGETS["live_p50_added_ms"] if kafka else TARGETS["live_p50_no_kafka_ms"]
            v["live_p50_added_ms"] = {
                "value": round(p50 - base_p50, 3),
                "target": f"<= {bound} ms" if kafka else f"< {bound} ms (no Kafka: the p50 itself)",
                "met": complete and (p50 - base_p50 <= bound if kafka else p50 < bound),
            }
    fo = results.get("fanout")
    if fo and "error" not in fo:
        v["fanout_last_ms"] = {
            "value": fo["last_ms_median"],
            "worst": fo["last_ms_max"],
            "target": f"< {TARGETS['fanout_last_ms']} ms (median of rounds)",
            "met": fo["last_ms_median"] < TARGETS["fanout_last_ms"],
        }
    co = results.get("connections")
    if co and co.get("kb_per_subscription") is not None:
        v["kb_per_subscription"] = {
            "value": co["kb_per_subscription"],
            "target": f"<= {TARGETS['kb_per_subscription']} KB ({co.get('variant', 'graphql-transport-ws')})",
            "met": co["kb_per_subscription"] <= TARGETS["kb_per_subscription"],
        }
    return v


async def _phases(
    results: dict,
    pg: Postgres,
    conn,
    sizes,
    scratch: Path,
    kafka: Kafka | None,
    cpu_sources: dict,
    selected: tuple[str, ...],
    server_opts: dict,
    profile_dir: Path | None = None,
) -> None:
    """live, fanout, connections (those selected), on a chatgql server of their own."""
    server = None
    try:
        server = await _start_server(pg, scratch, kafka, **server_opts)
        bus = "redis bus" if server_opts.get("broadcast_url") else "in-process bus"
        log(
            f"chatgql serve pid {server.pid} on port {server.port} ({'Kafka + ' if kafka else ''}{bus}"
            + (
                f", {server.workers} workers: pids {', '.join(map(str, server.worker_pids()))})"
                if server.workers > 1
                else ")"
            )
        )
        cpu_sources = {"server": server.cpu_seconds, **cpu_sources}
        if "live" in selected:
            with _mark("live"):
                await _phase(
                    results,
                    "live",
                    live.run(
                        server,
                        kafka,
                        sizes,
                        cpu_sources,
                        lambda: _drain_outbox(conn),
                        server_opts.get("broadcast_url"),
                        backlog=lambda: _count(conn, "outbox"),
                        profile_dir=profile_dir,
                        commit_baseline=lambda rate: asyncio.to_thread(
                            pgbench.fixed_rate_latency,
                            pg,
                            pgbench.send_script(sizes, hot=False),
                            sizes,
                            scratch / "work",
                            rate,
                            sizes.live_seconds,
                        ),
                    ),
                )
            if "error" not in results["live"]:
                p, b = results["live"]["product"]["latency_ms"], results["live"]["baseline"]["latency_ms"]
                log(f"live p50/p99 {p.get('p50')}/{p.get('p99')} ms; baseline {b.get('p50')}/{b.get('p99')} ms")
            await _drain_outbox(conn)
        if "fanout" in selected:
            with _mark("fanout"):
                await _phase(results, "fanout", fanout.run(server, sizes, cpu_sources))
        if "connections" in selected:
            # memory per connection on a fresh server process: one that served the fanout's
            # websockets has freed memory to reuse, which would hide what new ones cost
            if "live" in selected or "fanout" in selected:
                await asyncio.to_thread(server.stop)
                server = await _start_server(pg, scratch, kafka, **server_opts)

            async def fresh(old: Server) -> Server:
                nonlocal server
                server = None
                await asyncio.to_thread(old.stop)
                server = await _start_server(pg, scratch, kafka, **server_opts)
                return server

            with _mark("connections"):
                # smoke mode checks the mechanics: every variant on the one server, no restarts
                fresh_server = fresh if sizes.mode == "full" else None
                await _phase(results, "connections", connections.run(server, sizes, fresh_server))
        if "error" not in results.get("connections", {"error": "skipped"}):
            log(f"connections: {results['connections']['kb_per_subscription']} KB per idle subscription")
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)


async def run(
    sizes: layout.Sizes,
    out_dir: Path,
    report_path: Path | None,
    use_kafka: bool,
    keep_scratch: bool = False,
    only: tuple[str, ...] | None = None,
    profile: bool = False,
    profile_seconds: float = 5.0,
    workers: int = 1,
    redis_bus: bool = False,
) -> dict:
    t_start = time.monotonic()
    selected = tuple(f for f in FIGURES if only is None or f in only)
    fd_limit = raise_fd_limit()
    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-bench-"))
    workdir = scratch / "work"
    workdir.mkdir()
    results: dict = {
        "mode": sizes.mode,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "sizes": sizes.as_dict(),
        "load_generator": "wrk " + "(Lua: bench/wrk/gql.lua)"
        if httpload.wrk_path()
        else "multi-process Python raw-HTTP generator (wrk not installed)",
        "notes": [],
        "figures": list(selected),
        "skipped": [f for f in FIGURES if f not in selected],
        "only": list(only) if only is not None else None,
        # how `chatgql serve` runs: N worker processes (the default: one per core) and the bus that
        # feeds subscriptions (memory: in-process, one worker; hub: the supervisor's, shared by the
        # workers; redis: the bench's own redis-server, shared by the workers)
        "config": {
            "workers": workers,
            "bus": "redis" if redis_bus and workers > 1 else "hub" if workers > 1 else "memory",
            "kafka": use_kafka,
        },
    }
    results["machine"]["fd_limit"] = fd_limit
    profile_dir = None
    if profile and any(n in selected for n in (*SCENARIOS, "live")):
        exe = profiles.pyspy_path()
        results["profiling"] = {
            "tool": profiles.pyspy_version(exe),
            "path": exe,
            "rate_hz": profiles.RATE,
            "seconds": profile_seconds,
            "dir": str(out_dir / "profiles"),
        }
        if exe:
            profile_dir = out_dir / "profiles"
        else:
            results["profiling"]["error"] = "py-spy is not installed (pip install py-spy, or the bench extra)"
            results["notes"].append("No profiles: " + results["profiling"]["error"] + ".")
            log("py-spy not found: no profiles")
    else:
        results["profiling"] = {"disabled": True}
    pg = kafka = redis = None
    conn = None
    server_opts: dict = {"workers": workers}
    try:
        # The broker warms up (Kafka.warm_up) while PostgreSQL starts and the data is seeded.
        kafka_task = asyncio.create_task(asyncio.to_thread(_warm_kafka, scratch)) if use_kafka else None
        log(f"{sizes.mode} run; scratch {scratch}" + (f"; chatgql with {workers} workers" if workers > 1 else ""))
        if workers > 1 and redis_bus:
            redis = Redis.start(scratch)  # on the main thread: its death signal follows the starting thread
            server_opts["broadcast_url"] = redis.url
            results["config"]["bus_url"] = redis.url
            log(f"redis-server pid {redis.pid} at {redis.url}")
        pg = await asyncio.to_thread(Postgres.start, scratch / "pg")
        await db.upgrade(pg.url)
        conn = await _connect(pg)
        t_seed = time.monotonic()
        results["seed"] = await layout.seed(conn, sizes)
        results["seed"]["seconds"] = round(time.monotonic() - t_seed, 2)
        if kafka_task is not None:
            kafka, results["kafka_warm_up"] = await kafka_task
            log(f"Kafka at {kafka.bootstrap}, warmed up: {results['kafka_warm_up']}")
        pg_version = await conn.fetchval("SHOW server_version")
        settings = {
            r["name"]: r["setting"]
            for r in await conn.fetch(
                "SELECT name, setting FROM pg_settings WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', "
                "'max_connections', 'wal_level', 'max_wal_size', 'checkpoint_timeout')"
            )
        }
        results["postgres_settings"] = settings
        results["versions"] = versions(
            {
                "postgresql": pg_version,
                "kafka": Kafka.version() if kafka else None,
                "redis": Redis.version() if redis else None,
            }
        )

        cpu_sources = {"postgres": pg.cpu_seconds}
        if kafka:
            cpu_sources["kafka"] = kafka.cpu_seconds
        if redis:
            cpu_sources["redis"] = redis.cpu_seconds
        await _throughput(
            results,
            pg,
            conn,
            sizes,
            scratch,
            workdir,
            kafka,
            cpu_sources,
            selected,
            profile_dir,
            profile_seconds,
            server_opts,
        )
        if any(p in selected for p in PHASES):
            await _phases(results, pg, conn, sizes, scratch, kafka, cpu_sources, selected, server_opts, profile_dir)
    finally:
        if conn is not None:
            await conn.close()
        results["server_log"] = log_summary(scratch / "chatgql.log")
        for entry in results["server_log"]:
            entry["phases"] = sorted(
                {t["phase"] for t in TIMELINE for at in entry["times"] if t["start"] <= at <= t["end"]}
                or {"between measured runs"}
            )
            entry["times"] = [datetime.fromtimestamp(at).strftime("%H:%M:%S") for at in entry["times"]][:50]
        results["timeline"] = [
            {
                "phase": t["phase"],
                "start": datetime.fromtimestamp(t["start"]).strftime("%H:%M:%S"),
                "seconds": round(t["end"] - t["start"], 1),
            }
            for t in TIMELINE
        ]
        if kafka is not None:
            await asyncio.to_thread(kafka.stop)
        if redis is not None:
            await asyncio.to_thread(redis.stop)
        if pg is not None:
            await asyncio.to_thread(pg.stop)
        if not keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        results["total_seconds"] = round(time.monotonic() - t_start, 1)
        results["verdicts"] = _verdicts(results) if "http" in results else {}
        dump_json(out_dir / "results.json", results)
    if report_path is not None:
        report_path.write_text(report.render(results))
        log(f"wrote {report_path}")
    log(f"wrote {out_dir / 'results.json'} ({results['total_seconds']} s)")
    return results
