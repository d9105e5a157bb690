"""python -m bench [--smoke] [--only FIGURES] [--profile | --no-profile] [--profile-seconds S] [--out DIR]
[--report PATH] [--kafka | --no-kafka] [--keep] [--workers N] [--connections N]"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="chatgql benchmark (see bench/README.md)")
    parser.add_argument("--smoke", action="store_true", help="tiny numbers, a few seconds (the test suite runs this)")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="directory for results.json (default bench/out)")
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="markdown report (default: bench/results/bench.md in full mode, OUT/RESULTS.smoke.md in smoke, "
        "OUT/RESULTS.only.md with --only, OUT/RESULTS.workersN.md with --workers N > 1)",
    )
    kafka = parser.add_mutually_exclusive_group()
    kafka.add_argument(
        "--kafka",
        dest="kafka",
        action="store_true",
        default=None,
        help="use a real Kafka (scripts/kafka.sh); the default in full mode",
    )
    kafka.add_argument(
        "--no-kafka",
        dest="kafka",
        action="store_false",
        help="in-process event bus instead of Kafka; the default in smoke mode",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, scripts)")
    parser.add_argument(
        "--only",
        default=None,
        metavar="FIGURES",
        help="comma-separated subset of send_spread, send_hot, read, inbox, live, fanout, connections "
        "(default: all); the others are reported as skipped. The default report is then "
        "OUT/RESULTS.only.md, so a partial run does not replace bench/results/bench.md",
    )
    prof = parser.add_mutually_exclusive_group()
    prof.add_argument(
        "--profile",
        dest="profile",
        action="store_true",
        default=None,
        help="after each HTTP figure, a short extra run with py-spy on the server (default in full mode)",
    )
    prof.add_argument(
        "--no-profile", dest="profile", action="store_false", help="no py-spy profiles (the default in smoke mode)"
    )
    parser.add_argument(
        "--profile-seconds",
        type=float,
        default=None,
        help="length of each profiled run (default 5 s, 2 s in smoke mode)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="`chatgql serve --workers N` (CHATGQL_WORKERS): N uvicorn worker processes sharing the "
        "port, their live events and rate limits through the supervisor's hub. Default: chatgql's own "
        "default, one per core. Another N writes the report to OUT/RESULTS.workersN.md",
    )
    parser.add_argument(
        "--redis-bus",
        action="store_true",
        help="with workers: a redis-server for their bus (CHATGQL_BROADCAST_URL) instead of the hub",
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=None,
        metavar="N",
        help="idle websockets the connections figure opens per variant (default 10,000; 50 in smoke mode)",
    )
    args = parser.parse_args(argv)
    if args.connections is not None and args.connections < 1:
        parser.error("--connections: at least 1")
    from chatgql.settings import default_workers as chatgql_default_workers

    default_workers = chatgql_default_workers()
    if args.workers is None:
        args.workers = default_workers
    if args.workers < 1:
        parser.error("--workers: at least 1")
    from .run import FIGURES

    only = None
    if args.only is not None:
        only = tuple(dict.fromkeys(f.strip() for f in args.only.split(",") if f.strip()))
        unknown = [f for f in only if f not in FIGURES]
        if unknown or not only:
            parser.error(
                f"--only: unknown figure(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(FIGURES)}"
            )

    os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    from . import layout
    from .run import run

    sizes = layout.SMOKE if args.smoke else layout.FULL
    if args.connections is not None:
        sizes = dataclasses.replace(sizes, connections=args.connections)
    use_kafka = (not args.smoke) if args.kafka is None else args.kafka
    if not args.smoke and not use_kafka:
        print(
            "note: full mode without Kafka measures the in-process bus, not the product's Kafka path", file=sys.stderr
        )
    profile = (not args.smoke) if args.profile is None else args.profile
    profile_seconds = args.profile_seconds or (2.0 if args.smoke else 5.0)
    if args.report:
        report = args.report
    elif args.workers != default_workers or args.redis_bus:
        # never over bench/results/bench.md (nor the default smoke or partial report)
        report = args.out / f"RESULTS.workers{args.workers}.md"
    elif args.smoke:
        report = args.out / "RESULTS.smoke.md"
    elif only is not None and set(only) != set(FIGURES):
        report = args.out / "RESULTS.only.md"
    else:
        report = HERE / "results" / "bench.md"

    async def main_task() -> None:
        # SIGTERM/SIGINT cancel the run, so its finally blocks stop the server, Kafka and PostgreSQL
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        return await run(
            sizes,
            args.out,
            report,
            use_kafka,
            keep_scratch=args.keep,
            only=only,
            profile=profile,
            profile_seconds=profile_seconds,
            workers=args.workers,
            redis_bus=args.redis_bus,
        )

    try:
        results = asyncio.run(main_task())
    except asyncio.CancelledError:
        print("benchmark interrupted", file=sys.stderr)
        return 130
    failed = [
        name
        for name in ("live", "fanout", "connections")
        if name in results["figures"] and "error" in results.get(name, {"error": 1})
    ]
    if failed:
        print(f"benchmark phases failed: {', '.join(failed)} (see the report)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
