"""chatgql.server.websocket: the lighter uvicorn websocket protocol `chatgql serve` runs.

The rest of the suite serves with uvicorn's default protocol; these pin that
the lighter one behaves the same: its queue and flag, and a real websocket
session through it (subprotocol, messages both ways, close codes, handshake
state let go).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest
import uvicorn
import websockets

from chatgql.server.websocket import (
    _BYTES_PER_TURN,
    _FRAMES_PER_TURN,
    _LINGER_BYTES,
    LeanDeflate,
    LeanWebSocketProtocol,
    _Flag,
    _Inbox,
)


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


async def _serve_echo(
    protocols: list, ws: type[LeanWebSocketProtocol] = LeanWebSocketProtocol, **config
) -> tuple[uvicorn.Server, asyncio.Task, str]:
    class Recording(ws):  # type: ignore[valid-type, misc]
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


def _client_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """A masked client frame (RFC 6455 5.2), with the 16- or 64-bit length as its size needs."""
    mask = os.urandom(4)
    if len(payload) < 126:
        head = bytes([0x80 | opcode, 0x80 | len(payload)])
    elif len(payload) < 1 << 16:
        head = bytes([0x80 | opcode, 0x80 | 126]) + len(payload).to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + len(payload).to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _upgraded(url: str) -> socket.socket:
    host, port = url.removeprefix("ws://").rstrip("/").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(1)
    assert answer.startswith(b"HTTP/1.1 101 "), answer
    return sock


def test_the_frame_cutter_follows_frames_across_any_split() -> None:
    """_cut reads only the frames' headers: whatever the reads' boundaries (inside a header, inside
    a payload), it stops at the end of the N-th frame or after _BYTES_PER_TURN bytes, and ends
    where the stream ends."""
    sizes = [0, 1, 125, 126, 300, 65535, 65536, 70_000, 3, 2]
    frames = [_client_frame(bytes(size)) for size in sizes] * 5
    ends, at = set(), 0
    for frame in frames:
        at += len(frame)
        ends.add(at)
    stream = b"".join(frames)
    for step in (1, 2, 7, 13, 4096, 100_000, len(stream)):
        protocol = LeanWebSocketProtocol.__new__(LeanWebSocketProtocol)
        passed = 0
        for start in range(0, len(stream), step):
            chunk = stream[start : start + step]
            while chunk:
                cut = protocol._cut(chunk)
                assert 0 < cut <= max(_BYTES_PER_TURN, 14), (step, cut)
                passed += cut
                if cut < len(chunk) and cut < _BYTES_PER_TURN:  # stopped for the frame count: at a frame's end
                    assert passed in ends, (step, passed)
                chunk = chunk[cut:]
        assert passed == len(stream)
        assert protocol._frame_left == 0 and protocol._header_part == b"", step


async def test_a_burst_in_one_write_is_parsed_a_bounded_number_of_frames_per_turn() -> None:
    """Thousands of small messages written at once all arrive, in order, at most _FRAMES_PER_TURN of
    them parsed in one turn of the event loop."""
    turn = 0
    per_turn: dict[int, int] = {}
    loop = asyncio.get_running_loop()
    ticking = True

    def tick() -> None:
        nonlocal turn
        turn += 1
        if ticking:
            loop.call_soon(tick)

    class Counting(LeanWebSocketProtocol):
        def send_receive_event_to_app(self) -> None:
            per_turn[turn] = per_turn.get(turn, 0) + 1
            super().send_receive_event_to_app()

    protocols: list[LeanWebSocketProtocol] = []
    server, task, url = await _serve_echo(protocols, ws=Counting, ws_ping_interval=None)
    sock = await asyncio.to_thread(_upgraded, url)
    try:
        tick()
        texts = [f"m{i}" for i in range(3000)] + ["x" * 70_000, "last"]
        burst = b"".join(_client_frame(text.encode()) for text in texts)
        received = bytearray()
        await asyncio.to_thread(sock.sendall, burst)

        def read_all() -> None:
            want = sum(len(t) for t in texts)
            while sum(len(p) for p in _payloads(received)) < want:
                received.extend(sock.recv(1 << 20))

        await asyncio.wait_for(asyncio.to_thread(read_all), 60)
        assert [p.decode() for p in _payloads(received)] == [t.upper() for t in texts]
        assert max(per_turn.values()) <= _FRAMES_PER_TURN, per_turn
        assert len(per_turn) >= len(texts) / _FRAMES_PER_TURN
    finally:
        ticking = False
        sock.close()
        server.should_exit = True
        await task


def _payloads(data: bytes | bytearray) -> list[bytes]:
    """The complete (unmasked) server frames' payloads in data."""
    payloads, at = [], 0
    while at + 2 <= len(data):
        length, head = data[at + 1] & 0x7F, 2
        if length == 126:
            if at + 4 > len(data):
                break
            length, head = int.from_bytes(data[at + 2 : at + 4], "big"), 4
        elif length == 127:
            if at + 10 > len(data):
                break
            length, head = int.from_bytes(data[at + 2 : at + 10], "big"), 10
        if at + head + length > len(data):
            break
        payloads.append(bytes(data[at + head : at + head + length]))
        at += head + length
    return payloads


async def test_after_its_close_frame_a_peer_that_keeps_sending_is_no_longer_read_and_is_closed() -> None:
    """The server closed (as for 4429); the peer ignores it and writes on: what is parsed after the
    close frame is bounded, then nothing more is read, and the connection ends within the linger."""

    async def app(scope, receive, send) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await receive()
        await send({"type": "websocket.close", "code": 4429, "reason": "Too many messages"})

    protocols: list[LeanWebSocketProtocol] = []

    class Recording(LeanWebSocketProtocol):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            protocols.append(self)

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, ws=Recording, lifespan="off", log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    sock = await asyncio.to_thread(_upgraded, f"ws://127.0.0.1:{port}/")
    frame = _client_frame(b'{"type":"ping"}')
    try:

        def flood() -> tuple[bytes, bool]:
            sock.settimeout(0.2)
            received, ended = bytearray(), False
            chunk = frame * 200
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not ended:
                try:
                    sock.send(chunk)
                except TimeoutError:
                    pass
                except OSError:
                    ended = True
                try:
                    while data := sock.recv(65536):
                        received.extend(data)
                    ended = True  # EOF: the server closed
                except TimeoutError:
                    pass
                except OSError:
                    ended = True
            return bytes(received), ended

        received, ended = await asyncio.to_thread(flood)
        assert ended, "the server kept the connection open"
        close = _payloads(received)[-1]
        assert close[:2] == (4429).to_bytes(2, "big") and close[2:] == b"Too many messages", received[-40:]
        protocol = protocols[-1]
        assert protocol._deaf
        assert protocol._after_close <= _LINGER_BYTES + (1 << 20), protocol._after_close
    finally:
        sock.close()
        server.should_exit = True
        await task
