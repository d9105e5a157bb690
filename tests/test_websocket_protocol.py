"""chatgql.server.websocket: the lighter uvicorn websocket protocol `chatgql serve` runs.

The rest of the suite serves with uvicorn's default protocol; these pin that
the lighter one behaves the same: its queue and flag, and a real websocket
session through it (subprotocol, messages both ways, close codes, handshake
state let go).
"""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvicorn
import websockets

from chatgql.server.websocket import LeanDeflate, LeanWebSocketProtocol, _Flag, _Inbox


async def test_inbox_is_fifo_and_get_waits_for_a_put() -> None:
    inbox = _Inbox()
    assert inbox.empty() and inbox.qsize() == 0
    inbox.put_nowait(1)
    inbox.put_nowait(2)
    assert inbox.qsize() == 2
    assert [await inbox.get(), await inbox.get()] == [1, 2]
    assert inbox.empty() and inbox._items is None
    waiting = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    inbox.put_nowait(3)
    assert await waiting == 3
    assert inbox._getters is None


async def test_inbox_get_cancelled_after_its_wake_up_passes_the_item_on() -> None:
    inbox = _Inbox()
    first = asyncio.create_task(inbox.get())
    second = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    inbox.put_nowait("x")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert await second == "x"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_flag_starts_set_and_wait_blocks_only_while_cleared() -> None:
    flag = _Flag()
    assert flag.is_set() and await flag.wait() is True
    flag.clear()
    waiting = asyncio.create_task(flag.wait())
    await asyncio.sleep(0)
    assert not waiting.done()
    flag.set()
    assert await waiting is True
    assert flag._waiters is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_websocket_session_through_the_lean_protocol() -> None:
    protocols: list[LeanWebSocketProtocol] = []

    class Recording(LeanWebSocketProtocol):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            protocols.append(self)

    async def app(scope, receive, send) -> None:
        assert (await receive())["type"] == "websocket.connect"
        if scope["path"] == "/refuse":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "websocket.accept", "subprotocol": "graphql-transport-ws"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message["text"] == "close":
                await send({"type": "websocket.close", "code": 4403, "reason": "Forbidden"})
                return
            await send({"type": "websocket.send", "text": message["text"].upper()})

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, ws=Recording, lifespan="off", log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        url = f"ws://127.0.0.1:{port}"
        async with websockets.connect(url + "/", subprotocols=["graphql-transport-ws"]) as ws:
            assert ws.subprotocol == "graphql-transport-ws"
            for text in ("a", "b" * 100_000, "c"):
                await ws.send(text)
            assert [await ws.recv() for _ in range(3)] == ["A", "B" * 100_000, "C"]
            await ws.ping()
            assert protocols[-1].request is None and protocols[-1].response is None
            await ws.send("close")
            with pytest.raises(websockets.ConnectionClosed):
                await ws.recv()
            assert (ws.close_code, ws.close_reason) == (4403, "Forbidden")
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(url + "/refuse")
        assert refused.value.response.status_code == 403
    finally:
        server.should_exit = True
        await task


async def _serve_echo(protocols: list, **config) -> tuple[uvicorn.Server, asyncio.Task, str]:
    class Recording(LeanWebSocketProtocol):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            protocols.append(self)

    async def app(scope, receive, send) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while (message := await receive())["type"] != "websocket.disconnect":
            await send({"type": "websocket.send", "text": message["text"].upper()})

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, ws=Recording, lifespan="off", log_level="warning", **config)
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    return server, task, f"ws://127.0.0.1:{port}/"


def _deflate(protocol: LeanWebSocketProtocol) -> LeanDeflate:
    (extension,) = protocol.conn.extensions
    assert isinstance(extension, LeanDeflate)
    return extension


async def test_permessage_deflate_holds_no_zlib_state_while_idle() -> None:
    """Offered as browsers offer it: agreed with uvicorn's window bits plus client_no_context_takeover;
    short messages go uncompressed, a stream of long ones shares one compressor (context takeover),
    which is let go once idle, and what follows still decodes on the client's kept window."""
    protocols: list[LeanWebSocketProtocol] = []
    server, task, url = await _serve_echo(protocols, ws_ping_interval=None)
    try:
        async with websockets.connect(url, compression="deflate") as ws:
            agreed = ws.response.headers["Sec-WebSocket-Extensions"]
            assert agreed == (
                "permessage-deflate; client_no_context_takeover; server_max_window_bits=12; client_max_window_bits=12"
            )
            client = ws.protocol.extensions[0]
            assert client.local_no_context_takeover and not client.remote_no_context_takeover
            deflate = _deflate(protocols[-1])
            assert "decoder" not in deflate.__dict__ and "encoder" not in deflate.__dict__
            await ws.send("hi")
            assert await ws.recv() == "HI"  # short both ways: no compressor made
            assert "encoder" not in deflate.__dict__ and "decoder" not in deflate.__dict__
            events = [
                f'{{"type":"next","id":"1","payload":{{"seq":{i},"body":"message {i} {"x" * 80}"}}}}' for i in range(4)
            ]
            for event in events[:2]:
                await ws.send(event)
                assert await ws.recv() == event.upper()
            encoder = deflate.encoder
            assert "decoder" not in deflate.__dict__  # one per incoming message, gone at its end
            deflate.drop_idle_encoder()  # a message went since the last look: kept
            assert deflate.encoder is encoder
            deflate.drop_idle_encoder()  # idle since: let go
            assert "encoder" not in deflate.__dict__
            for event in events[2:]:  # a new compressor; the client's decompressor kept its window
                await ws.send(event)
                assert await ws.recv() == event.upper()
            big = "y" * 200_000
            await ws.send(big)
            assert await ws.recv() == big.upper()
        async with websockets.connect(url, compression=None) as ws:
            assert "Sec-WebSocket-Extensions" not in ws.response.headers
            await ws.send(events[0])
            assert await ws.recv() == events[0].upper()
            assert protocols[-1].conn.extensions == []
    finally:
        server.should_exit = True
        await task


async def test_the_keepalive_ping_lets_an_idle_compressor_go() -> None:
    protocols: list[LeanWebSocketProtocol] = []
    server, task, url = await _serve_echo(protocols, ws_ping_interval=0.05, ws_ping_timeout=5)
    try:
        async with websockets.connect(url, compression="deflate", ping_interval=None) as ws:
            event = "z" * 500
            await ws.send(event)
            assert await ws.recv() == event.upper()
            deflate = _deflate(protocols[-1])
            for _ in range(400):
                if "encoder" not in deflate.__dict__:
                    break
                await asyncio.sleep(0.05)
            assert "encoder" not in deflate.__dict__, "no keepalive ping let the idle compressor go"
            await ws.send(event)
            assert await ws.recv() == event.upper()
    finally:
        server.should_exit = True
        await task
