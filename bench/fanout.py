"""fanout: one message to a group whose every member holds a messageNew subscription
on it, selecting seen and seenByCount as a group chat's read receipts do; time from the send request's start until the last member has the event.

The members' websockets are spread over several client processes (one Python
process reading 1,000 sockets would itself add tens of ms); each process
reports its receive times (CLOCK_MONOTONIC, one clock machine-wide).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import statistics
import time
from dataclasses import dataclass

import orjson

from . import layout
from .infra import CpuMeter, die_with_parent, log, process_cpu, queue_get, use_uvloop
from .live import stats_ms
from .queries import SUB_FANOUT, send_body, token
from .rawhttp import Pool


def _client(url: str, user_ids: list[int], conversation_id: int, stop, out, query: str = SUB_FANOUT) -> None:
    die_with_parent()
    use_uvloop()
    from .ws import open_many, receive

    async def main() -> None:
        tokens = [token(u) for u in user_ids]
        sockets, errors = await open_many(url, tokens, query, {"c": str(conversation_id)})
        out.put(("ready", len(sockets), errors[:3]))
        times: dict[int, list[int]] = {}
        n = len(sockets)

        def on_event(now: int, data: dict) -> None:
            seq = data["messageNew"]["seq"]
            got = times.setdefault(seq, [])
            got.append(now)
            if len(got) == n:
                out.put(("round", seq, got))

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


@dataclass
class Members:
    """The group's members' websockets, held by client processes (see open_members)."""

    members: list[int]
    procs: list
    stop: object
    out: object
    opened: int
    open_errors: list[str]
    open_seconds: float

    def cpu_sources(self) -> dict:
        return {f"client{i}": (lambda pid=p.pid: process_cpu(pid)) for i, p in enumerate(self.procs)}

    def close(self) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(20)
            if p.is_alive():
                p.kill()


def _subscriptions(servers: list) -> int:
    return sum(s.active_subscriptions() for s in servers)


async def open_members(servers: list, sizes: layout.Sizes, query: str = SUB_FANOUT, timeout: float = 180) -> Members:
    """Every member of the fanout group subscribes (`query`, variable $c) over sizes.fanout_procs
    client processes; client process i holds its sockets on servers[i % len(servers)]; each process
    has `timeout` seconds to open its sockets."""
    members = [layout.FANOUT_MEMBER + j for j in range(1, sizes.fanout_members + 1)]
    procs_n = max(1, min(sizes.fanout_procs, len(members)))
    parts = [members[i::procs_n] for i in range(procs_n)]
    ctx = mp.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_client,
            args=(servers[i % len(servers)].ws_url, part, layout.FANOUT_CID, stop, out, query),
            daemon=True,
        )
        for i, part in enumerate(parts)
    ]
    base_subs = await asyncio.to_thread(_subscriptions, servers)
    t_open = time.monotonic()
    for p in procs:
        p.start()
    group = Members(members, procs, stop, out, 0, [], 0.0)
    try:
        for _ in procs:
            kind, n, errs = await asyncio.to_thread(queue_get, out, procs, timeout, "fanout clients")
            if kind != "ready":
                raise RuntimeError(f"fanout client failed: {n}")
            group.opened += n
            group.open_errors += errs or []
        expected = base_subs + group.opened
        for _ in range(600):
            if await asyncio.to_thread(_subscriptions, servers) >= expected:
                break
            await asyncio.sleep(0.05)
    except BaseException:
        group.close()
        raise
    group.open_seconds = time.monotonic() - t_open
    log(f"fanout: {group.opened} subscribers over {len(servers)} server(s) in {group.open_seconds:.1f} s")
    return group


async def run(server, sizes: layout.Sizes, cpu_sources: dict, servers: list | None = None) -> dict:
    """servers: the API processes the members' sockets are spread over (default: [server]);
    the sends go to `server`."""
    group = await open_members(servers or [server], sizes)
    members, procs = group.members, group.procs
    sources = {**cpu_sources, **group.cpu_sources()}

    pool = await Pool("127.0.0.1", server.port, 2).open()
    sender = f"Bearer {token(members[0])}"
    rounds = []
    try:
        for r in range(sizes.fanout_rounds):
            await asyncio.sleep(0.5)
            meter = CpuMeter(sources).start()
            t0 = time.monotonic_ns()
            status, payload = await pool.post(send_body(layout.FANOUT_CID, f"fanout round {r}"), sender)
            ack = time.monotonic_ns()
            if status != 200 or b'"errors"' in payload:
                raise RuntimeError(f"fanout send failed: HTTP {status} {payload[:300]!r}")
            seq = orjson.loads(payload)["data"]["sendMessage"]["message"]["seq"]
            received: list[int] = []
            reports = 0
            deadline = time.monotonic() + 60
            while reports < len(procs):
                try:
                    kind, got_seq, times = await asyncio.to_thread(
                        queue_get, group.out, procs, max(0.1, deadline - time.monotonic()), "fanout round"
                    )
                except RuntimeError as error:
                    raise RuntimeError(
                        f"fanout round {r}: only {reports}/{len(procs)} client processes got seq {seq}"
                    ) from error
                if kind == "error":
                    raise RuntimeError(f"fanout client failed: {got_seq}")
                if kind == "round" and got_seq == seq:
                    reports += 1
                    received += times
            cpu = meter.stop()
            lat = [t - t0 for t in received]
            rounds.append(
                {
                    "seq": seq,
                    "recipients": len(lat),
                    "ack_ms": round((ack - t0) / 1e6, 2),
                    "last_ms": round(max(lat) / 1e6, 2),
                    "first_ms": round(min(lat) / 1e6, 2),
                    "median_ms": round(statistics.median(lat) / 1e6, 2),
                    "cpu": cpu,
                }
            )
            log(f"fanout round {r}: last of {len(lat)} after {rounds[-1]['last_ms']} ms")
    finally:
        pool.close()
        group.close()
    lasts = [r["last_ms"] for r in rounds]
    return {
        "members": len(members),
        "subscribed": group.opened,
        "open_errors": group.open_errors[:3],
        "client_processes": len(procs),
        "api_processes": len(servers or [server]),
        "open_seconds": round(group.open_seconds, 2),
        "rounds": rounds,
        "last_ms_median": round(statistics.median(lasts), 2),
        "last_ms_max": max(lasts),
        "last_ms_stats": stats_ms([int(x * 1e6) for x in lasts]),
    }
