"""What chatgql.server.httpprotocol and chatgql.server.websocket take from uvicorn's and websockets' internals,
pinned against the versions in pyproject.toml: a closed websocket connection is freed without the
garbage collector (websockets' ServerProtocol and uvicorn's HTTP protocol each refer to themselves
through their parser), and uvicorn's connection limit covers websocket upgrades.

tests/adversarial/test_slow_clients.py tries the deadlines against a production-mode server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import weakref
from collections.abc import AsyncIterator

import pytest
import uvicorn
import websockets

from chatgql.server.httpprotocol import DeadlineHttpProtocol
from chatgql.server.websocket import LeanWebSocketProtocol

from .conftest import free_port


async def _echo(scope, receive, send) -> None:
    if scope["type"] != "websocket":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while (message := await receive())["type"] != "websocket.disconnect":
        await send({"type": "websocket.send", "text": message["text"]})


@contextlib.asynccontextmanager
async def _serving(http: type, ws: type, **options: object) -> AsyncIterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            _echo,
            host="127.0.0.1",
            port=port,
            lifespan="off",
            log_level="warning",
            http=functools.partial(http, header_timeout=5, body_timeout=5),
            ws=ws,
            **options,
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_a_closed_websocket_connection_is_freed_without_the_garbage_collector() -> None:
    http_protocols: list[weakref.ref] = []
    ws_protocols: list[weakref.ref] = []

    class Http(DeadlineHttpProtocol):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            http_protocols.append(weakref.ref(self))

    class Ws(LeanWebSocketProtocol):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            ws_protocols.append(weakref.ref(self.conn))  # websockets' ServerProtocol

    async with _serving(Http, Ws) as address:
        gc.collect()
        gc.disable()
        try:
            async with websockets.connect(f"ws://{address}/", compression="deflate") as ws:
                await ws.send("hello")
                assert await ws.recv() == "hello"
            for _ in range(100):
                if all(ref() is None for ref in http_protocols + ws_protocols):
                    break
                await asyncio.sleep(0.02)
            alive = [type(ref()).__name__ for ref in http_protocols + ws_protocols if ref() is not None]
        finally:
            gc.enable()
    assert len(http_protocols) == len(ws_protocols) == 1
    assert alive == [], f"still alive without a GC pass (reference cycles): {alive}"


async def test_a_websocket_upgrade_past_the_connection_limit_is_answered_503() -> None:
    async with _serving(DeadlineHttpProtocol, LeanWebSocketProtocol, limit_concurrency=2) as address:
        host, port = address.split(":")
        held = [await asyncio.open_connection(host, int(port)) for _ in range(2)]
        await asyncio.sleep(0.1)
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(f"ws://{address}/")
        assert refused.value.response.status_code == 503
        for _, writer in held:
            writer.close()
        await asyncio.sleep(0.1)
        async with websockets.connect(f"ws://{address}/") as ws:  # room again
            await ws.send("x")
            assert await ws.recv() == "x"
