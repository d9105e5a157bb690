"""connections: the server's memory per idle websocket holding one subscription.

A few warm-up connections first (so one-time allocations are not counted),
then the server's RSS; then N more idle websockets (each: connection_init and
`subscription { messageNew { ... } }` over all of the user's conversations,
one user per socket) from several client processes; RSS again once the
server reports every subscription active. KB each = RSS growth / N.

Measured for each protocol (graphql-transport-ws, the legacy graphql-ws) with
permessage-deflate offered as browsers offer it (`permessage-deflate;
client_max_window_bits`) and with no extension offered, each on a fresh server
process (one whose earlier sockets were closed has freed memory to reuse, which
would hide what new ones cost; smoke mode, which checks the mechanics, uses one). The figure with a target is graphql-transport-ws
with deflate offered: what a browser's socket costs.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time

from . import layout
from .infra import die_with_parent, log, queue_get, use_uvloop
from .queries import SUB_ALL, token

# (protocol, compression offered): the first is the headline figure (kb_per_subscription)
VARIANTS = (
    ("graphql-transport-ws", "deflate"),
    ("graphql-transport-ws", None),
    ("graphql-ws", "deflate"),
    ("graphql-ws", None),
)


def variant_name(protocol: str, compression: str | None) -> str:
    return f"{protocol}, {'deflate offered' if compression else 'no extension'}"


def _client(url: str, user_ids: list[int], stop, out, protocol: str, compression: str | None) -> None:
    die_with_parent()
    use_uvloop()
    from .ws import open_many

    async def main() -> None:
        tokens = [token(u) for u in user_ids]
        t0 = time.monotonic()
        sockets, errors = await open_many(
            url, tokens, SUB_ALL, None, concurrency=64, protocol=protocol, compression=compression
        )
        # what the server answered to the offer (its Sec-WebSocket-Extensions), as the first socket got it
        agreed = sockets[0].response.headers.get("Sec-WebSocket-Extensions") if sockets else None
        out.put(("ready", len(sockets), errors[:3], time.monotonic() - t0, agreed))
        while not stop.is_set():
            await asyncio.sleep(0.1)
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)

    try:
        asyncio.run(main())
    except Exception as error:  # noqa: BLE001
        out.put(("error", repr(error), None, None, None))


def _start(ctx, url: str, users: list[int], procs_n: int, stop, out, variant: tuple[str, str | None]):
    parts = [users[i::procs_n] for i in range(procs_n)]
    procs = [ctx.Process(target=_client, args=(url, part, stop, out, *variant), daemon=True) for part in parts if part]
    for p in procs:
        p.start()
    return procs


async def _wait_ready(procs, out) -> tuple[int, list[str], str | None]:
    opened, errors, agreed = 0, [], None
    for _ in procs:
        kind, n, errs, _seconds, extensions = await asyncio.to_thread(queue_get, out, procs, 1800, "connections")
        if kind != "ready":
            raise RuntimeError(f"connection client failed: {n}")
        opened += n
        errors += errs
        agreed = agreed or extensions
    return opened, errors, agreed


async def _settle(server, expected: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    active = 0
    while time.monotonic() < deadline:
        active = await asyncio.to_thread(server.active_subscriptions)
        if active >= expected:
            break
        await asyncio.sleep(0.1)
    return active


async def _drained(server, level: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and await asyncio.to_thread(server.active_subscriptions) > level:
        await asyncio.sleep(0.1)


async def _rss_stable(server, seconds: float = 2.0) -> int:
    """RSS after it stops moving (sampled every 0.25 s for `seconds`; the last sample)."""
    samples = []
    for _ in range(int(seconds / 0.25)):
        samples.append(server.rss())
        await asyncio.sleep(0.25)
    return samples[-1]


async def run(server, sizes: layout.Sizes, fresh_server=None) -> dict:
    """Every variant; fresh_server(old) -> a new server process (the old one stopped) between them.
    The headline figures (kb_per_subscription ...) are the first variant's."""
    by_variant: dict[str, dict] = {}
    start = await asyncio.to_thread(server.active_subscriptions)
    for i, variant in enumerate(VARIANTS):
        if i and fresh_server is not None:
            server = await fresh_server(server)
        elif i:
            await _drained(server, start)  # the one server: the last variant's sockets are gone first
        name = variant_name(*variant)
        log(f"connections: {name}")
        by_variant[name] = await run_one(server, sizes, variant)
        log(f"connections: {name}: {by_variant[name]['kb_per_subscription']} KB per idle subscription")
    first = by_variant[variant_name(*VARIANTS[0])]
    return {
        **first,
        "variant": variant_name(*VARIANTS[0]),
        "variants": by_variant,
        "fresh_server_per_variant": fresh_server is not None,
    }


async def run_one(server, sizes: layout.Sizes, variant: tuple[str, str | None]) -> dict:
    ctx = mp.get_context("spawn")
    stop_warm, stop_main, out = ctx.Event(), ctx.Event(), ctx.Queue()
    users = [layout.CONN_USER + i for i in range(1, sizes.connection_warmup + sizes.connections + 1)]
    warm_users, main_users = users[: sizes.connection_warmup], users[sizes.connection_warmup :]
    base = await asyncio.to_thread(server.active_subscriptions)
    rss_idle = server.rss()
    warm = _start(ctx, server.ws_url, warm_users, 1, stop_warm, out, variant)
    warm_opened, warm_errors, _ = await _wait_ready(warm, out)
    await _settle(server, base + warm_opened)
    settle = 2.0 if sizes.mode == "full" else 0.5
    rss_before = await _rss_stable(server, settle)
    log(f"connections: opening {len(main_users)} websockets")
    t0 = time.monotonic()
    procs = _start(ctx, server.ws_url, main_users, sizes.connection_procs, stop_main, out, variant)
    try:
        opened, errors, agreed = await _wait_ready(procs, out)
        active = await _settle(server, base + warm_opened + opened)
        open_seconds = time.monotonic() - t0
        rss_after = await _rss_stable(server, settle)
        log(
            f"connections: {opened} open in {open_seconds:.1f} s, server RSS {rss_before >> 20} -> {rss_after >> 20} MiB"
        )
    finally:
        stop_main.set()
        stop_warm.set()
        for p in procs + warm:
            p.join(60)
            if p.is_alive():
                p.kill()
    per_kb = (rss_after - rss_before) / opened / 1024 if opened else None
    return {
        "protocol": variant[0],
        "compression_offered": variant[1],
        "requested": len(main_users),
        "opened": opened,
        "extensions_agreed": agreed,  # the server's Sec-WebSocket-Extensions answer (None: none)
        "open_errors": (warm_errors + errors)[:3],
        "warmup_connections": warm_opened,
        "client_processes": len(procs),
        "server_active_subscriptions": active - base,
        "open_seconds": round(open_seconds, 2),
        "rss_idle_mb": round(rss_idle / 2**20, 1),
        "rss_before_mb": round(rss_before / 2**20, 1),
        "rss_after_mb": round(rss_after / 2**20, 1),
        "kb_per_subscription": round(per_kb, 2) if per_kb is not None else None,
    }
