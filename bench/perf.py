"""Server CPU per request, this tree against a baseline commit, interleaved in one run.

`python -m bench.perf [--baseline REV] [--only inbox,send_spread,read] [--rounds N] [--seconds S] [--persisted]`

The machine this runs on is shared and its load changes by the minute; the
CPU a request costs changes with it (a process that sleeps between requests
runs the same instructions slower, and every socket write that wakes another
process costs more on a busy machine). So the two servers are compared in
the same minutes: both run at once (the idle one costs nothing), against one
PostgreSQL, a database each (migrated by its own code: the baseline may predate
a migration that changed a column's type) seeded alike with the data of
`python -m bench` (bench/layout.py, smaller send/read sets), and the load
alternates A B B A ... in short segments
(wrk, as `python -m bench` drives it). Each server's CPU (user and system,
from /proc) is divided by the requests it answered in its own segments.

- baseline: the code where HEAD left REV (default main: the branch point), exported
  with `git archive` into a scratch directory and run with it on PYTHONPATH;
- this tree: src/ of this checkout.

--persisted: this tree's requests name their documents by id (`documentId`, the sha256 of the
text, loaded into its database) where the baseline's send the text; with `--baseline HEAD`
(the same code on both sides) it says what a persisted document saves per request.

Writes bench/results/perf.md (or --report) and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import os
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import psutil

from . import httpload, layout, profiles
from .httpload import QUERIES
from .infra import REPO, Kafka, Postgres, Server, log, raise_fd_limit
from .queries import Scenario

FIGURES = ("inbox", "send_spread", "send_pair", "read", "delivered")
TARGETS_MS = {"inbox": 0.8, "send_spread": 0.4, "send_pair": 0.4, "read": 0.35, "delivered": 0.35}
SIZES = dataclasses.replace(
    layout.FULL,
    mode="perf",
    spread=2_000,
    read_conversations=2_000,
    hot_members=10,
    fanout_members=10,
    live_conversations=10,
    seed_messages=3,
)


def export_src(rev: str, into: Path) -> Path:
    """src/ of rev, as a directory to put on PYTHONPATH (with alembic/ beside it where rev kept its
    migrations at the repository's root)."""
    into.mkdir(parents=True)
    archive = into / "baseline.tar"
    paths = ["src"]
    top = subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", rev], check=True, capture_output=True)
    if "alembic" in top.stdout.decode().split():
        paths.append("alembic")
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), rev, *paths], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def _cpu(server: Server) -> tuple[float, float]:
    """User and system CPU of the server's process tree (with workers: the supervisor and its workers)."""
    times = []
    for process in server.processes():
        with contextlib.suppress(psutil.Error):
            times.append(process.cpu_times())
    return sum(t.user for t in times), sum(t.system for t in times)


def _segment(
    server: Server,
    scenario: Scenario,
    workdir: Path,
    seconds: float,
    base: int,
    profile: Path | None = None,
    pg: Postgres | None = None,
    broker: Kafka | None = None,
) -> dict:
    """One segment of load on `server`; with pg, PostgreSQL's CPU during it too (the other server is
    idle meanwhile, so what PostgreSQL spends is this server's requests' and its relay's)."""
    recorder = None
    if profile is not None:  # py-spy on the server for this segment, its raw stacks appended to `profile`
        recorder = profiles.Recorder(server.pid, seconds, profile.with_suffix(".part")).start()
        recorder.attached()
    user0, sys0 = _cpu(server)
    pg0 = pg.cpu_seconds() if pg is not None else 0.0
    machine0 = psutil.cpu_times()
    kafka0 = broker.cpu_seconds() if broker is not None else 0.0
    load = httpload.run(server.port, scenario, workdir, seconds, base)
    user1, sys1 = _cpu(server)
    pg1 = pg.cpu_seconds() if pg is not None else 0.0
    machine1 = psutil.cpu_times()
    kafka1 = broker.cpu_seconds() if broker is not None else 0.0
    if recorder is not None and profile is not None:
        recorder.wait()
        with profile.open("a") as out:
            out.write(recorder.out.read_text() if recorder.out.exists() else "")
    errors = load["bad_status"] + load["gql_errors"] + load["socket_errors"]
    if errors:
        raise RuntimeError(f"{scenario.name}: {errors} failed requests ({load['first_error']})")
    idle = (machine1.idle + machine1.iowait) - (machine0.idle + machine0.iowait)
    total = sum(machine1) - sum(machine0)
    return {
        "ok": load["ok"],
        "user": user1 - user0,
        "sys": sys1 - sys0,
        "rps": load["rps"],
        "pg": pg1 - pg0,
        "kafka": kafka1 - kafka0,
        "idle": idle / total if total > 0 else 0.0,
    }


def _per_request(segments: list[dict]) -> dict:
    ok = sum(s["ok"] for s in segments)
    user, system = sum(s["user"] for s in segments), sum(s["sys"] for s in segments)
    each = [1000 * (s["user"] + s["sys"]) / s["ok"] for s in segments]
    return {
        "ms": 1000 * (user + system) / ok,
        "user_ms": 1000 * user / ok,
        "sys_ms": 1000 * system / ok,
        "segments_ms": each,
        "spread_ms": (max(each) - min(each)) if len(each) > 1 else 0.0,
        "rps": statistics.mean(s["rps"] for s in segments),
        "rps_median": statistics.median(s["rps"] for s in segments),
        "pg_ms": 1000 * sum(s.get("pg", 0.0) for s in segments) / ok,
        "pg_segments_ms": [1000 * s.get("pg", 0.0) / s["ok"] for s in segments],
        "rps_spread": max(s["rps"] for s in segments) - min(s["rps"] for s in segments),
        "idle": statistics.median(s.get("idle", 0.0) for s in segments),
        "kafka_ms": 1000 * sum(s.get("kafka", 0.0) for s in segments) / ok,
    }


def _database_url(pg: Postgres, name: str) -> str:
    parts = urlsplit(pg.url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def _create_databases(pg: Postgres, names: list[str]) -> None:
    conn = await asyncpg.connect(pg.url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        for name in names:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _seed(url: str) -> None:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await layout.seed(conn, SIZES)
    finally:
        await conn.close()


async def _load_documents(url: str) -> None:
    """The scenarios' documents, as `chatgql documents load` stores them (id: the text's sha256)."""
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        for text in set(QUERIES.values()):
            digest = hashlib.sha256(text.encode()).hexdigest()
            await conn.execute(
                "INSERT INTO persisted_document (id, body, body_sha256) VALUES ($1, $2, $1) ON CONFLICT DO NOTHING",
                digest,
                text,
            )
    finally:
        await conn.close()


def run(
    baseline: str,
    figures: tuple[str, ...],
    rounds: int,
    seconds: float,
    report: Path,
    profile: Path | None = None,
    workers: int = 1,
    workers_ab: tuple[int, int] | None = None,
    kafka: bool = False,
    persisted: bool = False,
    env: dict[str, str] | None = None,
) -> dict:
    """env: more environment for this tree's server only (a setting's A/B: `--baseline HEAD --env
    CHATGQL_X=...`). workers_ab (A, B): both sides run this tree, the first as A workers, the second as B (instead of
    a baseline commit against this tree). kafka: a broker for both, a topic and consumer group each."""
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-perf-"))
    workdir = scratch / "work"
    workdir.mkdir()
    servers: dict[str, Server] = {}
    pg = broker = None
    results: dict[str, dict] = {}
    try:
        if workers_ab is None:
            base_rev = subprocess.run(
                ["git", "-C", str(REPO), "merge-base", "--", "HEAD", baseline],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()[:10]
            base_src = export_src(base_rev, scratch / "baseline")
            counts = {"baseline": workers, "this tree": workers}
        else:
            base_rev, base_src = "(this tree)", REPO / "src"
            counts = {"baseline": workers_ab[0], "this tree": workers_ab[1]}
        pg = Postgres.start(scratch / "pg")
        broker = Kafka.start(scratch) if kafka else None
        warming = None
        if broker is not None:  # while the servers start and their databases are seeded
            warming = concurrent.futures.ThreadPoolExecutor(1).submit(broker.warm_up)
        # Each server has a database of its own in the one PostgreSQL, migrated by its own code
        # (the baseline may predate a migration that changed a column's type), seeded alike.
        sides = {"baseline": base_src, "this tree": REPO / "src"}
        databases = {name: f"perf_{i}" for i, name in enumerate(sides)}
        asyncio.run(_create_databases(pg, list(databases.values())))
        for i, (name, src) in enumerate(sides.items()):
            server = Server(_database_url(pg, databases[name]), scratch, broker, workers=counts[name])
            if broker is not None:
                server.env["CHATGQL_KAFKA_TOPIC"] = f"chat.events.{i}"
                server.env["CHATGQL_KAFKA_GROUP"] = f"fanout-{i}"
            server.env["PYTHONPATH"] = str(src)
            server.env["CHATGQL_MIGRATE_ON_START"] = "true"
            if name == "this tree":
                server.env.update(env or {})
            server.log_path = scratch / f"chatgql-{name.replace(' ', '-')}.log"
            server.spawn()
            servers[name] = server
        for name, server in servers.items():
            server.wait_ready()
            asyncio.run(_seed(_database_url(pg, databases[name])))
        if warming is not None:
            log(f"Kafka warmed up: {warming.result()}")
        if persisted:
            asyncio.run(_load_documents(_database_url(pg, databases["this tree"])))
        read_base = 1
        for figure in figures:
            scenario = Scenario(figure, SIZES)
            by_id = Scenario(figure, SIZES)
            by_id.persisted = persisted
            scenarios = {"baseline": scenario, "this tree": by_id}
            segments: dict[str, list[dict]] = {name: [] for name in servers}
            for name, server in servers.items():  # warm-up: plans, statement caches, connections
                _segment(server, scenarios[name], workdir, 2, read_base)
                read_base += 10_000_000
            order = list(servers)
            for round_ in range(rounds):
                for name in order if round_ % 2 == 0 else reversed(order):
                    stacks = None if profile is None else profile / f"{figure}-{name.replace(' ', '-')}.txt"
                    segments[name].append(
                        _segment(servers[name], scenarios[name], workdir, seconds, read_base, stacks, pg, broker)
                    )
                    read_base += 10_000_000
            results[figure] = {name: _per_request(s) for name, s in segments.items()}
            line = ", ".join(f"{name} {r['ms']:.3f} ms" for name, r in results[figure].items())
            log(f"perf {figure}: server CPU per request: {line}")
    finally:
        for server in servers.values():
            server.stop()
        if broker is not None:
            broker.stop()
        if pg is not None:
            pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if workers_ab is not None:
        text = _report_workers(results, workers_ab, rounds, seconds, kafka)
    else:
        text = _report(results, base_rev, rounds, seconds, workers)
    if env:
        text += "\nThis tree's server ran with " + ", ".join(f"`{k}={v}`" for k, v in env.items()) + ".\n"
    if persisted:
        text += "\nThis tree's requests named their documents by id (`documentId`); the baseline's sent the text.\n"
    report.write_text(text)
    print(text)
    return results


def _report(results: dict, base_rev: str, rounds: int, seconds: float, workers: int = 1) -> str:
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "src"], capture_output=True, text=True)
    lines = [
        "# Server CPU per request: this tree against a baseline (`python -m bench.perf`)",
        "",
        f"Baseline: commit {base_rev}; this tree: {head}{' with uncommitted changes' if dirty.stdout.strip() else ''}. "
        + (
            f"Each server ran as {workers} workers (`chatgql serve --workers {workers}`), its CPU summed over "
            "the supervisor and its workers. "
            if workers > 1
            else "Each server ran as one process. "
        )
        + f"Both servers ran at once against one PostgreSQL, a database each; the load (wrk, {SIZES.clients} connections) "
        f"alternated between them in {rounds} segments of {seconds:g} s each per figure. "
        f"Load average at the end: {', '.join(f'{v:.1f}' for v in os.getloadavg())} (2 cores, shared).",
        "",
        "| figure | target | baseline ms (user + sys) | this tree ms (user + sys) | change | segments (this tree) "
        "| PostgreSQL ms: baseline, this tree (change) | Kafka ms: baseline, this tree | req/s (median): baseline, this tree "
        "| machine idle (median): baseline, this tree |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for figure, r in results.items():
        base, new = r["baseline"], r["this tree"]
        segs = " / ".join(f"{v:.2f}" for v in new["segments_ms"])
        lines.append(
            f"| {figure} | {TARGETS_MS[figure]} | {base['ms']:.3f} ({base['user_ms']:.3f} + {base['sys_ms']:.3f}) "
            f"| **{new['ms']:.3f}** ({new['user_ms']:.3f} + {new['sys_ms']:.3f}) "
            f"| {100 * (new['ms'] / base['ms'] - 1):+.0f}% | {segs} "
            f"| {base['pg_ms']:.3f}, {new['pg_ms']:.3f} ({100 * (new['pg_ms'] / base['pg_ms'] - 1):+.0f}%) "
            f"| {base['kafka_ms']:.3f}, {new['kafka_ms']:.3f} | {base['rps_median']:,.0f}, {new['rps_median']:,.0f} "
            f"| {100 * base['idle']:.0f}%, {100 * new['idle']:.0f}% |"
        )
    lines += ["", f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", ""]
    return "\n".join(lines)


def _report_workers(results: dict, workers_ab: tuple[int, int], rounds: int, seconds: float, kafka: bool) -> str:
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    a, b = workers_ab
    lines = [
        f"# {a} against {b} workers, this tree, the same minutes (`python -m bench.perf --workers-ab {a},{b}`)",
        "",
        f"Tree {head}. Both servers ran at once against one PostgreSQL, a database each"
        + (
            ", and one Kafka broker, a topic and consumer group each (relay and consumer on)"
            if kafka
            else ", relay on, no Kafka"
        )
        + f"; the load (wrk, {SIZES.clients} connections) alternated between them in {rounds} segments of {seconds:g} s "
        f"per figure. Load average at the end: {', '.join(f'{v:.1f}' for v in os.getloadavg())} (2 cores, shared).",
        "",
        f"| figure | {a} worker(s): req/s (median, spread) | {b} worker(s): req/s | {b} / {a} req/s "
        f"| {a}: server CPU ms a request | {b}: server CPU ms | PostgreSQL CPU ms: {a}, {b} "
        f"| Kafka CPU ms: {a}, {b} | machine idle (median): {a}, {b} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for figure, r in results.items():
        x, y = r["baseline"], r["this tree"]
        lines.append(
            f"| {figure} | {x['rps_median']:,.0f} ({x['rps_spread']:,.0f}) | {y['rps_median']:,.0f} ({y['rps_spread']:,.0f}) "
            f"| **{y['rps_median'] / x['rps_median']:.2f}** | {x['ms']:.3f} | {y['ms']:.3f} "
            f"| {x['pg_ms']:.3f}, {y['pg_ms']:.3f} | {x['kafka_ms']:.3f}, {y['kafka_ms']:.3f} "
            f"| {100 * x['idle']:.0f}%, {100 * y['idle']:.0f}% |"
        )
    lines += ["", f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.perf", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline", default="main", help="compare with the point where HEAD left this revision (default: main)"
    )
    parser.add_argument("--only", default=",".join(FIGURES), help="comma-separated subset of " + ", ".join(FIGURES))
    parser.add_argument("--rounds", type=int, default=4, help="segments per server and figure (default 4)")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of one segment (default 4 s)")
    parser.add_argument("--report", type=Path, default=REPO / "bench" / "results" / "perf.md")
    parser.add_argument(
        "--profile",
        type=Path,
        help="also run py-spy on each server in its segments: raw stacks in DIR/<figure>-<server>.txt "
        "(py-spy's own CPU makes the figures of such a run worse; measure without it)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="each server as `chatgql serve --workers N` (its CPU summed over the supervisor and its workers)",
    )
    parser.add_argument(
        "--workers-ab",
        help="A,B: this tree on both sides, as A workers against B workers (instead of a baseline commit)",
    )
    parser.add_argument("--kafka", action="store_true", help="a Kafka broker for both servers (relay and consumer on)")
    parser.add_argument(
        "--persisted", action="store_true", help="this tree sends documentId (the sha256) instead of the text"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for this tree's server only (a setting's A/B with --baseline HEAD); repeatable",
    )
    args = parser.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    workers_ab = tuple(int(n) for n in args.workers_ab.split(",")) if args.workers_ab else None
    if workers_ab is not None and len(workers_ab) != 2:
        parser.error("--workers-ab takes two counts, A,B")
    figures = tuple(f for f in args.only.split(",") if f)
    unknown = set(figures) - set(FIGURES)
    if unknown:
        parser.error(f"unknown figures: {', '.join(sorted(unknown))}")
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    run(
        args.baseline,
        figures,
        args.rounds,
        args.seconds,
        args.report,
        args.profile,
        args.workers,
        workers_ab,
        args.kafka,
        args.persisted,
        env,
    )


if __name__ == "__main__":
    main()
