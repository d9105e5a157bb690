"""A small graphql-transport-ws (and legacy graphql-ws) client for the benchmark's subscriber processes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import websockets

PROTOCOL = "graphql-transport-ws"
LEGACY = "graphql-ws"


async def subscribe(
    url: str,
    token: str,
    query: str,
    variables: dict | None = None,
    timeout: float = 60,
    protocol: str = PROTOCOL,
    compression: str | None = None,
) -> Any:
    """Open a websocket, connection_init with the bearer token, subscribe as operation "1".

    compression="deflate" offers permessage-deflate as browsers do (`client_max_window_bits`,
    websockets' default offer); None offers no extension."""
    ws = await asyncio.wait_for(
        websockets.connect(
            url,
            subprotocols=[protocol],
            compression=compression,
            ping_interval=None,
            max_size=None,
            open_timeout=timeout,
            close_timeout=2,
            proxy=None,
        ),
        timeout,
    )
    await ws.send(orjson.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}).decode())
    while True:
        frame = orjson.loads(await asyncio.wait_for(ws.recv(), timeout))
        if frame["type"] == "connection_ack":
            break
        if frame["type"] == "ping":
            await ws.send('{"type":"pong"}')
            continue
        if frame["type"] == "ka":  # graphql-ws's keep-alive
            continue
        await ws.close()
        raise RuntimeError(f"websocket refused: {frame}")
    start = "subscribe" if protocol == PROTOCOL else "start"
    await ws.send(
        orjson.dumps({"id": "1", "type": start, "payload": {"query": query, "variables": variables or {}}}).decode()
    )
    return ws


async def receive(ws: Any, on_event) -> None:
    """Call on_event(recv_ns, data) for every `next` frame until the socket closes."""
    try:
        async for raw in ws:
            now = time.monotonic_ns()
            frame = orjson.loads(raw)
            kind = frame.get("type")
            if kind in ("next", "data"):
                payload = frame.get("payload") or {}
                if payload.get("errors"):
                    raise RuntimeError(f"subscription error: {payload['errors']}")
                on_event(now, payload.get("data") or {})
            elif kind == "ping":
                await ws.send('{"type":"pong"}')
            elif kind in ("error", "complete"):
                raise RuntimeError(f"subscription ended: {frame}")
    except websockets.ConnectionClosed:
        pass


async def open_many(
    url: str,
    tokens: list[str],
    query: str,
    variables: dict | None,
    concurrency: int = 50,
    protocol: str = PROTOCOL,
    compression: str | None = None,
) -> tuple[list[Any], list[str]]:
    """Open one subscribed websocket per token, `concurrency` handshakes at a time."""
    gate = asyncio.Semaphore(concurrency)
    errors: list[str] = []

    async def one(tok: str):
        async with gate:
            for attempt in range(3):
                try:
                    return await subscribe(url, tok, query, variables, protocol=protocol, compression=compression)
                except Exception as error:  # noqa: BLE001 - retried, then reported
                    if attempt == 2:
                        errors.append(repr(error))
                        return None
                    await asyncio.sleep(0.2 * (attempt + 1))

    opened = await asyncio.gather(*(one(t) for t in tokens))
    return [ws for ws in opened if ws is not None], errors
