"""chatgql.websocket: the lighter uvicorn websocket protocol `chatgql serve` runs.

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

from chatgql.websocket import LeanWebSocketProtocol, _Flag, _Inbox


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
