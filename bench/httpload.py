"""HTTP load: wrk with bench/wrk/gql.lua, or (no wrk) a multi-process asyncio generator."""

from __future__ import annotations

import asyncio
import hashlib
import json
import multiprocessing as mp
import random
import re
import resource
import shutil
import time
from pathlib import Path

from . import layout
from .infra import run_with_rusage, use_uvloop
from .queries import DELIVERED, INBOX, READ, SEND, Scenario

LUA = Path(__file__).resolve().parent / "wrk" / "gql.lua"
QUERIES = {
    "send_spread": SEND,
    "send_pair": SEND,
    "send_hot": SEND,
    "read": READ,
    "delivered": DELIVERED,
    "inbox": INBOX,
}


def wrk_path() -> str | None:
    return shutil.which("wrk")


def write_tokens(scenario: Scenario, workdir: Path) -> Path:
    path = workdir / f"tokens_{scenario.name}.txt"
    if not path.exists():
        path.write_text("\n".join(scenario.tokens()) + "\n")
    return path


def run(port: int, scenario: Scenario, workdir: Path, seconds: float, read_base: int = 0) -> dict:
    """One closed-loop run with sizes.clients connections; returns counts, rate, latency, generator CPU."""
    tokens = write_tokens(scenario, workdir)
    if scenario.persisted and not wrk_path():
        raise RuntimeError("persisted documents are sent by wrk only: install wrk")
    if wrk_path():
        return _run_wrk(port, scenario, tokens, workdir, seconds, read_base)
    return _run_python(port, scenario, tokens, seconds, read_base)


def _run_wrk(port: int, scenario: Scenario, tokens: Path, workdir: Path, seconds: float, read_base: int) -> dict:
    s = scenario.sizes
    query = json.dumps(QUERIES[scenario.name])[1:-1]
    field = "query"
    if scenario.persisted:  # the document by id (loaded into the server's database by the caller)
        field, query = "documentId", hashlib.sha256(QUERIES[scenario.name].encode()).hexdigest()
    config = workdir / f"wrk_{scenario.name}.lua"
    config.write_text(
        "return {\n"
        f'  mode = "{scenario.name}",\n  tokens = [==[{tokens}]==],\n  query = [==[{query}]==],\n'
        f'  field = "{field}",\n'
        f"  threads = {s.threads},\n  seed = {random.randint(1, 2**30)},\n  hot_cid = {layout.HOT_CID},\n"
        f"  read_cid0 = {layout.READ_CID0},\n  read_base = {read_base},\n  inbox_page = {s.inbox_page},\n"
        "}\n"
    )
    cmd = [
        wrk_path(),
        f"-t{s.threads}",
        f"-c{s.clients}",
        f"-d{max(1, int(round(seconds)))}s",
        "--timeout",
        "10s",
        "-s",
        str(LUA),
        f"http://127.0.0.1:{port}/graphql",
        "--",
        str(config),
    ]
    status, out, cpu, wall = run_with_rusage(cmd, workdir / f"wrk_{scenario.name}.out")
    m = re.search(r"^WRKJSON (\{.*\})$", out, re.M)
    if status != 0 or not m:
        raise RuntimeError(f"wrk {scenario.name} failed (exit {status}):\n{out[-3000:]}")
    r = json.loads(m.group(1))
    seconds_run = r["duration_us"] / 1e6
    return {
        "generator": "wrk",
        "requests": r["requests"],
        "ok": r["ok"],
        "rps": round(r["ok"] / seconds_run, 1),
        "seconds": round(seconds_run, 3),
        "bad_status": r["bad_status"],
        "gql_errors": r["gql_errors"],
        "socket_errors": r["connect_errors"] + r["read_errors"] + r["write_errors"] + r["timeouts"],
        "duplicates": r["duplicates"],
        "not_advanced": r["not_advanced"],
        "first_error": r["first_error"] or None,
        "latency_ms": {
            "mean": round(r["lat_mean_us"] / 1000, 2),
            "p50": r["lat_p50_us"] / 1000,
            "p90": r["lat_p90_us"] / 1000,
            "p99": r["lat_p99_us"] / 1000,
            "max": r["lat_max_us"] / 1000,
        },
        "connections": s.clients,
        "threads": s.threads,
        "generator_cpu_pct_of_one_core": round(100 * cpu / wall, 1),
        "generator_cpu_s": round(cpu, 3),
    }


# --------------------------------------------------------------------- fallback: Python processes


def _worker(
    port: int,
    name: str,
    sizes: layout.Sizes,
    tokens_path: str,
    part: int,
    parts: int,
    connections: int,
    seconds: float,
    read_base: int,
    out: mp.Queue,
) -> None:
    use_uvloop()
    from .rawhttp import Connection

    scenario = Scenario(name, sizes)
    tokens = Path(tokens_path).read_text().split()
    rng = random.Random(random.randint(0, 2**30) + part)
    stats = {
        "ok": 0,
        "requests": 0,
        "bad_status": 0,
        "gql_errors": 0,
        "duplicates": 0,
        "not_advanced": 0,
        "socket_errors": 0,
        "first_error": None,
    }
    latencies: list[float] = []
    counter = 0

    async def loop(deadline: float) -> None:
        nonlocal counter
        conn = await Connection("127.0.0.1", port).open()
        while time.monotonic() < deadline:
            counter += 1
            index, body = scenario.python_request(rng, part, parts, counter, read_base)
            t0 = time.perf_counter()
            try:
                status, payload = await conn.post("/graphql", body, f"Bearer {tokens[index]}")
            except Exception as error:
                stats["socket_errors"] += 1
                stats["first_error"] = stats["first_error"] or repr(error)
                continue
            latencies.append(time.perf_counter() - t0)
            stats["requests"] += 1
            if status != 200:
                stats["bad_status"] += 1
                stats["first_error"] = stats["first_error"] or f"HTTP {status} {payload[:200]!r}"
            elif b'"errors"' in payload:
                stats["gql_errors"] += 1
                stats["first_error"] = stats["first_error"] or payload[:300].decode(errors="replace")
            else:
                stats["ok"] += 1
                if name in ("read", "delivered") and not re.search(rb'"advanced":\s*true', payload):
                    stats["not_advanced"] += 1
                if name.startswith("send") and re.search(rb'"duplicate":\s*true', payload):
                    stats["duplicates"] += 1
        conn.close()

    async def main() -> None:
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(loop(deadline) for _ in range(connections)))

    asyncio.run(main())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((stats, latencies, usage.ru_utime + usage.ru_stime))


def _run_python(port: int, scenario: Scenario, tokens: Path, seconds: float, read_base: int) -> dict:
    s = scenario.sizes
    parts = max(1, s.threads)
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    per = [s.clients // parts + (1 if i < s.clients % parts else 0) for i in range(parts)]
    procs = [
        ctx.Process(target=_worker, args=(port, scenario.name, s, str(tokens), i, parts, per[i], seconds, read_base, q))
        for i in range(parts)
    ]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    results = [q.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(30)
    wall = time.monotonic() - t0
    stats: dict = {}
    lat: list[float] = []
    cpu = 0.0
    for st, ls, c in results:
        for k, v in st.items():
            if k == "first_error":
                stats[k] = stats.get(k) or v
            else:
                stats[k] = stats.get(k, 0) + v
        lat += ls
        cpu += c
    lat.sort()

    def pct(p: float) -> float:
        return round(1000 * lat[min(len(lat) - 1, int(p / 100 * len(lat)))], 3) if lat else 0.0

    return {
        "generator": f"python asyncio raw-HTTP, {parts} processes (wrk not installed)",
        **stats,
        "rps": round(stats["ok"] / seconds, 1),
        "seconds": seconds,
        "latency_ms": {
            "mean": round(1000 * sum(lat) / len(lat), 2) if lat else 0.0,
            "p50": pct(50),
            "p90": pct(90),
            "p99": pct(99),
            "max": pct(100),
        },
        "connections": s.clients,
        "threads": parts,
        "generator_cpu_pct_of_one_core": round(100 * cpu / wall, 1),
        "generator_cpu_s": round(cpu, 3),
    }
