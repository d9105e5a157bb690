"""python -m bench.wsprobe [--sockets N] [--protocol P] [--deflate | --no-deflate] [--frames F] [--top K]

Where an idle subscribed websocket's bytes go, on the server: `chatgql serve` runs with
tracemalloc (PYTHONTRACEMALLOC=F frames), N idle websockets are opened as bench/connections.py
opens them (connection_init, one `messageNew` subscription each), and two snapshots of the
server's allocations, taken before and after (on SIGUSR1, by a sitecustomize hook of this
module's), are compared grouped by traceback: the top K, each as bytes per socket. The
server's RSS growth per socket is printed too (tracemalloc's own bookkeeping is in it, so it
reads higher than bench/connections.py's figure). Memory allocated by C code through
malloc (zlib's permessage-deflate state goes through PyMem_RawMalloc, and is seen) that
bypasses Python's allocators is not in the snapshots.

Not part of `python -m bench`: an investigation tool (bench/results/bench.md's websocket
memory section was found with it).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import signal
import tempfile
import time
import tracemalloc
from pathlib import Path

from chatgql import db

from . import connections
from .infra import Postgres, Server, log, raise_fd_limit

HOOK = """
import os, signal
if os.environ.get("WSPROBE_SNAPSHOT"):
    import tracemalloc
    _n = [0]
    def _dump(signum, frame):
        path = os.environ["WSPROBE_SNAPSHOT"] + "." + str(_n[0])
        _n[0] += 1
        tracemalloc.take_snapshot().dump(path)
        os.rename(path, path + ".done")
    signal.signal(signal.SIGUSR1, _dump)
"""


async def _snapshot(server: Server, base: Path, n: int) -> tracemalloc.Snapshot:
    done = Path(f"{base}.{n}.done")
    os.kill(server.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 300
    while not done.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the server wrote no snapshot")
        await asyncio.sleep(0.2)
    return tracemalloc.Snapshot.load(str(done))


async def _open(server: Server, users: list[int], procs_n: int, variant, stop, out, ctx):
    procs = connections._start(ctx, server.ws_url, users, procs_n, stop, out, variant)
    opened, errors, agreed = await connections._wait_ready(procs, out)
    return procs, opened, errors, agreed


async def main(args) -> None:
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-wsprobe-"))
    hook = scratch / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    pg = await asyncio.to_thread(Postgres.start, scratch / "pg")
    server = None
    procs: list = []
    stop = None
    try:
        await db.upgrade(pg.url)
        server = Server(pg.url, scratch, None)
        base = scratch / "snap"
        server.env.update(
            PYTHONTRACEMALLOC=str(args.frames),
            WSPROBE_SNAPSHOT=str(base),
            PYTHONPATH=str(hook) + os.pathsep + server.env.get("PYTHONPATH", ""),
        )
        server.spawn()
        await asyncio.to_thread(server.wait_ready, 900)  # importing under tracemalloc is slow
        variant = (args.protocol, "deflate" if args.deflate else None)
        log(f"wsprobe: {connections.variant_name(*variant)}, {args.sockets} sockets, {args.frames} frames")
        ctx = mp.get_context("spawn")
        stop, out = ctx.Event(), ctx.Queue()
        first = 6_000_001
        warm, n_warm, _, _ = await _open(server, list(range(first, first + args.warmup)), 1, variant, stop, out, ctx)
        procs += warm
        await connections._settle(server, n_warm)
        await asyncio.sleep(1)
        rss0 = server.rss()
        before = await _snapshot(server, base, 0)
        users = list(range(first + args.warmup, first + args.warmup + args.sockets))
        main_procs, opened, errors, agreed = await _open(server, users, 2, variant, stop, out, ctx)
        procs += main_procs
        await connections._settle(server, n_warm + opened)
        await asyncio.sleep(1)
        rss1 = server.rss()
        after = await _snapshot(server, base, 1)
        log(f"wsprobe: {opened} opened ({errors[:1]}), extensions agreed: {agreed}")
        stats = after.compare_to(before, "traceback")
        total = sum(s.size_diff for s in stats)
        print(
            f"\n{opened} sockets: traced growth {total / opened / 1024:.2f} KB per socket; "
            f"RSS growth {(rss1 - rss0) / opened / 1024:.2f} KB per socket (tracemalloc's own bookkeeping included)\n"
        )
        for stat in stats[: args.top]:
            if stat.size_diff <= 0:
                continue
            print(f"{stat.size_diff / opened:8.0f} B/socket  {stat.count_diff / opened:6.2f} blocks/socket")
            for line in stat.traceback.format()[-2 * args.show :]:
                print("    " + line)
        if args.by_file:
            print("\nby file (last frame):")
            for stat in after.compare_to(before, "filename")[: args.top]:
                print(f"{stat.size_diff / opened:8.0f} B/socket  {stat.traceback[0].filename}")
    finally:
        if stop is not None:
            stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
        if server is not None:
            await asyncio.to_thread(server.stop)
        pg.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.wsprobe", description=__doc__.split("\n\n")[1])
    parser.add_argument("--sockets", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--protocol", default="graphql-transport-ws", choices=("graphql-transport-ws", "graphql-ws"))
    deflate = parser.add_mutually_exclusive_group()
    deflate.add_argument("--deflate", dest="deflate", action="store_true", default=True)
    deflate.add_argument("--no-deflate", dest="deflate", action="store_false")
    parser.add_argument("--frames", type=int, default=12, help="frames tracemalloc keeps per allocation")
    parser.add_argument("--show", type=int, default=6, help="frames printed per traceback (innermost)")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--by-file", action="store_true")
    asyncio.run(main(parser.parse_args()))
